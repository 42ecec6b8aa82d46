package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"reprise/retry"
	"reprise/store"
)

// The replay. Each call of the workflow's that the history records (a
// step, a timer, a child run, a version marker) takes the next position.
// apply fills cmds from the history, so a call at a position already
// recorded gets its outcome, and a call that does not match what the
// history holds there fails the run as nondeterministic. await waits on
// futures; flush writes what the calls buffered; sync reads the history.

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

// scheduleStep takes the next position for a step call.
func (r *replayer) scheduleStep(name string, input json.RawMessage, opts []StepOption) *future {
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
		PolicyText: pol.text, Policy: pol.json, Timeout: pol.Timeout, StepVersion: version,
	})
	return fut
}

// scheduleTimer takes the next position for a timer.
func (r *replayer) scheduleTimer(d time.Duration) *future {
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
func (r *replayer) version(change string, minV, maxV int) int {
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
func (r *replayer) startChild(workflow string, input json.RawMessage) (*future, string) {
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
	c := store.ChildSpec{Position: pos, ID: id, Workflow: workflow, Input: input}
	if t := r.e.cfg.Tracer; t != nil && r.traceParent != "" {
		c.TraceParent = t.ChildTraceParent(r.id, r.traceParent, r.execution, pos)
	}
	r.children = append(r.children, c)
	return fut, id
}

// childID is the id of the child run started at pos: fixed by the
// position, so a replay never starts it twice.
func (r *replayer) childID(pos int) string {
	if r.execution > 1 {
		return fmt.Sprintf("%s/e%d/%d", r.id, r.execution, pos)
	}
	return fmt.Sprintf("%s/%d", r.id, pos)
}

// waitSignal returns a future for the next signal of a name. It takes no
// position: signals are matched to waits in the order they were received.
func (r *replayer) waitSignal(name string) *future {
	if r.ctx.Err() != nil {
		panic(runExit{context.Cause(r.ctx)})
	}
	return &future{signal: name}
}

// peekSignal marks a signal future done while a signal waits for it.
func (r *replayer) peekSignal(f *future) {
	queue := r.signals[f.signal]
	if n := r.taken[f.signal]; n < len(queue) {
		ev := queue[n]
		f.done, f.seq, f.at, f.out, f.err = true, ev.Seq, ev.At, ev.Input, nil
	} else {
		f.done = false
	}
}

func (r *replayer) take() int {
	if r.ctx.Err() != nil {
		panic(runExit{context.Cause(r.ctx)})
	}
	r.nextPos++
	return r.nextPos
}

// await blocks until one of fs has an outcome and returns its index. Among
// several, the one recorded first wins; while some are still open, a
// winner is only taken once every event before it is known, so that live
// execution and replay agree. It cancels nothing: Select cancels the
// losers after (cancelLosers).
func (r *replayer) await(fs ...*future) int {
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
func (r *replayer) cancelLosers(fs []*future, win int) {
	for i, f := range fs {
		if i == win || errors.Is(f.err, ErrStepCancelled) {
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
				// ChildFailed then finds the future already resolved.
				r.e.cancelChild(r.childID(f.pos))
			}
		}
		f.done, f.out, f.err = true, nil, ErrStepCancelled
	}
}

// flush writes the buffered commands in one transaction. Steps this
// engine runs and has room for are leased to it in the same transaction,
// skipping a round trip through the queue. The first flush of an eager
// start hands StartRun what to create the run with (see create).
func (r *replayer) flush() {
	if r.eager != nil {
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
		r.e.releaseClaim(r) // a claimed run: its steps hold its room now
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
func (r *replayer) advanced(adv *store.Advanced, reserved []string) {
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

// recorded takes the seq and time of the handed results an advance
// recorded, as a replay would see them.
func (r *replayer) recorded(events []Event) {
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

// sync reads the events the replayer has not seen, closing every gap.
func (r *replayer) sync() {
	events, err := r.e.store.HistoryList(r.e.storeCtx, &store.HistoryListParams{RunID: r.id, AfterSeq: r.synced})
	if err != nil {
		panic(runExit{fmt.Errorf("read history: %w", err)})
	}
	r.apply(events)
	if n := len(events); n > 0 {
		r.synced = max(r.synced, events[n-1].Seq)
		clear(r.beyondGap)
	}
}

// apply takes events of the run into the replay state, once each.
func (r *replayer) apply(events []Event) {
	defer r.applied()
	for i := range events {
		ev := &events[i]
		if ev.Seq <= r.synced || r.beyondGap[ev.Seq] {
			continue
		}
		if ev.Seq == r.synced+1 {
			r.synced++
			for r.beyondGap[r.synced+1] {
				delete(r.beyondGap, r.synced+1)
				r.synced++
			}
		} else {
			r.beyondGap[ev.Seq] = true
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
				r.cmds[ev.Position] = &command{kind: cmdMarker, name: ev.Change, version: ev.Version, fut: &future{pos: ev.Position, done: true}}
			}
		case store.EventStepCancelRequested:
			r.resolve(ev, nil, ErrStepCancelled)
		case store.EventSignalReceived:
			r.signals[ev.Signal] = append(r.signals[ev.Signal], ev)
		case store.EventChildCompleted:
			r.resolve(ev, ev.Output, nil)
		case store.EventChildFailed:
			info := ErrorInfo{Type: "ChildCancelled", Message: "child run " + string(ev.ChildStatus)}
			if ev.Error != nil {
				info = *ev.Error
			}
			r.resolve(ev, nil, &ChildError{RunID: ev.Child, Status: ev.ChildStatus, Type: info.Type, Message: info.Message,
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
		case store.EventRunCancelled:
			r.cancelled = true
		}
	}
}

// applied notes that the replayer has every event up to synced.
func (r *replayer) applied() {
	r.mu.Lock()
	r.seen = max(r.seen, r.synced)
	r.mu.Unlock()
}

func (r *replayer) resolve(ev *Event, out json.RawMessage, err error) {
	c, ok := r.cmds[ev.Position]
	if !ok || c.fut.done {
		return
	}
	f := c.fut
	f.done, f.seq, f.at, f.out, f.err = true, ev.Seq, ev.At, out, err
}
