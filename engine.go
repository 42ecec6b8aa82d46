package reprise

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"reprise/clock"
	"reprise/retry"
	"reprise/store"
)

// Config configures an Engine. Its zero value, with a Store, works.
type Config struct {
	// Store holds all durable state. Required.
	Store store.Store
	// Clock tells time; give the Store the same clock's Now.
	// Default: clock.System.
	Clock clock.Clock
	// Logger receives the engine's logs. Default: none.
	Logger *slog.Logger
	// WorkerID names this engine in leases and history. One live engine
	// at a time may use an id: Run refuses a second (ErrEngineLive). An
	// engine restarted under the id of a dead one takes back, at once,
	// what that one held. Default: hostname-pid-random.
	WorkerID string
	// DefaultPolicy is the policy of a step called without one whose name
	// matches no entry of Policies. Default: retry.Default (3 attempts,
	// exponential backoff from 1 s, doubling, capped at 1 min).
	DefaultPolicy *retry.Policy
	// Policies holds default policies by step name: an exact name, or a
	// prefix pattern ending in ".*" ("llm.*" covers "llm.chat"). The longest
	// match wins; a policy given where the step is defined or called wins
	// over these. Default: none.
	Policies map[string]retry.Policy
	// MaxConcurrentSteps caps the attempts this engine runs at once (in
	// step code). An attempt's outcome is written after it leaves its slot,
	// so an engine holds up to four times as many leases. Default: 100.
	MaxConcurrentSteps int
	// LeaseTTL is how long an attempt's lease lasts between heartbeats; a
	// worker that dies is noticed this long after. Default: 30 s.
	LeaseTTL time.Duration
	// RunLeaseTTL is how long this engine holds a run it executes between
	// renewals. A crashed engine's runs are taken over as soon as another
	// engine sees it gone (within PollInterval), and at the latest this
	// long after. Default: 30 s.
	RunLeaseTTL time.Duration
	// ShutdownGrace is how long running attempts may finish after Run's
	// context ends before they are cancelled. Default: 10 s.
	ShutdownGrace time.Duration
	// PollInterval is how often the engine looks for work it was not told
	// about (runs started by other processes, steps scheduled by other
	// engines on its store in this process) and for engines that died
	// without stopping. Default: 1 s.
	PollInterval time.Duration
	// UnclaimedAfter is how long a step may stay ready without any engine
	// or pull worker claiming it before the engine says so: it logs the
	// step once at warn level (run_id, step, since, why), and RunWaiting
	// (GET /v1/runs/{id}, reprise show) reports the run as waiting for
	// it, saying whether any step of that name is registered here.
	// Default: 30 s; negative: never.
	UnclaimedAfter time.Duration
	// PoisonAfter is how many leases of one step may lapse in a row,
	// without any result, before the step fails as Poison instead of
	// being offered again: its workers keep dying. Default: 5; negative
	// never.
	PoisonAfter int
	// MaxResidentRuns caps the runs whose workflow code this engine keeps
	// in memory (a goroutine and the replay state, some 20 KB each). Past
	// it, runs whose workflow waits for something other than an attempt
	// of this engine (a backoff, a timer, a signal, a child run, a step in
	// another process's hands) are evicted, least recently active first,
	// down to 90% of the cap: the engine keeps their leases, and replays
	// each from its history when its next event comes. Runs busy in
	// workflow code or waiting for this engine's attempts are never
	// evicted, so the cap may be passed while they are many.
	// Default: 10 × MaxConcurrentSteps, at least 2,000; negative: no cap.
	MaxResidentRuns int
	// MaxPendingRuns caps the runs started through this engine that wait
	// to start: StartRun calls under way, and runs whose first steps found
	// no room and wait in the queue (until one of them is leased, here or
	// by any worker, or the run hears of an outcome). Past it, StartRun
	// refuses a new run with ErrBusy; a start whose id exists is never
	// refused, and a run admitted is never dropped. Runs started while the
	// engine is not running are created for any engine to claim and are
	// not counted. Default: 10 × MaxConcurrentSteps (1,000); negative: no
	// cap, the queue is in the store (bulk loads), and memory stays
	// bounded by MaxResidentRuns all the same.
	MaxPendingRuns int
	// Observer hears every attempt, decision and run end as the engine
	// makes it, and when the engine turns busy or idle (see Observer);
	// its methods must be fast and must not block. Without one, the
	// engine pays a nil check per event. Default: none.
	Observer Observer
	// Tracer gives runs a trace context and attempts a traceparent, for
	// the spans of a tracing Observer (package otel implements both).
	// Default: none; runs keep the traceparent they were started with
	// (WithTraceParent) and nothing else is traced.
	Tracer Tracer
}

// An Engine runs workflows and their steps against a Store.
type Engine struct {
	cfg           Config
	store         store.Store
	clock         clock.Clock
	log           *slog.Logger
	id            string
	defaultPolicy *compiledPolicy
	policies      map[string]*compiledPolicy

	mu        sync.Mutex
	workflows map[string]*workflowEntry
	steps     map[string]*stepEntry
	remote    map[string]*stepEntry
	replayers map[string]*replayer // by run id: the runs this engine executes
	// ready is closed once Run has started (Ready).
	ready     chan struct{}
	readyOnce sync.Once
	// parked holds the runs this engine leases whose replayers it evicted
	// (park.go); blocks counts the replayers' blocks, to order them by
	// when they were last active; evictShort says that the last eviction
	// found too few to evict, so the next block tries again; draining,
	// that the resident runs passed the limit and are not yet down to the
	// low water (park.go).
	parked map[string]parkedRun
	// startsUnderWay counts the StartRun calls admitted and not yet
	// settled, queuedStarts the runs started here whose first steps wait
	// in the queue (admit.go).
	startsUnderWay int
	queuedStarts   map[string]struct{}
	draining       bool
	blocks         atomic.Uint64
	evictShort     atomic.Bool
	evictc         chan struct{}
	waiters        map[string][]chan *Run
	// attempts are the leases this engine holds; inSlots and perStep
	// count those in slots, waiting the retries waiting for one (see
	// heldPerSlot).
	attempts map[int64]*attempt
	inSlots  int
	perStep  map[string]int
	waiting  []*attempt
	// claiming counts the runs claimed (claimRunsOnce) whose room is still
	// counted as their claim's (see releaseClaim); moreRuns says that the
	// last claim took all it asked for.
	claiming int
	moreRuns bool
	// reserved counts room held for steps being leased as they are
	// scheduled (see reserve), in all and by step name.
	reserved   int
	reservedBy map[string]int
	running    bool
	starting   bool
	// startedAt is when Run recorded this engine as live; gone names the
	// engines found dead, suspects those found so once (takeover.go;
	// suspects is the claimRuns loop's alone).
	startedAt time.Time
	gone      map[string]bool
	suspects  map[string]bool

	// The scopes Run owns, set by Run: runCtx is the parent of the
	// replayers' contexts, workCtx of the attempts' (cancelled after the
	// grace), storeCtx of store calls that must finish even while stopping.
	// Replayers and attempts start on goroutines Run does not (StartRun's,
	// clock callbacks), so the scopes are kept here, not passed down.
	runCtx   context.Context //nolint:containedctx // a scope Run owns; see above
	stopRuns context.CancelCauseFunc
	storeCtx context.Context //nolint:containedctx // a scope Run owns; see above
	workCtx  context.Context //nolint:containedctx // a scope Run owns; see above
	stopWork context.CancelCauseFunc

	kickc        chan struct{}
	claimc       chan struct{} // wakes claimRuns
	replayersWG  sync.WaitGroup
	workWG       sync.WaitGroup
	childCancels sync.WaitGroup // see cancelChild
	goroutines   *gopool        // runs replayers and attempts
	decoded      sync.Map       // string(policy JSON) → *compiledPolicy

	// act tells the Observer when the engine is busy and when idle; nil
	// without an Observer (see activity).
	act *activity

	// wakeAt is when the sleeping dispatcher next looks at the store, in
	// Unix nanoseconds; 0 while it is awake. taskDueAt is when the
	// earliest ready task of the steps this engine runs, as far as it
	// knows, became or becomes ready; 0 for none (see dueWaiting).
	wakeAt    atomic.Int64
	taskDueAt atomic.Int64
}

// New returns an engine; it does nothing until Run.
func New(cfg Config) (*Engine, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("config: Store is required"))
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = defaultWorkerID()
	}
	for name, d := range map[string]*time.Duration{
		"LeaseTTL": &cfg.LeaseTTL, "RunLeaseTTL": &cfg.RunLeaseTTL,
		"ShutdownGrace": &cfg.ShutdownGrace, "PollInterval": &cfg.PollInterval,
	} {
		if *d < 0 {
			errs = append(errs, fmt.Errorf("config: %s %v is negative", name, *d))
		}
	}
	cfg.LeaseTTL = cmp.Or(cfg.LeaseTTL, 30*time.Second)
	cfg.RunLeaseTTL = cmp.Or(cfg.RunLeaseTTL, 30*time.Second)
	cfg.ShutdownGrace = cmp.Or(cfg.ShutdownGrace, 10*time.Second)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, time.Second)
	cfg.UnclaimedAfter = cmp.Or(cfg.UnclaimedAfter, 30*time.Second)
	if cfg.MaxConcurrentSteps < 0 {
		errs = append(errs, fmt.Errorf("config: MaxConcurrentSteps %d is negative", cfg.MaxConcurrentSteps))
	}
	if cfg.MaxConcurrentSteps == 0 {
		cfg.MaxConcurrentSteps = 100
	}
	if cfg.MaxPendingRuns == 0 {
		cfg.MaxPendingRuns = 10 * cfg.MaxConcurrentSteps
	}
	if cfg.MaxResidentRuns == 0 {
		cfg.MaxResidentRuns = max(10*cfg.MaxConcurrentSteps, 2000)
	}
	if cfg.PoisonAfter == 0 {
		cfg.PoisonAfter = 5
	}
	e := &Engine{
		cfg: cfg, store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, id: cfg.WorkerID,
		ready:        make(chan struct{}),
		policies:     make(map[string]*compiledPolicy),
		workflows:    make(map[string]*workflowEntry),
		steps:        make(map[string]*stepEntry),
		remote:       make(map[string]*stepEntry),
		replayers:    make(map[string]*replayer),
		parked:       make(map[string]parkedRun),
		queuedStarts: make(map[string]struct{}),
		evictc:       make(chan struct{}, 1),
		waiters:      make(map[string][]chan *Run),
		attempts:     make(map[int64]*attempt),
		goroutines:   newGopool(time.Second),
		perStep:      make(map[string]int),
		reservedBy:   make(map[string]int),
		gone:         make(map[string]bool),
		kickc:        make(chan struct{}, 1),
		claimc:       make(chan struct{}, 1),
		act:          newActivity(cfg.Observer),
	}
	def := retry.Default
	if cfg.DefaultPolicy != nil {
		def = *cfg.DefaultPolicy
	}
	var err error
	if e.defaultPolicy, err = compilePolicy(def); err != nil {
		errs = append(errs, fmt.Errorf("config: DefaultPolicy: %w", err))
	}
	for name, p := range cfg.Policies {
		if e.policies[name], err = compilePolicy(p); err != nil {
			errs = append(errs, fmt.Errorf("config: Policies[%q]: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return e, nil
}

func defaultWorkerID() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// WorkerID returns the name this engine holds leases under.
func (e *Engine) WorkerID() string { return e.id }

// Ready returns a channel closed once Run has started: from then on, a run
// StartRun creates is leased to this engine and counts towards its limits
// (MaxPendingRuns); before, it is created for whichever engine claims it.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// A Definition is a workflow or step to register.
type Definition interface {
	entry() (any, error)
}

// Register makes workflows and steps known to the engine by name. A name
// registered again, by a later call, replaces the earlier definition for
// calls made after. Register is all or nothing: if any definition is
// invalid, or two of them are a workflow or a step of the same name, it
// registers none and says which.
func (e *Engine) Register(defs ...Definition) error {
	var errs []error
	entries := make([]any, 0, len(defs))
	seen := make(map[string]int) // "workflow NAME" or "step NAME" → index
	for i, d := range defs {
		ent, err := d.entry()
		if err != nil {
			errs = append(errs, fmt.Errorf("register definition %d: %w", i+1, err))
			continue
		}
		var kind, name string
		switch ent := ent.(type) {
		case *workflowEntry:
			kind, name = "workflow", ent.name
		case *stepEntry:
			kind, name = "step", ent.name
		}
		if name == "" {
			errs = append(errs, fmt.Errorf("register definition %d: %s name is empty", i+1, kind))
			continue
		}
		key := fmt.Sprintf("%s %q", kind, name)
		if j, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("register: %s is given twice, as definitions %d and %d", key, j+1, i+1))
			continue
		}
		seen[key] = i
		entries = append(entries, ent)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ent := range entries {
		switch ent := ent.(type) {
		case *workflowEntry:
			e.workflows[ent.name] = ent
		case *stepEntry:
			e.steps[ent.name] = ent
			delete(e.remote, ent.name)
		}
	}
	e.kick()
	return nil
}

// Run runs the engine until ctx ends: it executes workflows, claims and
// runs steps, fires timers and reaps lapsed leases. On the way out it stops
// claiming, lets running attempts finish for ShutdownGrace, then cancels
// them with cause ErrShutdown; their leases lapse and they are retried by
// the next engine.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	if e.running || e.starting {
		e.mu.Unlock()
		return errors.New("engine is already running")
	}
	e.starting = true
	e.mu.Unlock()
	// Nothing is leased to this engine before it has released what its
	// dead incarnation held under the same id.
	err := e.identify(context.WithoutCancel(ctx))
	e.mu.Lock()
	e.starting = false
	if err != nil {
		e.mu.Unlock()
		return err
	}
	e.running = true
	e.readyOnce.Do(func() { close(e.ready) })
	e.storeCtx = context.WithoutCancel(ctx)
	e.runCtx, e.stopRuns = context.WithCancelCause(e.storeCtx)
	e.workCtx, e.stopWork = context.WithCancelCause(e.storeCtx)
	e.mu.Unlock()
	defer e.joinPeers()()

	var loops sync.WaitGroup
	loops.Go(func() { e.dispatch(ctx) })
	loops.Go(func() { e.claimRuns(ctx) })
	loops.Go(func() { e.watchWaiting(ctx) })
	loops.Go(func() { e.evictRuns(ctx) })
	if n, ok := e.store.(store.Notifier); ok {
		loops.Go(func() {
			if err := n.Listen(ctx, e.notice); err != nil && ctx.Err() == nil {
				e.log.Warn("listen for notices; polling instead", "err", err)
			}
		})
	}
	<-ctx.Done()
	loops.Wait()

	e.mu.Lock()
	e.running = false
	clear(e.parked) // their leases are released below
	clear(e.queuedStarts)
	e.mu.Unlock()
	e.dropWaiting()
	e.stopRuns(ErrShutdown)
	e.replayersWG.Wait()
	e.childCancels.Wait() // started by replayers only, all ended
	// Hand the runs over at once rather than when their leases lapse.
	if err := e.store.RunRelease(e.storeCtx, &store.RunReleaseParams{Owner: e.id}); err != nil {
		e.log.Warn("release run leases", "err", err)
	}

	done := make(chan struct{})
	go func() { e.workWG.Wait(); close(done) }()
	grace := time.NewTimer(e.cfg.ShutdownGrace)
	select {
	case <-done:
	case <-grace.C:
		e.stopWork(ErrShutdown)
		<-done
	}
	grace.Stop()
	e.stopWork(ErrShutdown)
	if err := e.store.EngineStop(e.storeCtx, e.id); err != nil {
		e.log.Warn("stop engine", "err", err)
	}
	return nil
}

// notice reacts to a store's notice: work another process made for this one.
func (e *Engine) notice(n store.Notice) {
	switch n.Kind {
	case store.NoticeTaskReady:
		e.kick()
	case store.NoticeOutcome:
		if n.Owner != e.id {
			return
		}
		if r := e.replayerFor(n.RunID); r != nil && r.heard(n.Seq) {
			r.resync()
		} else if r == nil {
			e.parkedHeard(n.RunID, n.Seq)
		}
	case store.NoticeResync:
		// Outcomes noticed while the listener was away were lost.
		e.mu.Lock()
		for _, r := range e.replayers {
			r.resync()
		}
		e.resyncParkedLocked(e.clock.Now())
		e.mu.Unlock()
		fallthrough
	case store.NoticeRunReady:
		e.claimSoon()
		e.kick()
	}
}
