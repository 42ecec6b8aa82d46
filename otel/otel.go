// Package otel traces what a reprise engine runs with OpenTelemetry: a span
// per run, per step and per attempt, one trace per run whichever processes
// execute it (docs/observability.md).
package otel

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"reprise"
)

// The attributes of reprise's spans, beside OpenTelemetry's error.type
// and, on an HTTP step's attempts, its HTTP client attributes.
const (
	AttrRunID          = attribute.Key("reprise.run.id")
	AttrWorkflow       = attribute.Key("reprise.workflow")
	AttrRunStatus      = attribute.Key("reprise.run.status")
	AttrChildRunID     = attribute.Key("reprise.child.run.id") // on a parent's step that is a child run
	AttrStep           = attribute.Key("reprise.step")
	AttrExecution      = attribute.Key("reprise.step.execution") // after a continue-as-new: 2 on
	AttrPosition       = attribute.Key("reprise.step.position")
	AttrIdempotencyKey = attribute.Key("reprise.step.idempotency_key")
	AttrStepStatus     = attribute.Key("reprise.step.status") // completed, failed, cancelled
	AttrAttempts       = attribute.Key("reprise.step.attempts")
	AttrAttempt        = attribute.Key("reprise.attempt")
	AttrWorker         = attribute.Key("reprise.attempt.worker")
	AttrOutcome        = attribute.Key("reprise.attempt.outcome") // reprise.AttemptOutcome
	// AttrDecision is what the step's policy decided on a failed attempt:
	// "retry" (after AttrRetryDelay seconds) or "stop" (for AttrStopReason).
	AttrDecision   = attribute.Key("reprise.decision")
	AttrRetryDelay = attribute.Key("reprise.retry.delay")
	AttrStopReason = attribute.Key("reprise.stop.reason")
)

// A Tracer makes the spans of an engine's runs: set it as the engine's
// Config.Tracer and as its Config.Observer (beside others, if need be).
// Its spans go where the options given to New send them; nothing is
// exported otherwise.
//
// Each span is emitted when what it covers ends, by the process that saw
// it end, with the start time the engine reports: an attempt's span when
// its outcome is recorded (by the engine that ran it, the one behind the
// API that got a pull worker's result, or the one whose reaper found its
// lease lapsed), a step's with its last attempt's, a run's when it ends.
// Their ids are derived from the run's trace context, so the spans of one
// run form one tree though different processes emit them (ids.go). The
// spans are made off the engine's path, in batches, shortly after the
// ends are reported (queue.go): ForceFlush makes those waiting.
type Tracer struct {
	reprise.NopObserver

	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	// notes holds, by attempt, the attempt spans their steps wrote to
	// (an HTTP step's attributes), until the attempt ends. One whose end
	// this process never hears of (its lease lost mid-step, the attempt
	// reaped by another process) stays: a few attributes, rarely.
	notes sync.Map

	queue    queue
	building sync.Mutex // held by the one build at a time, which owns b
	b        builder
}

var (
	_ reprise.Observer = (*Tracer)(nil)
	_ reprise.Tracer   = (*Tracer)(nil)
)

// New returns a Tracer on a TracerProvider made with opts: the caller's
// exporter (sdktrace.WithBatcher(exporter)), resource and sampler. The
// provider gets an IDGenerator of reprise's (which gives reprise's spans
// their derived ids and any other span a random one) in place of one in
// opts. Call Shutdown when done to export what is left.
func New(opts ...sdktrace.TracerProviderOption) *Tracer {
	p := sdktrace.NewTracerProvider(append(slices.Clip(opts), sdktrace.WithIDGenerator(ids{}))...)
	t := &Tracer{provider: p, tracer: p.Tracer("reprise")}
	t.b.t = t
	return t
}

// TracerProvider returns the provider of the Tracer's spans, for spans of
// the caller's own in the same pipeline.
func (t *Tracer) TracerProvider() trace.TracerProvider { return t.provider }

// Shutdown makes the spans of the ends queued, exports the spans not
// exported yet and stops the provider. Ends reported after it are
// dropped.
func (t *Tracer) Shutdown(ctx context.Context) error {
	t.queue.close()
	t.flush()
	return t.provider.Shutdown(ctx)
}

// NewTraceParent makes the trace context of a run started without one: a
// new trace, whose root is the run's span.
func (t *Tracer) NewTraceParent(runID string) string { return newTraceParent(runID) }

// AttemptContext returns ctx with attempt a's span, for what its step
// traces, and that span's traceparent.
func (t *Tracer) AttemptContext(ctx context.Context, a reprise.AttemptInfo) (context.Context, string) {
	sc := traceOf(a.RunID, a.TraceParent).attempt(a.Execution, a.Position, a.Attempt)
	s := &attemptSpan{t: t, key: keyOf(a), sc: sc}
	return trace.ContextWithSpan(ctx, s), traceParent(sc)
}

// AttemptTraceParent returns the traceparent of attempt a's span.
func (t *Tracer) AttemptTraceParent(a reprise.AttemptInfo) string {
	return traceParent(traceOf(a.RunID, a.TraceParent).attempt(a.Execution, a.Position, a.Attempt))
}

// ChildTraceParent returns the trace context of the child run that run
// runID starts at position of execution: the span of the parent's step
// at that position, in the parent's trace.
func (t *Tracer) ChildTraceParent(runID, tp string, execution, position int) string {
	return traceParent(traceOf(runID, tp).step(execution, position))
}

// AttemptEnded queues the attempt's span and, if the step ended with it,
// the step's, to be made with the next batch (queue.go).
func (t *Tracer) AttemptEnded(a reprise.AttemptEnd) {
	t.push(&end{at: time.Now(), attempt: a})
}

// RunEnded queues the run's span, and a child run's step in its parent.
func (t *Tracer) RunEnded(r reprise.RunEnd) {
	t.push(&end{at: time.Now(), isRun: true, run: r})
}

// ForceFlush makes the spans of the ends queued and has the provider's
// processors export them.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	t.flush()
	return t.provider.ForceFlush(ctx)
}

// Dropped returns how many ends of attempts and runs found the queue full
// (the spans are made far slower than the engine ends them) and were
// dropped: their spans are missing.
func (t *Tracer) Dropped() int64 {
	t.queue.mu.Lock()
	defer t.queue.mu.Unlock()
	return t.queue.dropped
}

// A builder makes the spans of the ends queued, one batch at a time
// (Tracer.building): its buffers are reused from span to span.
type builder struct {
	t     *Tracer
	names spanNames
	ctx   spanCtx
	attrs []attribute.KeyValue
	start [2]trace.SpanStartOption
	end   [1]trace.SpanEndOption
}

// attemptEnded emits the attempt's span and, if the step ended with it,
// the step's.
func (b *builder) attemptEnded(end *reprise.AttemptEnd, now time.Time) {
	var note *attemptSpan
	if v, ok := b.t.notes.LoadAndDelete(keyOf(end.AttemptInfo)); ok {
		note, _ = v.(*attemptSpan)
	}
	rt := traceOf(end.RunID, end.TraceParent)
	if !rt.run.IsSampled() {
		return
	}
	started := now.Add(-end.Duration)
	b.emitAttempt(rt, end, note, started, now)
	if end.Outcome == reprise.OutcomeOK || end.Outcome == reprise.OutcomeCancelled || !end.Retry {
		if !end.StepStarted.IsZero() && end.StepStarted.Before(started) {
			started = end.StepStarted
		}
		b.emitStep(rt, end, started, now)
	}
}

// runEnded emits the run's span, and a child run's step in its parent.
func (b *builder) runEnded(end *reprise.RunEnd, now time.Time) {
	rt := traceOf(end.RunID, end.TraceParent)
	if !rt.run.IsSampled() {
		return
	}
	started := now
	if !end.Created.IsZero() && end.Created.Before(now) {
		started = end.Created
	}
	b.attrs = append(b.attrs[:0], AttrRunID.String(end.RunID), AttrWorkflow.String(end.Workflow),
		AttrRunStatus.String(string(end.Status)))
	b.emit(rt.parent, rt.run, b.names.of("run ", end.Workflow), trace.SpanKindInternal,
		end.Status == reprise.RunFailed, "run failed", started, now)
	if end.ParentID != "" && rt.parent.IsValid() {
		b.emitChildStep(rt, end, started, now)
	}
}

// emitChildStep emits the span of the parent's step that a child run is:
// the child's run span's parent (ChildTraceParent), a child of the
// parent's run span. It ends with the child, which is when the parent's
// step ends.
func (b *builder) emitChildStep(rt runTrace, end *reprise.RunEnd, started, ended time.Time) {
	parentRun := rt.run.WithSpanID(spanID(rt.run.TraceID(), end.ParentID, -1, -1, -1))
	b.attrs = append(b.attrs[:0], AttrRunID.String(end.ParentID), AttrChildRunID.String(end.RunID),
		AttrStepStatus.String(string(end.Status)))
	b.emit(parentRun, rt.parent, b.names.of("child ", end.Workflow), trace.SpanKindInternal,
		end.Status == reprise.RunFailed, "child run failed", started, ended)
}

// emitAttempt emits an attempt's span, child of its step's.
func (b *builder) emitAttempt(rt runTrace, end *reprise.AttemptEnd, note *attemptSpan, started, ended time.Time) {
	attrs := append(stepAttrs(b.attrs[:0], end),
		AttrAttempt.Int(end.Attempt), AttrOutcome.String(string(end.Outcome)))

	if end.Worker != "" {
		attrs = append(attrs, AttrWorker.String(end.Worker))
	}
	failed := end.Outcome != reprise.OutcomeOK && end.Outcome != reprise.OutcomeCancelled
	switch {
	case failed && end.Retry:
		attrs = append(attrs, AttrDecision.String("retry"), AttrRetryDelay.Float64(end.Delay.Seconds()))
	case failed:
		attrs = append(attrs, AttrDecision.String("stop"), AttrStopReason.String(string(end.StopReason)))
	}
	if end.ErrorType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(end.ErrorType))
	}
	name, kind := b.names.of("attempt ", end.Step), trace.SpanKindInternal
	if note != nil {
		note.mu.Lock()
		attrs = append(attrs, note.attrs...)
		if note.name != "" {
			name = note.name
		}
		if note.client {
			kind = trace.SpanKindClient
		}
		note.mu.Unlock()
	}
	b.attrs = attrs
	b.emit(rt.step(end.Execution, end.Position), rt.attempt(end.Execution, end.Position, end.Attempt), name, kind,
		failed, end.ErrorType, started, ended)
}

// emitStep emits a step's span, child of its run's.
func (b *builder) emitStep(rt runTrace, end *reprise.AttemptEnd, started, ended time.Time) {
	attrs := append(stepAttrs(b.attrs[:0], end), AttrAttempts.Int(end.Attempt))
	failed := false
	switch end.Outcome {
	case reprise.OutcomeOK:
		attrs = append(attrs, AttrStepStatus.String("completed"))
	case reprise.OutcomeCancelled:
		attrs = append(attrs, AttrStepStatus.String("cancelled"))
	default:
		failed = true
		attrs = append(attrs, AttrStepStatus.String("failed"), AttrStopReason.String(string(end.StopReason)),
			semconv.ErrorTypeKey.String(end.ErrorType))
	}
	b.attrs = attrs
	b.emit(rt.run, rt.step(end.Execution, end.Position), b.names.of("step ", end.Step), trace.SpanKindInternal,
		failed, end.ErrorType, started, ended)
}

// stepAttrs appends the attributes of a step's span and its attempts'.
func stepAttrs(attrs []attribute.KeyValue, end *reprise.AttemptEnd) []attribute.KeyValue {
	attrs = append(attrs, AttrRunID.String(end.RunID), AttrStep.String(end.Step), AttrPosition.Int(end.Position),
		AttrIdempotencyKey.String(end.IdempotencyKey))
	if end.Execution > 1 {
		attrs = append(attrs, AttrExecution.Int(end.Execution))
	}
	if end.Workflow != "" {
		attrs = append(attrs, AttrWorkflow.String(end.Workflow))
	}
	return attrs
}

// emit emits a span with the id of sc, child of parent (none if parent is
// not valid), and the attributes in b.attrs. The span copies them; the
// builder keeps the buffer, cleared so that it keeps no strings alive.
func (b *builder) emit(parent, sc trace.SpanContext, name string, kind trace.SpanKind,
	failed bool, errType string, started, ended time.Time,
) {
	ctx := b.ctx.of(parent, sc)
	opts := append(b.start[:0], trace.WithTimestamp(started))
	if kind == trace.SpanKindClient {
		opts = append(opts, clientKind) // internal is the default
	}
	_, span := b.t.tracer.Start(ctx, name, opts...)
	span.SetAttributes(b.attrs...) // copied once, where the start's option would copy them twice
	if failed {
		span.SetStatus(codes.Error, errType)
	}
	b.end[0] = trace.WithTimestamp(ended)
	span.End(b.end[:]...)
	clear(b.attrs)
	clear(opts)
}

// clientKind is the option of an HTTP step's attempt span, made once.
var clientKind = trace.WithSpanKind(trace.SpanKindClient)

// spanNames keeps the names of spans ("attempt charge"), so that a span
// does not make its name again: up to maxNames of them. Its builder owns
// it.
type spanNames map[[2]string]string

const maxNames = 1000

func (n *spanNames) of(prefix, name string) string {
	k := [2]string{prefix, name}
	if s, ok := (*n)[k]; ok {
		return s
	}
	s := prefix + name
	if *n == nil {
		*n = make(spanNames)
	}
	if len(*n) < maxNames {
		(*n)[k] = s
	}
	return s
}

// An attemptKey names an attempt.
type attemptKey struct {
	runID                        string
	execution, position, attempt int
}

func keyOf(a reprise.AttemptInfo) attemptKey {
	return attemptKey{a.RunID, a.Execution, a.Position, a.Attempt}
}

// An attemptSpan is an attempt's span as its step sees it (in its
// context) while it runs: the span is emitted when the attempt ends, with
// what the step wrote to it (attributes and a name). Setting
// http.request.method makes it an HTTP client span, as an HTTP step's is.
type attemptSpan struct {
	noop.Span

	t   *Tracer
	key attemptKey
	sc  trace.SpanContext

	mu     sync.Mutex
	noted  bool
	name   string
	client bool
	attrs  []attribute.KeyValue
}

func (s *attemptSpan) SpanContext() trace.SpanContext { return s.sc }

func (s *attemptSpan) IsRecording() bool { return s.sc.IsSampled() }

func (s *attemptSpan) TracerProvider() trace.TracerProvider { return s.t.provider }

func (s *attemptSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.note(func() {
		s.attrs = append(s.attrs, kv...)
		for _, a := range kv {
			if a.Key == semconv.HTTPRequestMethodKey {
				s.client = true
			}
		}
	})
}

func (s *attemptSpan) SetName(name string) { s.note(func() { s.name = name }) }

// note records what the step wrote, and keeps the span for the attempt's
// end.
func (s *attemptSpan) note(f func()) {
	s.mu.Lock()
	f()
	first := !s.noted
	s.noted = true
	s.mu.Unlock()
	if first {
		s.t.notes.Store(s.key, s)
	}
}
