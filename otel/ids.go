package otel

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"hash/fnv"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// The spans of a run have ids that any process derives from the run's
// trace context, its id and the step's place, so that attempts, steps and
// the run, each emitted by whichever process saw it end, form one tree:
//
//	run      hash(trace id, run id)
//	step     hash(trace id, run id, execution, position)
//	attempt  hash(trace id, run id, execution, position, attempt)
//
// A run's trace context (reprise.Run.TraceParent) is the traceparent its
// span is a child of: the caller's, given at the start. One that New made
// names the run's own span as its parent id, which says the run's span is
// the trace's root.

// A runTrace is a run's place in its trace.
type runTrace struct {
	runID string
	// run is the run's span; parent the caller's span it is a child of,
	// not valid for a root.
	run, parent trace.SpanContext
}

// traceOf returns the trace of a run from its trace context tp. A run
// without one (started before tracing was on, or a child run whose parent
// had none) has a trace id derived from its id, the same in every
// process, and a root span.
func traceOf(runID, tp string) runTrace {
	tid, psid, flags, ok := parseTraceParent(tp)
	if !ok {
		h := fnv.New128a()
		h.Write([]byte("reprise run\x00"))
		h.Write([]byte(runID))
		h.Sum(tid[:0])
		flags = trace.FlagsSampled
	}
	rt := runTrace{runID: runID}
	rsid := spanID(tid, runID, -1, -1, -1)
	rt.run = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: rsid, TraceFlags: flags, Remote: true})
	if ok && psid != rsid {
		rt.parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: psid, TraceFlags: flags, Remote: true})
	}
	return rt
}

// step returns the context of the span of the step at position of
// execution.
func (rt runTrace) step(execution, position int) trace.SpanContext {
	return rt.child(spanID(rt.run.TraceID(), rt.runID, execution, position, -1))
}

// attempt returns the context of the span of attempt n of that step.
func (rt runTrace) attempt(execution, position, n int) trace.SpanContext {
	return rt.child(spanID(rt.run.TraceID(), rt.runID, execution, position, n))
}

func (rt runTrace) child(id trace.SpanID) trace.SpanContext {
	return rt.run.WithSpanID(id)
}

// spanID derives a span id; -1 leaves a part out.
func spanID(tid trace.TraceID, runID string, execution, position, attempt int) trace.SpanID {
	h := fnv.New64a()
	h.Write(tid[:])
	h.Write([]byte(runID))
	var b [3 * binary.MaxVarintLen64]byte
	n := binary.PutVarint(b[:], int64(execution))
	n += binary.PutVarint(b[n:], int64(position))
	n += binary.PutVarint(b[n:], int64(attempt))
	h.Write(b[:n])
	var id trace.SpanID
	binary.BigEndian.PutUint64(id[:], max(h.Sum64(), 1)) // never the invalid all-zero id
	return id
}

// parseTraceParent reads a version 00 traceparent.
func parseTraceParent(tp string) (trace.TraceID, trace.SpanID, trace.TraceFlags, bool) {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return trace.TraceID{}, trace.SpanID{}, 0, false
	}
	tid, err := trace.TraceIDFromHex(tp[3:35])
	if err != nil {
		return trace.TraceID{}, trace.SpanID{}, 0, false
	}
	sid, err := trace.SpanIDFromHex(tp[36:52])
	if err != nil {
		return trace.TraceID{}, trace.SpanID{}, 0, false
	}
	var flags [1]byte
	if _, err := hex.Decode(flags[:], []byte(tp[53:])); err != nil {
		return trace.TraceID{}, trace.SpanID{}, 0, false
	}
	return tid, sid, trace.TraceFlags(flags[0]), true
}

// traceParent formats a span's context as a traceparent.
func traceParent(sc trace.SpanContext) string {
	tid, sid, flags := sc.TraceID(), sc.SpanID(), [1]byte{byte(sc.TraceFlags())}
	var b [55]byte
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:], flags[:])
	return string(b[:])
}

// newTraceParent makes the trace context of a run started without one: a
// new trace whose root is the run's span.
func newTraceParent(runID string) string {
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
	binary.BigEndian.PutUint64(tid[8:], rand.Uint64()|1) // never the invalid all-zero id
	sid := spanID(tid, runID, -1, -1, -1)
	return "00-" + tid.String() + "-" + sid.String() + "-01"
}

// ids is the TracerProvider's IDGenerator: the ids a span is started with
// (spanCtx), else random ones, as the SDK's own.
type ids struct{}

type idsKey struct{}

// A spanCtx is the context a span of reprise's is started with: its
// parent span's context (none when not valid) and the ids it takes. A
// builder reuses one for all its spans, set anew for each, where a new one
// would take three allocations a span; the SDK does not keep it past the
// span's start.
type spanCtx struct {
	context.Context //nolint:containedctx // a context itself, wrapping its parent
	parent          parentSpan
	sc              trace.SpanContext
}

// parentSpan is the parent a spanCtx names: a span context alone.
type parentSpan struct {
	noop.Span
	sc trace.SpanContext
}

func (p *parentSpan) SpanContext() trace.SpanContext { return p.sc }

// of returns c set to start the span sc, child of parent.
func (c *spanCtx) of(parent, sc trace.SpanContext) context.Context {
	if c.Context == nil {
		//nolint:forbidigo // an Observer's calls bring no context; the span's parent and ids are set on this one
		c.Context = trace.ContextWithSpan(context.Background(), &c.parent)
	}
	c.parent.sc, c.sc = parent, sc
	return c
}

func (c *spanCtx) Value(key any) any {
	if key == (idsKey{}) {
		return c
	}
	return c.Context.Value(key)
}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if c, ok := ctx.Value(idsKey{}).(*spanCtx); ok {
		return c.sc.TraceID(), c.sc.SpanID()
	}
	var tid trace.TraceID
	binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
	binary.BigEndian.PutUint64(tid[8:], rand.Uint64()|1)
	return tid, randomSpanID()
}

func (ids) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if c, ok := ctx.Value(idsKey{}).(*spanCtx); ok {
		return c.sc.SpanID()
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var id trace.SpanID
	binary.BigEndian.PutUint64(id[:], rand.Uint64()|1)
	return id
}
