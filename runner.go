package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reprise/store"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"reprise/retry"
)

// A runner executes one run's workflow code in its own goroutine. It is the
// replayer: each step or timer call takes the next position, and a position
// the history already holds returns its recorded outcome instead of
// scheduling anything. New commands are buffered and written in one
// RunAdvance when the workflow blocks, so a workflow that fans out three
// steps costs one transaction.
type runner struct {
	e        *Engine
	id       string
	workflow *workflowEntry
	// token is the run lease's fencing token; a re-claim by this same
	// engine (after its lease lapsed in a long pause) replaces it.
	token     atomic.Int64
	execution int
	// claimed says that the run was claimed and has not settled yet (see
	// Engine.claiming).
	claimed atomic.Bool
	input   json.RawMessage

	parentID string
	// created is when the run was created, if known; final is the run's
	// end state, once it finished, for waiters (nil when created is not
	// known).
	created time.Time
	final   *Run
	// birth is set until an eager start's run is created (see eager.go).
	birth *birth

	ctx    context.Context
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
	// ahead holds applied seqs beyond a gap.
	synced int64
	ahead  map[int64]bool
	now    time.Time

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
	// seen is the seq up to which the runner has every event, applied or
	// in its inbox: a notice of an outcome up to it is old news.
	seen int64
	wake chan struct{}
	// pollAt is when the runner next reads its history in case a notice of
	// an outcome was lost, pollEvery the wait after that (see pollDue).
	pollAt    time.Time
	pollEvery time.Duration
}

// command is what the workflow did at a position, recorded or about to be.
type command struct {
	kind commandKind
	// name is the step's or child workflow's name, or the change id of a
	// version marker.
	name    string
	version int
	fut     *future
}

type commandKind uint8

const (
	cmdStep commandKind = iota
	cmdTimer
	cmdMarker
	cmdChild
)

func (c *command) String() string {
	switch c.kind {
	case cmdTimer:
		return "a timer"
	case cmdMarker:
		return "version marker " + c.name
	case cmdChild:
		return "child workflow " + c.name
	}
	return "step " + c.name
}

// future is the untyped state behind Future.
type future struct {
	pos  int
	done bool
	// signal, for a WaitSignal future, is the signal's name: it is done
	// while an unconsumed signal of that name is known.
	signal string
	// seq and at are those of the outcome's event.
	seq int64
	at  time.Time
	out json.RawMessage
	err error
}

// leaseLostError says a write with the run lease's token was refused.
type leaseLostError struct{ token int64 }

func (e *leaseLostError) Error() string { return fmt.Sprintf("run lease lost (token %d)", e.token) }
func (e *leaseLostError) Unwrap() error { return ErrLeaseLost }

// runExit unwinds a workflow goroutine without recording anything: the run
// was cancelled, its lease lost, or the engine is stopping.
type runExit struct{ cause error }

func newRunner(e *Engine, lease store.RunLease, wf *workflowEntry) *runner {
	ctx, cancel := context.WithCancelCause(e.runCtx)
	r := &runner{
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
		ahead:     make(map[int64]bool),
		now:       lease.Run.CreatedAt,
		wake:      make(chan struct{}, 1),
	}
	r.token.Store(lease.Token)
	r.ctx = context.WithValue(ctx, runnerKey{}, r)
	return r
}

// push hands events appended elsewhere (a step's outcome, a timer) to the
// runner, and wakes it unless they are only attempts started and failed,
// which settle nothing the workflow waits for: a step's retries would
// otherwise wake its runner once each for nothing. Those wait in the inbox
// for the next wake-up (with no events: always). It never blocks.
func (r *runner) push(events []Event) {
	r.mu.Lock()
	r.inbox = append(r.inbox, events...)
	if n := len(events); n > 0 {
		r.pollAt = time.Time{}
		// An outcome's events are consecutive: they extend what the
		// runner has only if nothing lies between.
		if events[0].Seq <= r.seen+1 {
			r.seen = max(r.seen, events[n-1].Seq)
		}
	}
	r.mu.Unlock()
	if len(events) > 0 && !settling(events) {
		return
	}
	// A wake-up not yet taken counts as busy; the runner inherits it.
	r.e.busy.Add(1)
	select {
	case r.wake <- struct{}{}:
	default:
		r.e.busy.Add(-1)
	}
}

// settling reports whether the runner may have to act on any of events:
// anything but an attempt's start or failure.
func settling(events []Event) bool {
	for i := range events {
		if t := events[i].Type; t != store.EventAttemptStarted && t != store.EventAttemptFailed {
			return true
		}
	}
	return false
}

// resync tells the runner that another process appended to its history.
func (r *runner) resync() {
	r.mu.Lock()
	r.stale = true
	r.mu.Unlock()
	r.push(nil)
}

// heard notes a notice of an outcome whose last event is seq (0: not
// known), so the poll for lost ones starts over. It reports whether the
// runner lacks events up to seq and must read its history.
func (r *runner) heard(seq int64) (stale bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pollAt = time.Time{}
	return seq == 0 || seq > r.seen
}

// pollDue reports whether the runner should read its history now, in case
// another process recorded an outcome and died before its notice was sent.
// The first poll comes first after the last news, the next ones less and
// less often, up to every most.
func (r *runner) pollDue(now time.Time, first, most time.Duration) bool {
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

// stop makes the workflow goroutine exit at its next wait.
func (r *runner) stop(cause error) { r.cancel(cause) }

// run executes the workflow to its end, or until it must stop.
func (r *runner) run(fresh bool) {
	e := r.e
	defer e.busy.Add(-1) // added by startRunner
	if fresh {
		r.synced = 1 // RunStarted
	} else {
		events, err := e.store.HistoryList(e.storeCtx, &store.HistoryListParams{RunID: r.id})
		if err != nil {
			e.runnerFailed(r, fmt.Errorf("load history: %w", err))
			return
		}
		r.apply(events)
	}
	finish, exit := r.execute()
	if exit != nil {
		if r.birth != nil {
			r.stillborn()
			e.runnerDone(r, false)
			return
		}
		if errors.Is(exit.cause, errReplay) {
			e.runnerReplay(r) // the store refused the handed results
			return
		}
		r.recordHanded()
		if lost, ok := errors.AsType[*leaseLostError](exit.cause); ok {
			e.runnerLeaseLost(r, lost.token)
			return
		}
		if exit.cause != nil && !errors.Is(exit.cause, ErrCancelled) && !errors.Is(exit.cause, ErrShutdown) {
			e.runnerFailed(r, exit.cause)
			return
		}
		e.runnerDone(r, false)
		return
	}
	// Pending select cancels go with the end, so the history says so.
	token := r.token.Load()
	var adv *store.Advanced
	var err error
	if r.birth != nil {
		var ok bool
		if adv, ok = r.create(finish); !ok {
			e.runnerDone(r, false)
			return
		}
	} else {
		adv, err = e.store.RunAdvance(e.storeCtx, &store.RunAdvanceParams{
			RunID: r.id, Token: token, Completed: r.unrecorded, Cancels: r.cancels, Finish: finish,
		})
	}
	switch {
	case errors.Is(err, ErrLeaseLost) && len(r.unrecorded) > 0:
		e.runnerReplay(r)
	case errors.Is(err, ErrLeaseLost):
		e.runnerLeaseLost(r, token)
	case errors.Is(err, ErrRunFinished):
		e.runnerDone(r, false)
	case err != nil:
		e.runnerFailed(r, fmt.Errorf("finish run: %w", err))
	case finish.ContinueAsNew:
		// The next execution replays from an empty history of its own.
		e.log.Debug("run continued as new", "run_id", r.id, "execution", r.execution+1)
		e.runnerDone(r, false)
		next := r.known()
		finish.Apply(next)
		e.startRunner(store.RunLease{Token: r.token.Load(), Run: next}, false, false)
	default:
		e.log.Debug("run finished", "run_id", r.id, "status", finish.Status)
		if e.cfg.Observer != nil {
			e.cfg.Observer.RunEnded(RunEnd{RunID: r.id, Workflow: r.workflow.name, Status: finish.Status})
		}
		e.deliver(adv.Parent)
		r.final = r.finalRun(finish, adv.Events)
		e.runnerDone(r, true)
	}
}

// known is the run as this runner knows it, to start another runner with
// (the next execution, a replay, a re-claim) or to end it in memory.
func (r *runner) known() *Run {
	return &Run{
		ID: r.id, Workflow: r.workflow.name, Status: RunRunning, Input: r.input, Execution: r.execution,
		ParentID: r.parentID, CreatedAt: r.created,
	}
}

// finalRun is the run as the store now has it, ended by finish with
// events, or nil if the runner does not know when the run was created.
func (r *runner) finalRun(finish *store.RunFinish, events []Event) *Run {
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
func (r *runner) execute() (finish *store.RunFinish, exit *runExit) {
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
	if can, ok := errors.AsType[*continueAsNew](err); ok {
		return &store.RunFinish{ContinueAsNew: true, Input: can.input}, nil
	}
	if err != nil {
		return &store.RunFinish{Status: RunFailed, Error: runErrorInfo(err)}, nil
	}
	return &store.RunFinish{Status: RunCompleted, Output: out}, nil
}

// unconsumed returns the first recorded position beyond what the code
// called, or 0.
func (r *runner) unconsumed() int {
	if _, ok := r.cmds[r.nextPos+1]; ok {
		return r.nextPos + 1
	}
	return 0
}

// scheduleStep takes the next position for a step call.
func (r *runner) scheduleStep(name string, input json.RawMessage, opts []StepOption) *future {
	pos := r.take()
	if c, ok := r.cmds[pos]; ok {
		if c.kind != cmdStep || c.name != name {
			panic(&NondeterminismError{Position: pos, Recorded: c.String(), Called: "step " + name})
		}
		return c.fut
	}
	cfg, err := newStepConfig(opts)
	if err != nil {
		return &future{pos: pos, done: true, err: fmt.Errorf("step %s: %w", name, err)}
	}
	pol, version := r.e.stepDefaults(r.ctx, name, cfg.policy)
	key := cfg.key
	if key == "" {
		key = defaultKey(r.id, r.execution, pos, name, input)
	}
	fut := &future{pos: pos}
	r.cmds[pos] = &command{kind: cmdStep, name: name, fut: fut}
	r.steps = append(r.steps, store.StepSpec{
		Position: pos, Name: name, Input: input, IdempotencyKey: key,
		PolicyText: pol.text, Policy: pol.json, Timeout: pol.policy.Timeout, StepVersion: version,
	})
	return fut
}

// scheduleTimer takes the next position for a timer.
func (r *runner) scheduleTimer(d time.Duration) *future {
	pos := r.take()
	if c, ok := r.cmds[pos]; ok {
		if c.kind != cmdTimer {
			panic(&NondeterminismError{Position: pos, Recorded: c.String(), Called: "a timer"})
		}
		return c.fut
	}
	fut := &future{pos: pos}
	r.cmds[pos] = &command{kind: cmdTimer, fut: fut}
	r.timers = append(r.timers, store.TimerSpec{Position: pos, Delay: max(d, 0)})
	return fut
}

// version decides the version of a change: the recorded one on replay,
// max when the code meets the change for the first time, and min for a
// history written before the change existed (where the position holds
// something else, which is then left for the code that follows).
func (r *runner) version(change string, minV, maxV int) int {
	pos := r.nextPos + 1
	c, ok := r.cmds[pos]
	switch {
	case ok && c.kind == cmdMarker && c.name == change:
		r.take()
		if c.version < minV || c.version > maxV {
			panic(&NondeterminismError{Position: pos, Recorded: fmt.Sprintf("%s at version %d", c, c.version),
				Called: fmt.Sprintf("version marker %s in [%d, %d]", change, minV, maxV)})
		}
		return c.version
	case ok:
		return minV
	}
	r.take()
	r.cmds[pos] = &command{kind: cmdMarker, name: change, version: maxV, fut: &future{pos: pos, done: true}}
	r.markers = append(r.markers, store.MarkerSpec{Position: pos, Name: change, Version: maxV})
	return maxV
}

// startChild takes the next position for a child run.
func (r *runner) startChild(workflow string, input json.RawMessage) (*future, string) {
	pos := r.take()
	id := r.childID(pos)
	if c, ok := r.cmds[pos]; ok {
		if c.kind != cmdChild || c.name != workflow {
			panic(&NondeterminismError{Position: pos, Recorded: c.String(), Called: "child workflow " + workflow})
		}
		return c.fut, id
	}
	fut := &future{pos: pos}
	r.cmds[pos] = &command{kind: cmdChild, name: workflow, fut: fut}
	r.children = append(r.children, store.ChildSpec{Position: pos, ID: id, Workflow: workflow, Input: input})
	return fut, id
}

// childID is the id of the child run started at pos: fixed by the
// position, so a replay never starts it twice.
func (r *runner) childID(pos int) string {
	if r.execution > 1 {
		return fmt.Sprintf("%s/e%d/%d", r.id, r.execution, pos)
	}
	return fmt.Sprintf("%s/%d", r.id, pos)
}

// waitSignal returns a future for the next signal of a name. It takes no
// position: signals are matched to waits in the order they were received.
func (r *runner) waitSignal(name string) *future {
	if r.ctx.Err() != nil {
		panic(runExit{context.Cause(r.ctx)})
	}
	return &future{signal: name}
}

// peekSignal marks a signal future done while a signal waits for it.
func (r *runner) peekSignal(f *future) {
	queue := r.signals[f.signal]
	if n := r.taken[f.signal]; n < len(queue) {
		ev := queue[n]
		f.done, f.seq, f.at, f.out, f.err = true, ev.Seq, ev.At, ev.Input, nil
	} else {
		f.done = false
	}
}

func (r *runner) take() int {
	if r.ctx.Err() != nil {
		panic(runExit{context.Cause(r.ctx)})
	}
	r.nextPos++
	return r.nextPos
}

// await blocks until one of fs has an outcome and returns its index. Among
// several, the one recorded first wins; while some are still open, a
// winner is only taken once every event before it is known, so that live
// execution and replay agree.
func (r *runner) await(fs ...*future) int {
	if len(fs) > 1 && len(r.unrecorded) > 0 {
		r.flush() // a select orders outcomes by their place in the history
	}
	for {
		win, open := -1, false
		for i, f := range fs {
			if f.signal != "" {
				r.peekSignal(f)
			}
			switch {
			case !f.done:
				open = true
			case win < 0 || f.seq < fs[win].seq:
				win = i
			}
		}
		if win >= 0 && (!open || fs[win].seq <= r.synced) {
			w := fs[win]
			if at := w.at; at.After(r.now) {
				r.now = at
			}
			if w.signal != "" {
				r.taken[w.signal]++
				w.signal = "" // consumed: it keeps its payload
			}
			if len(fs) > 1 {
				r.cancelLosers(fs, win)
			}
			return win
		}
		r.flush()
		if win >= 0 {
			r.sync()
			continue
		}
		if len(fs) == 1 && fs[0].signal == "" {
			if c := r.cmds[fs[0].pos]; c != nil && c.kind == cmdStep {
				r.mu.Lock()
				r.waitingFor = fs[0].pos
				r.mu.Unlock()
			}
		}
		r.block()
	}
}

// cancelLosers cancels, best effort, the futures a select did not pick: a
// step's task and a timer are dropped (StepCancelRequested is recorded for
// a step), a running attempt is cancelled, and the future fails with
// ErrStepCancelled, also if its outcome came in meanwhile. The rule
// depends only on the select's winner, so replay agrees.
func (r *runner) cancelLosers(fs []*future, win int) {
	for i, f := range fs {
		if i == win || f.err == ErrStepCancelled {
			continue
		}
		if f.signal != "" {
			f.done, f.signal = true, "" // an unconsumed signal stays queued
		} else if c, ok := r.cmds[f.pos]; ok && !f.done {
			switch c.kind {
			case cmdStep:
				r.cancels = append(r.cancels, f.pos)
				r.e.cancelAttempt(r.id, r.execution, f.pos)
			case cmdTimer:
				r.cancels = append(r.cancels, f.pos)
			case cmdChild:
				// A child is a run of its own: cancel it, best effort. Its
				// ChildFailed then finds the future already settled.
				r.e.cancelChild(r.childID(f.pos))
			}
		}
		f.done, f.out, f.err = true, nil, ErrStepCancelled
	}
}

// flush writes the buffered commands in one transaction. Steps this
// engine runs and has room for are leased to it in the same transaction,
// skipping a round trip through the queue. The first flush of an eager
// start creates the run.
func (r *runner) flush() {
	if r.birth != nil {
		if _, ok := r.create(nil); !ok {
			panic(runExit{})
		}
		return
	}
	if len(r.steps)+len(r.timers)+len(r.markers)+len(r.children)+len(r.cancels)+len(r.unrecorded) == 0 {
		return
	}
	reserved := r.e.reserve(r.steps)
	if len(reserved) > 0 {
		r.e.settled(r) // a claimed run: its steps hold its room now
	}
	token := r.token.Load()
	adv, err := r.e.store.RunAdvance(r.e.storeCtx, &store.RunAdvanceParams{
		RunID: r.id, Token: token, Completed: r.unrecorded, Steps: r.steps, Timers: r.timers,
		Markers: r.markers, Children: r.children, Cancels: r.cancels,
		LeaseOwner: r.e.id, LeaseTTL: r.e.cfg.LeaseTTL,
	})
	if err != nil {
		r.e.unreserve(reserved)
		if errors.Is(err, ErrLeaseLost) {
			panic(runExit{r.lost(token)})
		}
		if errors.Is(err, ErrRunFinished) {
			panic(runExit{})
		}
		panic(runExit{fmt.Errorf("advance run: %w", err)})
	}
	r.advanced(adv, reserved)
}

// advanced takes what a flush recorded: the buffers empty, the events
// applied, the steps leased at once started; reserved is what the flush
// reserved for them.
func (r *runner) advanced(adv *store.Advanced, reserved []string) {
	r.recorded(adv.Events)
	// Steps left in the queue and new timers change when the dispatcher
	// must next look; the rest does not.
	due := len(r.steps)-len(adv.Tasks) > 0 || len(r.timers) > 0
	children := len(r.children) > 0
	clear(r.steps)
	r.steps, r.timers, r.markers, r.children, r.cancels = r.steps[:0], r.timers[:0], r.markers[:0], r.children[:0], r.cancels[:0]
	r.apply(adv.Events)
	r.e.startAttempts(adv.Tasks, reserved)
	if children {
		r.e.claimSoon() // this engine may run the children itself
	}
	if due {
		r.e.kick()
	}
}

// recordHanded records, if it can, the handed results of a runner that
// stops before its next advance (the engine shuts down, say), so that
// their attempts need not run again.
func (r *runner) recordHanded() {
	if len(r.unrecorded) == 0 {
		return
	}
	_, err := r.e.store.RunAdvance(r.e.storeCtx, &store.RunAdvanceParams{RunID: r.id, Token: r.token.Load(), Completed: r.unrecorded})
	if err != nil {
		r.e.log.Debug("results handed to a stopping run not recorded", "run_id", r.id, "err", err)
	}
}

// recorded takes the seq and time of the handed results an advance
// recorded, as a replay would see them.
func (r *runner) recorded(events []Event) {
	if len(r.unrecorded) == 0 {
		return
	}
	r.unrecorded = r.unrecorded[:0]
	for i := range events {
		ev := &events[i]
		if ev.Type != store.EventStepCompleted {
			continue
		}
		if c := r.cmds[ev.Position]; c != nil && c.fut.seq == 0 {
			c.fut.seq, c.fut.at = ev.Seq, ev.At
			if ev.At.After(r.now) {
				r.now = ev.At
			}
		}
	}
}

// lost is the reason to stop after a write with token was refused: the
// run's lease is lost, or, with results handed to the workflow in it, a
// result may have been stale: the workflow then replays from the history.
func (r *runner) lost(token int64) error {
	if len(r.unrecorded) > 0 {
		return errReplay
	}
	return &leaseLostError{token}
}

// errReplay says the workflow must be replayed from its history.
var errReplay = errors.New("replay from history")

// sync reads the events the runner has not seen, closing every gap.
func (r *runner) sync() {
	events, err := r.e.store.HistoryList(r.e.storeCtx, &store.HistoryListParams{RunID: r.id, AfterSeq: r.synced})
	if err != nil {
		panic(runExit{fmt.Errorf("read history: %w", err)})
	}
	r.apply(events)
	if n := len(events); n > 0 {
		r.synced = max(r.synced, events[n-1].Seq)
		clear(r.ahead)
	}
}

// block waits for pushed events, or exits if the run must stop.
func (r *runner) block() {
	r.e.settled(r)
	r.e.busy.Add(-1)
	select {
	case <-r.wake:
	case <-r.ctx.Done():
		select {
		case <-r.wake:
		default:
			r.e.busy.Add(1)
		}
	}
	if r.ctx.Err() != nil {
		panic(runExit{context.Cause(r.ctx)})
	}
	r.mu.Lock()
	events, stale, handed := r.inbox, r.stale, r.handed
	r.inbox, r.stale, r.handed, r.waitingFor = nil, false, nil, 0
	r.mu.Unlock()
	r.apply(events)
	if handed != nil {
		r.takeHanded(handed)
	}
	if stale {
		r.sync()
	}
}

// handOff gives the result of a successful attempt of t to the runner if
// its workflow is blocked waiting for exactly that step: the workflow goes
// on at once, and its next advance records the result with what follows
// from it, one transaction instead of two. It reports whether the runner
// took the result; if not, the caller records it.
func (r *runner) handOff(t *store.Task, out json.RawMessage) bool {
	r.mu.Lock()
	ok := r.waitingFor != 0 && r.waitingFor == t.Position && t.Execution == r.execution && r.handed == nil
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

// takeHanded settles the waited-for step with a handed result. Its seq
// and time are known once the next advance records it (see advanced);
// until then Now and selects flush first.
func (r *runner) takeHanded(h *handed) {
	if c := r.cmds[h.pos]; c != nil && !c.fut.done {
		c.fut.done, c.fut.out, c.fut.err = true, h.result.Output, nil
	}
	r.unrecorded = append(r.unrecorded, h.result)
}

// handed is a result an attempt handed to the runner.
type handed struct {
	pos    int
	result store.TaskCompleteParams
}

// apply takes events of the run into the replay state, once each.
func (r *runner) apply(events []Event) {
	defer r.applied()
	for i := range events {
		ev := &events[i]
		if ev.Seq <= r.synced || r.ahead[ev.Seq] {
			continue
		}
		if ev.Seq == r.synced+1 {
			r.synced++
			for r.ahead[r.synced+1] {
				delete(r.ahead, r.synced+1)
				r.synced++
			}
		} else {
			r.ahead[ev.Seq] = true
		}
		if ev.Type == store.EventRunStarted {
			r.now = ev.At
		}
		if ev.Execution != 0 && ev.Execution != r.execution {
			continue
		}
		switch ev.Type {
		case store.EventStepScheduled, store.EventTimerScheduled, store.EventChildStarted:
			if _, ok := r.cmds[ev.Position]; !ok {
				c := &command{kind: cmdStep, name: ev.Step, fut: &future{pos: ev.Position}}
				switch ev.Type {
				case store.EventTimerScheduled:
					c.kind = cmdTimer
				case store.EventChildStarted:
					c.kind, c.name = cmdChild, ev.Workflow
				}
				r.cmds[ev.Position] = c
			}
		case store.EventVersionMarker:
			if _, ok := r.cmds[ev.Position]; !ok {
				r.cmds[ev.Position] = &command{kind: cmdMarker, name: ev.Step, version: ev.Version, fut: &future{pos: ev.Position, done: true}}
			}
		case store.EventStepCancelRequested:
			r.resolve(ev, nil, ErrStepCancelled)
		case store.EventSignalReceived:
			r.signals[ev.Step] = append(r.signals[ev.Step], ev)
		case store.EventChildCompleted:
			r.resolve(ev, ev.Output, nil)
		case store.EventChildFailed:
			info := ErrorInfo{Type: "ChildCancelled", Message: "child run " + ev.Reason}
			if ev.Error != nil {
				info = *ev.Error
			}
			r.resolve(ev, nil, &ChildError{RunID: ev.Child, Status: RunStatus(ev.Reason), Type: info.Type, Message: info.Message,
				StepError: stepError(&info)})
		case store.EventRunRedriven:
			// The failed step gets new attempts: its outcome is open again.
			if c, ok := r.cmds[ev.Position]; ok {
				c.fut.done, c.fut.err, c.fut.out = false, nil, nil
			}
		case store.EventStepCompleted:
			r.resolve(ev, ev.Output, nil)
		case store.EventStepFailed:
			err := &StepError{Step: ev.Step, Position: ev.Position, Attempts: ev.Attempt, Reason: retry.Reason(ev.Reason)}
			if ev.Error != nil {
				err.Type, err.Message = ev.Error.Type, ev.Error.Message
			}
			r.resolve(ev, nil, err)
		case store.EventTimerFired:
			r.resolve(ev, nil, nil)
		}
	}
}

// applied notes that the runner has every event up to synced.
func (r *runner) applied() {
	r.mu.Lock()
	r.seen = max(r.seen, r.synced)
	r.mu.Unlock()
}

func (r *runner) resolve(ev *Event, out json.RawMessage, err error) {
	c, ok := r.cmds[ev.Position]
	if !ok || c.fut.done {
		return
	}
	f := c.fut
	f.done, f.seq, f.at, f.out, f.err = true, ev.Seq, ev.At, out, err
}
