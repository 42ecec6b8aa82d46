package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"reprise/store"
)

// A replayer executes one run's workflow code in its own goroutine,
// replaying it against the run's history: each step or timer call takes the
// next position, and a position the history already holds returns its
// recorded outcome instead of scheduling anything (replay.go). New commands
// are buffered and written in one RunAdvance when the workflow blocks, so a
// workflow that fans out three steps costs one transaction.
type replayer struct {
	e        *Engine
	id       string
	workflow *workflowEntry
	// token is the run lease's fencing token; a re-claim by this same
	// engine (after its lease lapsed in a long pause) replaces it.
	token     atomic.Int64
	execution int
	// claimed says that the run was claimed and its room is still counted
	// as its claim's (see Engine.releaseClaim).
	claimed atomic.Bool
	input   json.RawMessage

	parentID string
	// traceParent is the run's trace context (Run.TraceParent).
	traceParent string
	// created is when the run was created, if known; final is the run's
	// end state, once it finished, for waiters (nil when created is not
	// known).
	created time.Time
	final   *Run
	// eager is set until an eager start's run is created (see eager.go).
	eager *eagerStart
	// revived says that the replayer revives a parked run, known only by
	// its id and workflow until it reads the run (see park.go).
	revived bool

	// ctx is the workflow's context, a scope the replayer owns: workflow
	// code gets it, and its calls (Step, Select…) come back to the
	// replayer through contexts of the code's own making, so the replayer
	// keeps it; cancel ends it, and the workflow exits at its next wait.
	ctx    context.Context //nolint:containedctx // the workflow's; see above
	cancel context.CancelCauseFunc

	cmds    map[int]*command
	nextPos int
	// The commands buffered for the next RunAdvance.
	steps    []store.StepSpec
	timers   []store.TimerSpec
	markers  []store.MarkerSpec
	children []store.ChildSpec
	cancels  []int
	// signals holds the signals received, by name, in history order;
	// taken counts those the workflow consumed.
	signals map[string][]*Event
	taken   map[string]int
	// synced is the highest seq up to which every event has been applied;
	// beyondGap holds applied seqs beyond a gap.
	synced    int64
	beyondGap map[int64]bool
	now       time.Time
	// cancelled says the history ends in RunCancelled: another process
	// cancelled the run, or its parent's end did.
	cancelled bool

	// unrecorded are results handed to the workflow that the next advance
	// records (RunAdvanceParams.Completed).
	unrecorded []store.TaskCompleteParams

	mu    sync.Mutex
	inbox []Event
	// waitingFor is the position of the one step the blocked workflow
	// waits for, whose attempt may hand its result over (see handOff);
	// 0 when there is none. handed holds the result handed over.
	waitingFor int
	handed     *handed
	// stale says events were appended elsewhere that only the store has.
	stale bool
	// seen is the seq up to which the replayer has every event, applied or
	// in its inbox: a notice of an outcome up to it is old news.
	seen int64
	// wake holds a wake-up for what push put in the inbox; exited says
	// that the goroutine ended, and takes no more.
	wake   chan struct{}
	exited bool
	// blocked says that the workflow waits in block, since the engine's
	// blockedAt-th block; evicting, that the replayer is being evicted
	// (it takes no hand-over); parked, that it was (see park.go).
	blocked   bool
	blockedAt uint64
	evicting  bool
	parked    bool
	// pollAt is when the replayer next reads its history in case a notice of
	// an outcome was lost, pollEvery the wait after that (see pollDue).
	pollAt    time.Time
	pollEvery time.Duration
}

// leaseLostError says a write with the run lease's token was refused.
type leaseLostError struct{ token int64 }

func (e *leaseLostError) Error() string { return fmt.Sprintf("run lease lost (token %d)", e.token) }
func (e *leaseLostError) Unwrap() error { return ErrLeaseLost }

// runExit unwinds a workflow goroutine without recording anything: the run
// was cancelled, its lease lost, or the engine is stopping.
type runExit struct{ cause error }

func newReplayer(e *Engine, lease store.RunLease, wf *workflowEntry) *replayer {
	ctx, cancel := context.WithCancelCause(e.runCtx)
	r := &replayer{
		e:         e,
		id:        lease.Run.ID,
		workflow:  wf,
		execution: max(lease.Run.Execution, 1),
		input:     lease.Run.Input,
		cancel:    cancel,
		parentID:  lease.Run.ParentID,
		created:   lease.Run.CreatedAt,
		cmds:      make(map[int]*command),
		signals:   make(map[string][]*Event),
		taken:     make(map[string]int),
		beyondGap: make(map[int64]bool),
		now:       lease.Run.CreatedAt,
		wake:      make(chan struct{}, 1),
	}
	r.token.Store(lease.Token)
	r.traceParent = lease.Run.TraceParent
	r.ctx = context.WithValue(ctx, replayerKey{}, r)
	return r
}

// push hands events appended elsewhere (a step's outcome, a timer) to the
// replayer, and wakes it unless they are only attempts started and failed,
// which resolve nothing the workflow waits for: a step's retries would
// otherwise wake its replayer once each for nothing. Those wait in the inbox
// for the next wake-up (with no events: always). It never blocks. It
// reports false if the replayer was evicted and took nothing: the caller
// looks for the run again (see Engine.wakeRun).
func (r *replayer) push(events []Event) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.exited {
		return !r.parked
	}
	r.inbox = append(r.inbox, events...)
	if n := len(events); n > 0 {
		r.pollAt = time.Time{}
		// An outcome's events are consecutive: they extend what the
		// replayer has only if nothing lies between.
		if events[0].Seq <= r.seen+1 {
			r.seen = max(r.seen, events[n-1].Seq)
		}
	}
	if len(events) > 0 && !wakes(events) {
		return true
	}
	// A wake-up not yet taken counts as busy; the replayer inherits it.
	// It is sent under r.mu, after what it stands for: one left untaken
	// when block takes the inbox stands for what block took.
	r.e.act.add(1)
	select {
	case r.wake <- struct{}{}:
	default:
		r.e.act.add(-1)
	}
	return true
}

// wakes reports whether the replayer may have to act on any of events:
// anything but an attempt's start or failure.
func wakes(events []Event) bool {
	for i := range events {
		if t := events[i].Type; t != store.EventAttemptStarted && t != store.EventAttemptFailed {
			return true
		}
	}
	return false
}

// resync tells the replayer that another process appended to its history.
func (r *replayer) resync() {
	r.mu.Lock()
	r.stale = true
	r.mu.Unlock()
	r.push(nil)
}

// heard notes a notice of an outcome whose last event is seq (0: not
// known), so the poll for lost ones starts over. It reports whether the
// replayer lacks events up to seq and must read its history.
func (r *replayer) heard(seq int64) (stale bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pollAt = time.Time{}
	return seq == 0 || seq > r.seen
}

// pollDue reports whether the replayer should read its history now, in case
// another process recorded an outcome and died before its notice was sent.
// The first poll comes first after the last news, the next ones less and
// less often, up to every most.
func (r *replayer) pollDue(now time.Time, first, most time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.pollAt.IsZero():
		r.pollAt, r.pollEvery = now.Add(first), first
		return false
	case now.Before(r.pollAt):
		return false
	}
	r.pollEvery = min(2*r.pollEvery, most)
	r.pollAt = now.Add(r.pollEvery)
	return true
}

// dropWake drops a wake-up sent for what the replayer has taken, or
// will never take, and its count as busy. r.mu must be held.
func (r *replayer) dropWake() {
	select {
	case <-r.wake:
		r.e.act.add(-1)
	default:
	}
}

// exit stops the pushes to a replayer whose goroutine ends.
func (r *replayer) exit() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exited = true
	r.dropWake()
	if r.evicting {
		r.e.act.add(-1) // added by evict
	}
}

// stop makes the workflow goroutine exit at its next wait.
func (r *replayer) stop(cause error) { r.cancel(cause) }

// run executes the workflow to its end, or until it must stop.
func (r *replayer) run(fresh bool) {
	e := r.e
	defer e.act.add(-1) // added by launch
	defer r.exit()
	if r.revived {
		if ok, err := r.reload(); !ok {
			if err != nil {
				e.replayerFailed(r, fmt.Errorf("read run: %w", err))
			} else {
				e.replayerDone(r, false)
			}
			return
		}
	}
	if fresh {
		r.synced = 1 // RunStarted
	} else {
		events, err := e.store.HistoryList(e.storeCtx, &store.HistoryListParams{RunID: r.id})
		if err != nil {
			e.replayerFailed(r, fmt.Errorf("load history: %w", err))
			return
		}
		r.apply(events)
	}
	finish, exit := r.execute()
	if exit != nil {
		if r.eager != nil {
			r.handBackStart()
			e.replayerDone(r, false)
			return
		}
		if errors.Is(exit.cause, errEvicted) {
			e.parkReplayer(r)
			return
		}
		if errors.Is(exit.cause, errReplay) {
			e.replayAgain(r) // the store refused the handed results
			return
		}
		r.recordHanded()
		if lost, ok := errors.AsType[*leaseLostError](exit.cause); ok {
			e.replayerLeaseLost(r, lost.token)
			return
		}
		if exit.cause != nil && !errors.Is(exit.cause, ErrCancelled) && !errors.Is(exit.cause, ErrShutdown) {
			e.replayerFailed(r, exit.cause)
			return
		}
		e.replayerDone(r, false)
		return
	}
	// Pending select cancels and version markers go with the end, so the
	// history says so; steps, timers and children not waited for are
	// dropped with it (see create).
	token := r.token.Load()
	var adv *store.Advanced
	var err error
	if r.eager != nil {
		var ok bool
		if adv, ok = r.create(finish); !ok {
			e.replayerDone(r, false)
			return
		}
	} else {
		adv, err = e.store.RunAdvance(e.storeCtx, &store.RunAdvanceParams{
			RunID: r.id, Token: token, Completed: r.unrecorded, Markers: r.markers, Cancels: r.cancels, Finish: finish,
		})
	}
	switch {
	case errors.Is(err, ErrLeaseLost) && len(r.unrecorded) > 0:
		e.replayAgain(r)
	case errors.Is(err, ErrLeaseLost):
		e.replayerLeaseLost(r, token)
	case errors.Is(err, ErrRunFinished):
		e.replayerDone(r, false)
	case err != nil:
		e.replayerFailed(r, fmt.Errorf("finish run: %w", err))
	case finish.ContinueAsNew:
		// The next execution replays from an empty history of its own.
		e.log.Debug("run continued as new", "run_id", r.id, "execution", r.execution+1)
		e.descendantsCancelled(adv.Descendants)
		e.replayerDone(r, false)
		next := r.known()
		finish.Apply(next)
		e.startReplayer(store.RunLease{Token: r.token.Load(), Run: next}, false, false)
	default:
		e.log.Debug("run finished", "run_id", r.id, "status", finish.Status)
		if e.cfg.Observer != nil {
			e.cfg.Observer.RunEnded(RunEnd{RunID: r.id, Workflow: r.workflow.name, Status: finish.Status,
				ParentID: r.parentID, TraceParent: r.traceParent, Created: r.created})
		}
		e.descendantsCancelled(adv.Descendants)
		e.deliver(adv.Parent)
		r.final = r.finalRun(finish, adv.Events)
		e.replayerDone(r, true)
	}
}

// known is the run as this replayer knows it, to start another replayer with
// (the next execution, a replay, a re-claim) or to end it in memory.
func (r *replayer) known() *Run {
	return &Run{
		ID: r.id, Workflow: r.workflow.name, Status: RunRunning, Input: r.input, Execution: r.execution,
		ParentID: r.parentID, CreatedAt: r.created, TraceParent: r.traceParent,
	}
}

// finalRun is the run as the store now has it, ended by finish with
// events, or nil if the replayer does not know when the run was created.
func (r *replayer) finalRun(finish *store.RunFinish, events []Event) *Run {
	if r.created.IsZero() || len(events) == 0 {
		return nil
	}
	run := r.known()
	finish.Apply(run)
	run.UpdatedAt = events[len(events)-1].At
	return run
}

// execute runs the workflow function and says how the run ends, or why the
// goroutine must exit without ending it.
func (r *replayer) execute() (finish *store.RunFinish, exit *runExit) {
	defer func() {
		p := recover()
		if p == nil {
			return
		}
		switch v := p.(type) {
		case runExit:
			finish, exit = nil, &v
		case *NondeterminismError:
			finish, exit = &store.RunFinish{Status: RunFailed, Error: &ErrorInfo{Type: TypeNondeterminism, Message: v.Error()}}, nil
		default:
			finish, exit = &store.RunFinish{Status: RunFailed, Error: &ErrorInfo{
				Type: TypePanic, Message: fmt.Sprint(p), Stack: string(debug.Stack()),
			}}, nil
		}
	}()
	out, err := r.workflow.run(r.ctx, r.input)
	if cause := context.Cause(r.ctx); cause != nil {
		return nil, &runExit{cause}
	}
	if n := r.unconsumed(); n > 0 {
		panic(&NondeterminismError{Position: n, Recorded: r.cmds[n].String()})
	}
	if can, ok := errors.AsType[*continueAsNewError](err); ok {
		return &store.RunFinish{ContinueAsNew: true, Input: can.input}, nil
	}
	if err != nil {
		return &store.RunFinish{Status: RunFailed, Error: runErrorInfo(err)}, nil
	}
	return &store.RunFinish{Status: RunCompleted, Output: out}, nil
}

// unconsumed returns the first recorded position beyond what the code
// called, or 0.
func (r *replayer) unconsumed() int {
	if _, ok := r.cmds[r.nextPos+1]; ok {
		return r.nextPos + 1
	}
	return 0
}

// block waits for pushed events, or exits if the run must stop.
func (r *replayer) block() {
	r.e.releaseClaim(r)
	r.mu.Lock()
	r.blocked, r.blockedAt = true, r.e.blocks.Add(1)
	r.mu.Unlock()
	if r.e.evictShort.Load() {
		r.e.evictSoon()
	}
	r.e.act.add(-1)
	select {
	case <-r.wake:
	case <-r.ctx.Done():
		select {
		case <-r.wake:
		default:
			r.e.act.add(1)
		}
	}
	if r.ctx.Err() != nil {
		panic(runExit{context.Cause(r.ctx)})
	}
	r.mu.Lock()
	events, stale, handed := r.inbox, r.stale, r.handed
	r.inbox, r.stale, r.handed, r.waitingFor, r.blocked = nil, false, nil, 0, false
	r.dropWake()
	r.mu.Unlock()
	r.apply(events)
	if handed != nil {
		r.takeHanded(handed)
	}
	if stale {
		r.sync()
	}
	if r.cancelled {
		// Its attempts here stop now, not at their next heartbeat.
		r.e.stopRun(r.id)
		panic(runExit{ErrCancelled})
	}
}

// handOff gives the result of a successful attempt of t to the replayer if
// its workflow is blocked waiting for exactly that step: the workflow goes
// on at once, and its next advance records the result with what follows
// from it, one transaction instead of two. It reports whether the replayer
// took the result; if not, the caller records it.
func (r *replayer) handOff(t *store.Task, out json.RawMessage) bool {
	r.mu.Lock()
	ok := r.waitingFor != 0 && r.waitingFor == t.Position && t.Execution == r.execution && r.handed == nil && !r.evicting
	if ok {
		r.handed = &handed{pos: t.Position, result: store.TaskCompleteParams{TaskID: t.ID, Token: t.Token, Output: out, Attempt: t.Attempt}}
		r.waitingFor = 0
	}
	r.mu.Unlock()
	if ok {
		r.push(nil)
	}
	return ok
}

// takeHanded resolves the waited-for step with a handed result. Its seq
// and time are known once the next advance records it (see advanced);
// until then Now and selects flush first.
func (r *replayer) takeHanded(h *handed) {
	if c := r.cmds[h.pos]; c != nil && !c.fut.done {
		c.fut.done, c.fut.out, c.fut.err = true, h.result.Output, nil
	}
	r.unrecorded = append(r.unrecorded, h.result)
}

// handed is a result an attempt handed to the replayer.
type handed struct {
	pos    int
	result store.TaskCompleteParams
}

// recordHanded records, if it can, the handed results of a replayer that
// stops before its next advance (the engine shuts down, say), so that
// their attempts need not run again.
func (r *replayer) recordHanded() {
	if len(r.unrecorded) == 0 {
		return
	}
	_, err := r.e.store.RunAdvance(r.e.storeCtx, &store.RunAdvanceParams{RunID: r.id, Token: r.token.Load(), Completed: r.unrecorded})
	if err != nil {
		r.e.log.Debug("results handed to a stopping run not recorded", "run_id", r.id, "err", err)
	}
}

// lost is the reason to stop after a write with token was refused: the
// run's lease is lost, or, with results handed to the workflow in it, a
// result may have been stale: the workflow then replays from the history.
func (r *replayer) lost(token int64) error {
	if len(r.unrecorded) > 0 {
		return errReplay
	}
	return &leaseLostError{token}
}

// errReplay says the workflow must be replayed from its history.
var errReplay = errors.New("replay from history")
