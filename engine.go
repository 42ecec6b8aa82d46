package reprise

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reprise/store"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"reprise/retry"
)

// Config configures an Engine. Its zero value, with a Store, works.
type Config struct {
	// Store holds all durable state. Required.
	Store store.Store
	// Clock tells time; give the Store the same clock's Now.
	// Default: SystemClock.
	Clock Clock
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
	// about (runs started by other processes) and for engines that died
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
	// Observer hears every attempt, decision and run end as the engine
	// makes it (see Observer); its methods must be fast and must not
	// block. Default: none.
	Observer Observer
}

// An Engine runs workflows and their steps against a Store.
type Engine struct {
	cfg      Config
	store    store.Store
	clock    Clock
	log      *slog.Logger
	id       string
	policy   *compiledPolicy
	policies map[string]*compiledPolicy

	mu        sync.Mutex
	workflows map[string]*workflowEntry
	steps     map[string]*stepEntry
	remote    map[string]*stepEntry
	runners   map[string]*runner
	waiters   map[string][]chan *Run
	// attempts are the leases this engine holds; inSlots and perStep
	// count those in slots, waiting the retries waiting for one (see
	// heldPerSlot).
	attempts map[int64]*attempt
	inSlots  int
	perStep  map[string]int
	waiting  []*attempt
	// claiming counts the runs claimed (claimRunsOnce) that have not yet
	// settled: reserved room for their steps, made their first wait, or
	// ended;
	// moreRuns says that the last claim took all it asked for.
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

	// runCtx is the parent of runner contexts, storeCtx of store calls that
	// must finish even while stopping; both are set by Run.
	runCtx   context.Context
	stopRuns context.CancelCauseFunc
	storeCtx context.Context
	// workCtx is the parent of attempt contexts, cancelled after the grace.
	workCtx  context.Context
	stopWork context.CancelCauseFunc

	kickc      chan struct{}
	claimc     chan struct{} // wakes claimRuns
	runnersWG  sync.WaitGroup
	workWG     sync.WaitGroup
	goroutines *gopool  // runs runners and attempts
	decoded    sync.Map // string(policy JSON) → *policy

	// busy counts goroutines doing engine work now, and wake-ups sent but
	// not yet taken; inStep counts attempts inside step code; act counts
	// progress. Together they let a test clock tell when the engine is idle.
	busy   atomic.Int64
	inStep atomic.Int64
	act    atomic.Int64

	// wakeAt is when the sleeping dispatcher next looks at the store, in
	// Unix nanoseconds; 0 while it is awake.
	wakeAt atomic.Int64
}

// New returns an engine; it does nothing until Run.
func New(cfg Config) (*Engine, error) {
	var errs []error
	if cfg.Store == nil {
		errs = append(errs, errors.New("config: Store is required"))
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock
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
	if cfg.PoisonAfter == 0 {
		cfg.PoisonAfter = 5
	}
	e := &Engine{
		cfg: cfg, store: cfg.Store, clock: cfg.Clock, log: cfg.Logger, id: cfg.WorkerID,
		policies:   make(map[string]*compiledPolicy),
		workflows:  make(map[string]*workflowEntry),
		steps:      make(map[string]*stepEntry),
		remote:     make(map[string]*stepEntry),
		runners:    make(map[string]*runner),
		waiters:    make(map[string][]chan *Run),
		attempts:   make(map[int64]*attempt),
		goroutines: newGopool(time.Second),
		perStep:    make(map[string]int),
		reservedBy: make(map[string]int),
		gone:       make(map[string]bool),
		kickc:      make(chan struct{}, 1),
		claimc:     make(chan struct{}, 1),
	}
	def := retry.Default
	if cfg.DefaultPolicy != nil {
		def = *cfg.DefaultPolicy
	}
	var err error
	if e.policy, err = compilePolicy(def); err != nil {
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

// Store returns the engine's store.
func (e *Engine) Store() store.Store { return e.store }

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

// policyFor returns the default policy of a step called without one.
func (e *Engine) policyFor(name string) *compiledPolicy {
	e.mu.Lock()
	s := e.steps[name]
	if s == nil {
		s = e.remote[name]
	}
	e.mu.Unlock()
	if s != nil && s.cfg.policy != nil {
		return s.cfg.policy
	}
	if p, ok := e.policies[name]; ok {
		return p
	}
	best, bestLen := e.policy, -1
	for pat, p := range e.policies {
		prefix, ok := strings.CutSuffix(pat, "*")
		if ok && strings.HasPrefix(name, prefix) && len(prefix) > bestLen {
			best, bestLen = p, len(prefix)
		}
	}
	return best
}

// A RunOption configures a run at its start.
type RunOption func(*runOptions)

type runOptions struct{ id string }

// WithRunID gives the run a caller-chosen id, which makes starting it
// idempotent: a second start with the same id returns the first run.
func WithRunID(id string) RunOption { return func(o *runOptions) { o.id = id } }

// ValidateRunID reports whether id can name a run: 1 to 200 characters
// from letters, digits and "-_.:@".
func ValidateRunID(id string) error {
	if id == "" || len(id) > 200 {
		return fmt.Errorf("run id must have 1 to 200 characters, has %d", len(id))
	}
	for i, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:@", c)) {
			return fmt.Errorf("run id has %q at offset %d (allowed: letters, digits, -_.:@)", c, i)
		}
	}
	return nil
}

// StartRun starts a run of the named workflow with a JSON input. created is
// false when a run with the chosen id already existed; that run is
// returned and nothing new starts.
func (e *Engine) StartRun(ctx context.Context, workflow string, input json.RawMessage, opts ...RunOption) (run *Run, created bool, err error) {
	var o runOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.id == "" {
		o.id = NewRunID()
	} else if err := ValidateRunID(o.id); err != nil {
		return nil, false, err
	}
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	e.mu.Lock()
	wf := e.workflows[workflow]
	owner := ""
	if e.running {
		owner = e.id
	}
	e.mu.Unlock()
	if wf == nil {
		return nil, false, fmt.Errorf("start run: workflow %q: %w", workflow, ErrNotRegistered)
	}
	p := store.RunCreateParams{ID: o.id, Workflow: workflow, Input: input, Owner: owner, LeaseTTL: e.cfg.RunLeaseTTL}
	if owner != "" {
		if res := e.startEager(ctx, wf, p); !res.fallback {
			return res.run, res.created, res.err
		}
		owner, p.Owner = "", ""
	}
	lease, created, err := e.store.RunCreate(ctx, &p)
	if err != nil {
		return nil, false, fmt.Errorf("start run: %w", err)
	}
	switch {
	case created && owner != "":
		e.startRunner(lease, true, false)
	case created:
		// Run has not started yet, or is starting: claim it as soon as it can.
		e.claimSoon()
	}
	return lease.Run, created, nil
}

// NewRunID returns a fresh run id: the time in milliseconds, so that ids
// sort roughly by age, and 80 random bits.
func NewRunID() string {
	var b [10]byte
	rand.Read(b[:])
	return fmt.Sprintf("r%x-%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// GetRun returns a run's current state.
func (e *Engine) GetRun(ctx context.Context, id string) (*Run, error) {
	return e.store.RunGet(ctx, id)
}

// History returns a run's history.
func (e *Engine) History(ctx context.Context, id string) ([]Event, error) {
	return e.store.HistoryList(ctx, &store.HistoryListParams{RunID: id})
}

// Cancel cancels a run: its timers and pending steps are dropped, running
// attempts are cancelled with cause ErrCancelled and their results
// rejected. Cancelling a finished run returns ErrRunFinished.
func (e *Engine) Cancel(ctx context.Context, id, reason string) error {
	run, err := e.store.RunCancel(ctx, &store.RunCancelParams{ID: id, Reason: reason})
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	e.stopRun(id)
	if e.cfg.Observer != nil && run != nil {
		e.cfg.Observer.RunEnded(RunEnd{RunID: id, Workflow: run.Workflow, Status: RunCancelled})
	}
	return nil
}

// cancelChild cancels a child run that lost a select, without waiting: the
// workflow goes on, and a child already finished stays as it is.
func (e *Engine) cancelChild(id string) {
	go func() {
		if err := e.Cancel(e.storeCtx, id, "lost a select in its parent"); err != nil &&
			!errors.Is(err, ErrRunFinished) && !errors.Is(err, ErrNotFound) {
			e.log.Warn("cancel child run", "run_id", id, "err", err)
		}
	}()
}

// stopRun stops what this engine runs for a cancelled run and its
// children, which the store cancelled with it.
func (e *Engine) stopRun(id string) {
	e.mu.Lock()
	r := e.runners[id]
	for _, a := range e.attempts {
		if a.task.RunID == id {
			a.stop(e, ErrCancelled)
		}
	}
	var children []string
	for cid, c := range e.runners {
		if c.parentID == id {
			children = append(children, cid)
		}
	}
	e.mu.Unlock()
	if r != nil {
		r.stop(ErrCancelled)
	}
	e.wakeWaiters(id, nil)
	for _, cid := range children {
		e.stopRun(cid)
	}
}

// Signal sends a named signal with a payload to a run; the workflow takes
// it with WaitSignal. Signals sent before the wait are kept, in order.
// A finished run gives ErrRunFinished.
func (e *Engine) Signal(ctx context.Context, runID, name string, payload any) error {
	if name == "" {
		return errors.New("signal: name is empty")
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("signal %s: encode payload: %w", name, err)
	}
	o, err := e.store.SignalSend(ctx, &store.SignalSendParams{RunID: runID, Name: name, Payload: b})
	if err != nil {
		return fmt.Errorf("signal %s to run %s: %w", name, runID, err)
	}
	e.deliver(o)
	return nil
}

// Redrive gives a run that failed because a step exhausted its policy a
// second chance, once the cause is fixed: the step gets a fresh attempt
// budget and the workflow goes on from there. by says who, for the
// history; earlier attempts stay in it.
func (e *Engine) Redrive(ctx context.Context, runID, by string) error {
	if _, err := e.store.RunRedrive(ctx, &store.RunRedriveParams{ID: runID, By: by}); err != nil {
		return fmt.Errorf("redrive run %s: %w", runID, err)
	}
	e.claimSoon()
	e.kick() // the step's task is ready again
	return nil
}

// Wait waits until run id has finished and returns it.
func (e *Engine) Wait(ctx context.Context, id string) (*Run, error) {
	for {
		ch := make(chan *Run, 1)
		e.mu.Lock()
		e.waiters[id] = append(e.waiters[id], ch)
		_, resident := e.runners[id]
		e.mu.Unlock()
		// A run this engine executes tells its waiters when it ends, with
		// its final state: no need to read it first.
		if !resident {
			run, err := e.store.RunGet(ctx, id)
			if err == nil && run.Status.Final() {
				e.dropWaiter(id, ch)
				return run, nil
			}
			if err != nil {
				e.dropWaiter(id, ch)
				return nil, err
			}
		}
		// Runs finished by another process are noticed by polling.
		t := time.NewTimer(e.cfg.PollInterval)
		select {
		case run := <-ch:
			t.Stop()
			if run != nil {
				return run, nil
			}
			continue
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			e.dropWaiter(id, ch)
			return nil, context.Cause(ctx)
		}
		e.dropWaiter(id, ch)
	}
}

func (e *Engine) dropWaiter(id string, ch chan *Run) {
	e.mu.Lock()
	defer e.mu.Unlock()
	list := slices.DeleteFunc(e.waiters[id], func(c chan *Run) bool { return c == ch })
	if len(list) == 0 {
		delete(e.waiters, id)
	} else {
		e.waiters[id] = list
	}
}

// wakeWaiters wakes the waiters of a run that ended or that this engine
// stopped executing, with its end state when the caller knows it (else
// nil: they read it).
func (e *Engine) wakeWaiters(id string, run *Run) {
	e.mu.Lock()
	list := e.waiters[id]
	delete(e.waiters, id)
	e.mu.Unlock()
	for _, ch := range list {
		var cp *Run
		if run != nil {
			c := *run
			cp = &c
		}
		ch <- cp
	}
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
	e.storeCtx = context.WithoutCancel(ctx)
	e.runCtx, e.stopRuns = context.WithCancelCause(e.storeCtx)
	e.workCtx, e.stopWork = context.WithCancelCause(e.storeCtx)
	e.mu.Unlock()

	var loops sync.WaitGroup
	loops.Go(func() { e.dispatch(ctx) })
	loops.Go(func() { e.claimRuns(ctx) })
	loops.Go(func() { e.watchWaiting(ctx) })
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
	e.mu.Unlock()
	e.dropWaiting()
	e.stopRuns(ErrShutdown)
	e.runnersWG.Wait()
	// Hand the runs over at once rather than when their leases lapse.
	if err := e.store.RunRenew(e.storeCtx, &store.RunRenewParams{Owner: e.id}); err != nil {
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

// claimRuns takes runs no live engine holds (after a restart, or started
// by another process), and renews the leases of the runs this engine holds.
func (e *Engine) claimRuns(ctx context.Context) {
	renewEvery := e.cfg.RunLeaseTTL / 3
	lastRenew := e.clock.Now()
	var lastLook time.Time // for gone engines
	t := e.clock.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-e.claimc:
		}
		e.busy.Add(1)
		if now := e.clock.Now(); now.Sub(lastRenew) >= renewEvery {
			if err := e.store.RunRenew(ctx, &store.RunRenewParams{Owner: e.id, LeaseTTL: e.cfg.RunLeaseTTL}); err != nil && ctx.Err() == nil {
				e.log.Warn("renew run leases", "err", err)
			}
			lastRenew = now
		}
		if now := e.clock.Now(); now.Sub(lastLook) >= e.cfg.PollInterval {
			e.takeOver(ctx)
			lastLook = now
		}
		e.claimRunsOnce(ctx)
		if _, ok := e.store.(store.Notifier); ok {
			e.pollRunners(e.clock.Now())
		}
		e.busy.Add(-1)
		if !t.Stop() {
			select {
			case <-t.C():
			default:
			}
		}
		t.Reset(min(e.cfg.PollInterval, renewEvery))
	}
}

// claimRunsOnce claims runs while this engine has room for the attempts
// they will start (see runRoomLocked), so that a backlog is shared
// by the engines on a store rather than resident in the first to claim,
// and a claimed run's first step is leased as it is scheduled instead of
// queued and claimed again.
func (e *Engine) claimRunsOnce(ctx context.Context) {
	e.mu.Lock()
	names := make([]string, 0, len(e.workflows))
	for name := range e.workflows {
		names = append(names, name)
	}
	e.mu.Unlock()
	if len(names) == 0 {
		return
	}
	for {
		e.mu.Lock()
		limit := min(100, e.runRoomLocked())
		if limit <= 0 {
			e.moreRuns = true
		}
		e.mu.Unlock()
		if limit <= 0 {
			return
		}
		leases, err := e.store.RunClaim(ctx, &store.RunClaimParams{
			Owner: e.id, Workflows: names, Limit: limit, LeaseTTL: e.cfg.RunLeaseTTL,
		})
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("claim runs", "err", err)
			}
			return
		}
		for _, l := range leases {
			e.startRunner(l, l.LastSeq == 1, true) // RunStarted alone: nothing to read
		}
		e.mu.Lock()
		e.moreRuns = len(leases) == limit
		e.mu.Unlock()
		if len(leases) < limit {
			return
		}
	}
}

// runRoomLocked is how many more runs the engine may claim now: the room
// for attempts, less what the runs claimed and not yet settled may take.
// While its slots are taken, an engine claims no runs whose steps would
// only wait in its queue. e.mu must be held.
func (e *Engine) runRoomLocked() int { return e.roomLocked() - e.claiming }

// roomFreedLocked wakes the run claims when there is room for a batch and
// runs may be waiting. e.mu must be held.
func (e *Engine) roomFreedLocked() {
	if e.moreRuns && e.runRoomLocked() >= e.claimBatch() {
		e.claimSoon()
	}
}

// claimBatch is the room worth a claim of its own.
func (e *Engine) claimBatch() int { return max(1, e.cfg.MaxConcurrentSteps/4) }

// settled notes that a claimed run reserved room for its steps (reserve),
// made its first wait, or ended: from then on the room it takes is counted
// as its steps' (reserved, then in slots), not as a claim's, lest it count
// twice while its first advance is written.
func (e *Engine) settled(r *runner) {
	if !r.claimed.CompareAndSwap(true, false) {
		return // every wait but a claimed run's first: no lock
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.claiming--
	e.roomFreedLocked()
}

// pollRunners makes resident runs read their histories now and then: with a
// Notifier store, outcomes recorded by other processes arrive as notices,
// and a process that dies between its commit and its notice loses it. A
// run polls a third of RunLeaseTTL after its last news (as often as this
// engine renews its leases), then ever less often, up to every RunLeaseTTL,
// so waiting and parked runs cost little. A run with an attempt in this
// engine waits for that attempt's outcome, which comes here: it polls
// after, if still waiting.
func (e *Engine) pollRunners(now time.Time) {
	e.mu.Lock()
	local := make(map[string]bool, len(e.attempts))
	for _, a := range e.attempts {
		local[a.task.RunID] = true
	}
	runners := make([]*runner, 0, len(e.runners))
	for id, r := range e.runners {
		if !local[id] {
			runners = append(runners, r)
		}
	}
	e.mu.Unlock()
	first := max(e.cfg.RunLeaseTTL/3, e.cfg.PollInterval)
	for _, r := range runners {
		if r.pollDue(now, first, max(e.cfg.RunLeaseTTL, first)) {
			r.resync()
		}
	}
}

// startRunner starts executing a run this engine has leased; fresh says
// that its history is RunStarted alone (it was just created, or claimed
// so), so there is none to load; claimed, that claimRunsOnce claimed it.
func (e *Engine) startRunner(lease store.RunLease, fresh, claimed bool) {
	e.mu.Lock()
	wf := e.workflows[lease.Run.Workflow]
	if r := e.runners[lease.Run.ID]; r != nil {
		// This engine's own lease lapsed and it claimed the run back. Tokens
		// only grow: an older lease (a replay planned before the claim)
		// must not replace the newer one.
		for old := r.token.Load(); lease.Token > old && !r.token.CompareAndSwap(old, lease.Token); old = r.token.Load() {
		}
		e.mu.Unlock()
		return
	}
	if wf == nil || !e.running {
		e.mu.Unlock()
		return
	}
	r := newRunner(e, lease, wf)
	e.runners[r.id] = r
	if claimed {
		r.claimed.Store(true)
		e.claiming++
	}
	e.runnersWG.Add(1) // under e.mu, which Run's shutdown takes before it waits
	e.mu.Unlock()
	e.launch(r, fresh)
}

// launch starts a runner's goroutine, counted in e.runnersWG already.
func (e *Engine) launch(r *runner, fresh bool) {
	e.act.Add(1)
	e.busy.Add(1) // run takes it back
	e.goroutines.Go(func() { r.run(fresh) })
}

// runnerDone forgets a runner whose goroutine ends.
func (e *Engine) runnerDone(r *runner, finished bool) {
	e.settled(r)
	e.mu.Lock()
	if e.runners[r.id] == r {
		delete(e.runners, r.id)
	}
	e.mu.Unlock()
	r.cancel(nil)
	e.act.Add(1)
	// Waiters skip reading a resident run and count on this: with the end
	// state, or with nil to read the run, which may have ended otherwise
	// (cancelled, say) or moved to another engine.
	if finished {
		e.wakeWaiters(r.id, r.final)
	} else {
		e.wakeWaiters(r.id, nil)
	}
	e.runnersWG.Done()
}

// runnerFailed handles a runner that could not go on for a reason that may
// pass (a store error): it is replayed from history a little later.
func (e *Engine) runnerFailed(r *runner, err error) {
	e.log.Warn("run interrupted; replaying it later", "run_id", r.id, "err", err)
	lease := store.RunLease{Run: r.known(), Token: r.token.Load()}
	e.runnerDone(r, false)
	e.replayLater(lease)
}

// runnerLeaseLost ends a runner whose write with token was refused. If
// this engine claimed the run again meanwhile (its lease had lapsed under
// load, and the claim stored a newer token in the runner after the write
// was sent), the run is still this engine's, renewed with its other runs:
// replay it at once under the newer token, or no engine ever would.
func (e *Engine) runnerLeaseLost(r *runner, token int64) {
	e.runnerDone(r, false)
	// Once r is out of e.runners no claim can store a token in it.
	if newer := r.token.Load(); newer != token {
		e.startRunner(store.RunLease{Token: newer, Run: r.known()}, false, false)
	}
}

// runnerReplay ends a runner whose workflow saw a result the store then
// refused (its lease had lapsed), and replays the run from its history
// under the same lease.
func (e *Engine) runnerReplay(r *runner) {
	e.runnerDone(r, false)
	e.startRunner(store.RunLease{Token: r.token.Load(), Run: r.known()}, false, false)
}

// handOffMargin is how long an attempt's lease must still hold for its
// result to be handed over rather than recorded at once: the workflow's
// next advance, which records it, must come before the lease lapses, or
// the result is refused and the step runs again.
const handOffMargin = 2 * time.Second

// handOff gives a successful attempt's result to its run's runner, if the
// run's workflow waits for exactly that step here (see runner.handOff) and
// the attempt's lease leaves time to record it.
func (e *Engine) handOff(t *store.Task, out json.RawMessage) bool {
	if e.clock.Now().Add(handOffMargin).After(t.LeaseUntil) {
		return false
	}
	e.mu.Lock()
	r := e.runners[t.RunID]
	e.mu.Unlock()
	return r != nil && r.handOff(t, out)
}

// replayLater starts a runner for a run this engine holds after
// PollInterval, and tries again while the store fails: this engine renews
// the run's lease all along, so no other engine would take the run over.
func (e *Engine) replayLater(lease store.RunLease) {
	e.clock.AfterFunc(e.cfg.PollInterval, func() {
		run, err := e.store.RunGet(e.storeCtx, lease.Run.ID)
		switch {
		case err == nil && !run.Status.Final():
			lease.Run = run
			e.startRunner(lease, false, false)
		case err != nil && !errors.Is(err, ErrNotFound) && e.isRunning():
			e.replayLater(lease)
		}
	})
}

func (e *Engine) isRunning() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running
}

// deliver hands what a store call appended to the runner that waits for it.
func (e *Engine) deliver(o *store.Outcome) {
	if o == nil || o.Owner != e.id {
		return
	}
	e.mu.Lock()
	r := e.runners[o.RunID]
	e.mu.Unlock()
	if r != nil {
		r.push(o.Events)
	}
}

// Activity is for test clocks (see reprisetest): busy counts engine
// goroutines working now and wake-ups not yet taken, steps counts attempts
// inside step code, and progress grows with every step of progress. A test
// clock moves time only when busy is zero and progress stands still.
func (e *Engine) Activity() (busy, steps, progress int64) {
	return e.busy.Load(), e.inStep.Load(), e.act.Load()
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
		e.mu.Lock()
		r := e.runners[n.RunID]
		e.mu.Unlock()
		if r != nil && r.heard(n.Seq) {
			r.resync()
		}
	case store.NoticeResync:
		// Outcomes noticed while the listener was away were lost.
		e.mu.Lock()
		for _, r := range e.runners {
			r.resync()
		}
		e.mu.Unlock()
		fallthrough
	case store.NoticeRunReady:
		e.claimSoon()
		e.kick()
	}
}

// claimSoon wakes the loop that claims runs.
func (e *Engine) claimSoon() {
	select {
	case e.claimc <- struct{}{}:
	default:
	}
}
