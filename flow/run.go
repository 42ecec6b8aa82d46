package flow

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"reprise"
)

// A flow runs as a workflow whose input carries the flow itself
// (RunInput), so that a run keeps the version it started with, and a
// replay, on any engine, needs nothing but the run. The workflow code is
// deterministic: it issues step calls as futures from its one goroutine
// and takes their outcomes in the order the history records them
// (reprise.WaitAny, which cancels none of the others), so that its
// decisions depend only on the history.
//
// History: a step call is scheduled under the engine name of its flow
// step (Flow.EngineStep); its idempotency key starts with the flow step's
// name and, for a work item, the item's index: "reserve[2]-3f9c…". A step
// skipped because a step it needs failed or was skipped records a version
// marker "skipped:NAME".

// RunInput is the input of a flow's workflow.
type RunInput struct {
	// Flow is the flow, as Flow.Canonical gives it.
	Flow json.RawMessage `json:"flow"`
	// Input is the run's input, which the flow's references call input.
	Input json.RawMessage `json:"input,omitempty"`
}

// The error types of a flow run that failed other than by a step's error
// (a run failed by a step's error has the step's type: HTTP5xx, HTTP4xx …).
const (
	// TypeInvalidFlow: the flow the run carries does not parse.
	TypeInvalidFlow = "InvalidFlow"
	// TypeInvalidInput: the run's input does not match the input_schema.
	TypeInvalidInput = "InvalidInput"
	// TypeExpression: a reference could not be evaluated: a key that is
	// not there, a foreach that is not a list …
	TypeExpression = "ExpressionError"
	// TypeGoalUnreachable: a goal can no longer complete, because a step
	// it needs failed (an optional one) or was skipped.
	TypeGoalUnreachable = "GoalUnreachable"
)

// SkipMarker is the prefix of the version marker a skipped step records:
// "skipped:notify".
const SkipMarker = "skipped:"

// runError is a flow run's failure of its own.
type runError struct {
	typ, msg string
}

func (e *runError) Error() string     { return e.msg }
func (e *runError) ErrorType() string { return e.typ }

// The states of a flow step in a run.
type status uint8

const (
	waiting status = iota
	running
	completed
	failed
	skipped
)

type stepState struct {
	s      *Step
	status status
	vars   *vars
	// items are a foreach step's work items; next is the first not yet
	// issued, inflight counts those issued without an outcome, done
	// those completed.
	items                []any
	next, inflight, done int
	outputs              []json.RawMessage
	output               json.RawMessage
}

// A flight is a step call awaiting its outcome: a work item (index from
// 0) or a step without items (index -1).
type flight struct {
	st    *stepState
	index int
	fut   *reprise.Future[json.RawMessage]
}

type execution struct {
	f      *Flow
	runID  string
	input  any
	states map[string]*stepState
	// calls holds the calls in flight, in the order they were issued.
	calls []*flight
}

// execute is the flow workflow.
func execute(ctx context.Context, in RunInput) (json.RawMessage, error) {
	f, err := flows.get(in.Flow)
	if err != nil {
		return nil, &runError{TypeInvalidFlow, fmt.Sprintf("the run's flow is not valid: %v", err)}
	}
	if f.schema != nil {
		if err := f.schema.check(in.Input); err != nil {
			return nil, &runError{TypeInvalidInput, err.Error()}
		}
	}
	input, err := fromJSON(in.Input)
	if err != nil {
		return nil, &runError{TypeInvalidInput, fmt.Sprintf("input is not JSON: %v", err)}
	}
	x := &execution{f: f, runID: reprise.RunID(ctx), input: input, states: map[string]*stepState{}}
	for _, s := range f.Steps {
		x.states[s.Name] = &stepState{s: s}
	}
	for {
		if err := x.advance(ctx); err != nil {
			return nil, err
		}
		if len(x.calls) == 0 {
			break
		}
		fl := x.next(ctx)
		out, err := fl.fut.Get(ctx) // settled: at once
		if err := x.settle(ctx, fl, out, err); err != nil {
			return nil, err
		}
	}
	return x.output(), nil
}

// next waits for the call in flight that settles first, in the order of
// the history, and takes it out of the calls in flight. The others go on.
func (x *execution) next(ctx context.Context) *flight {
	fs := make([]reprise.Awaitable, len(x.calls))
	for i, fl := range x.calls {
		fs[i] = fl.fut
	}
	i := reprise.WaitAny(ctx, fs...)
	fl := x.calls[i]
	x.calls = slices.Delete(x.calls, i, i+1)
	return fl
}

// advance starts every step whose needs completed, and skips those that
// can no longer run; it fails the flow when a goal can no longer complete.
func (x *execution) advance(ctx context.Context) error {
	for _, s := range x.f.order {
		st := x.states[s.Name]
		if st.status != waiting {
			continue
		}
		ready, blocked := true, ""
		for _, n := range s.Needs {
			switch x.states[n].status {
			case completed:
			case failed, skipped:
				if blocked == "" {
					blocked = n
				}
			default:
				ready = false
			}
		}
		if blocked != "" {
			why := "failed"
			if x.states[blocked].status == skipped {
				why = "was skipped"
			}
			if x.f.critical[s.Name] {
				return &runError{TypeGoalUnreachable, fmt.Sprintf("goal %s can no longer complete: step %s needs %s, which %s",
					x.goalOf(s.Name), s.Name, blocked, why)}
			}
			st.status = skipped
			reprise.Version(ctx, SkipMarker+s.Name, 1, 1)
			continue
		}
		if ready {
			if err := x.launch(ctx, st); err != nil {
				return err
			}
		}
	}
	return nil
}

// goalOf names a goal that needs step name (or is it).
func (x *execution) goalOf(name string) string {
	for _, g := range x.f.Goals {
		if g == name || x.f.byName[g].after[name] {
			return g
		}
	}
	return name
}

// launch starts a step whose needs completed.
func (x *execution) launch(ctx context.Context, st *stepState) error {
	s := st.s
	st.vars = &vars{input: x.input, steps: map[string]any{}}
	for name := range s.after {
		if ns := x.states[name]; ns.status == completed {
			out, err := fromJSON(ns.output)
			if err != nil {
				return x.fail(ctx, st, nil, &runError{TypeExpression, fmt.Sprintf("step %s: output of %s: %v", s.Name, name, err)})
			}
			st.vars.steps[name] = map[string]any{"output": out}
		}
	}
	st.status = running
	if s.foreach == nil {
		in, err := x.stepInput(st, nil)
		if err != nil {
			return x.fail(ctx, st, nil, err)
		}
		x.issue(ctx, st, -1, in)
		return nil
	}
	list, err := s.foreach.evalAny(st.vars)
	if err != nil {
		return x.fail(ctx, st, nil, &runError{TypeExpression, fmt.Sprintf("step %s: foreach: %v", s.Name, err)})
	}
	items, ok := list.([]any)
	if !ok {
		return x.fail(ctx, st, nil, &runError{TypeExpression, fmt.Sprintf("step %s: foreach gives %s, not a list", s.Name, jsonKind(list))})
	}
	st.items, st.outputs = items, make([]json.RawMessage, len(items))
	if len(items) == 0 {
		st.status, st.output = completed, json.RawMessage("[]")
		return nil
	}
	return x.topUp(ctx, st)
}

// stepInput evaluates a step's input, for the work item at index i of a
// foreach step.
func (x *execution) stepInput(st *stepState, item *int) (json.RawMessage, error) {
	s := st.s
	if s.input == nil {
		return s.Input, nil // null or a value without references
	}
	v := *st.vars
	where := "step " + s.Name
	if item != nil {
		v.item = st.items[*item]
		where = fmt.Sprintf("step %s, item %d", s.Name, *item)
	}
	in, err := s.input.eval(&v)
	if err != nil {
		return nil, &runError{TypeExpression, fmt.Sprintf("%s: input: %v", where, err)}
	}
	return in, nil
}

// topUp issues a foreach step's next items, as many as its parallelism
// allows.
func (x *execution) topUp(ctx context.Context, st *stepState) error {
	for st.next < len(st.items) && (st.s.Parallelism == 0 || st.inflight < st.s.Parallelism) {
		i := st.next
		st.next++
		in, err := x.stepInput(st, &i)
		if err != nil {
			return x.fail(ctx, st, nil, err)
		}
		x.issue(ctx, st, i, in)
	}
	return nil
}

// httpInput is the input of a flow's HTTP step: the URL of the flow's
// version with the input to send.
type httpInput struct {
	URL   string          `json:"url"`
	Input json.RawMessage `json:"input"`
}

// issue schedules one step call.
func (x *execution) issue(ctx context.Context, st *stepState, index int, in json.RawMessage) {
	s := st.s
	var arg any = in
	if s.Kind == KindHTTP {
		arg = httpInput{URL: s.URL, Input: in}
	}
	opts := []reprise.StepOption{reprise.WithIdempotencyKey(x.key(s, index))}
	if s.Policy != nil {
		opts = append(opts, reprise.WithPolicy(*s.Policy))
	}
	fut := reprise.GoCall[json.RawMessage](ctx, x.f.EngineStep(s), arg, opts...)
	st.inflight++
	x.calls = append(x.calls, &flight{st: st, index: index, fut: fut})
}

// key is the idempotency key of a step call: the flow step's name, the
// item's index, and a hash of the run, the flow and both, the same on
// every attempt and every replay.
func (x *execution) key(s *Step, index int) string {
	h := sha256.New()
	for _, part := range []string{x.runID, x.f.Name, s.Name, strconv.Itoa(index)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	sum := hex.EncodeToString(h.Sum(nil)[:12])
	if index < 0 {
		return s.Name + "-" + sum
	}
	return s.Name + "[" + strconv.Itoa(index) + "]-" + sum
}

// settle takes the outcome of a call.
func (x *execution) settle(ctx context.Context, fl *flight, out json.RawMessage, err error) error {
	st := fl.st
	if st.status != running {
		return nil
	}
	st.inflight--
	if err != nil {
		if fl.index >= 0 {
			err = fmt.Errorf("step %s, item %d: %w", st.s.Name, fl.index, err)
		} else {
			err = fmt.Errorf("step %s: %w", st.s.Name, err)
		}
		return x.fail(ctx, st, fl.fut, err)
	}
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	if fl.index < 0 {
		st.status, st.output = completed, out
		return nil
	}
	st.outputs[fl.index] = out
	st.done++
	if st.done == len(st.items) {
		var b bytes.Buffer
		b.WriteByte('[')
		for i, o := range st.outputs {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(o)
		}
		b.WriteByte(']')
		st.status, st.output = completed, b.Bytes()
		return nil
	}
	return x.topUp(ctx, st)
}

// fail fails a step. The flow fails with err unless the step is optional;
// then the step's calls still in flight are cancelled. call is the
// call whose failure this is, if there is one.
func (x *execution) fail(ctx context.Context, st *stepState, call *reprise.Future[json.RawMessage], err error) error {
	st.status = failed
	if !st.s.Optional {
		return err
	}
	var mine []reprise.Awaitable
	rest := x.calls[:0]
	for _, fl := range x.calls {
		if fl.st == st {
			mine = append(mine, fl.fut)
		} else {
			rest = append(rest, fl)
		}
	}
	x.calls = rest
	if len(mine) > 0 {
		// A select cancels its losers; a settled future (or a timer
		// of no time) wins at once.
		var first reprise.Awaitable = call
		if call == nil {
			first = reprise.After(ctx, 0)
		}
		reprise.Select(ctx, append([]reprise.Awaitable{first}, mine...)...)
	}
	return nil
}

// output is the run's output: an object of the goals' outputs.
func (x *execution) output() json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, g := range x.f.Goals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(quote(g))
		b.WriteByte(':')
		out := x.states[g].output
		if out == nil {
			out = json.RawMessage("null")
		}
		b.Write(out)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// jsonKind names the JSON type of a value, for messages.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	return "a number"
}

// flows caches the flows runs carry, parsed, by their canonical JSON: a
// run's workflow code runs again on every replay.
var flows = &flowCache{m: map[[32]byte]*Flow{}}

type flowCache struct {
	mu sync.Mutex
	m  map[[32]byte]*Flow
}

// flowCacheMax bounds the cache; past it, it starts over.
const flowCacheMax = 64

func (c *flowCache) get(canonical []byte) (*Flow, error) {
	k := sha256.Sum256(canonical)
	c.mu.Lock()
	f := c.m[k]
	c.mu.Unlock()
	if f != nil {
		return f, nil
	}
	f, err := Parse("flow", canonical)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) >= flowCacheMax {
		clear(c.m)
	}
	c.m[k] = f
	c.mu.Unlock()
	return f, nil
}

// ItemOf reads the idempotency key of a flow's step call: the flow step
// it belongs to and, for a work item, the item's index (-1 for none).
// ok is false for a key a flow did not make.
func ItemOf(key string) (step string, index int, ok bool) {
	i := strings.LastIndexByte(key, '-')
	if i < 0 || len(key)-i-1 != 24 || strings.Trim(key[i+1:], "0123456789abcdef") != "" {
		return "", 0, false
	}
	name, index := key[:i], -1
	if open := strings.IndexByte(name, '['); open >= 0 && strings.HasSuffix(name, "]") {
		digits := name[open+1 : len(name)-1]
		n, err := strconv.Atoi(digits)
		if err != nil || n < 0 || strconv.Itoa(n) != digits {
			return "", 0, false
		}
		name, index = name[:open], n
	}
	if !stepNameRE.MatchString(name) {
		return "", 0, false
	}
	return name, index, true
}
