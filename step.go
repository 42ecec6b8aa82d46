package reprise

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	"reprise/retry"
)

// A StepDef is a registered step: a named Go function with an input and a
// result that the engine calls once per attempt. Create it with NewStep and
// register it with Engine.Register; call it from a workflow with Step or Go.
type StepDef[I, O any] struct {
	name string
	fn   func(context.Context, I) (O, error)
	opts []StepOption
}

// NewStep defines a step. Its options (a policy, a concurrency limit) hold
// for every call unless a call overrides them.
func NewStep[I, O any](name string, fn func(context.Context, I) (O, error), opts ...StepOption) *StepDef[I, O] {
	return &StepDef[I, O]{name: name, fn: fn, opts: opts}
}

// Name returns the step's name.
func (s *StepDef[I, O]) Name() string { return s.name }

func (s *StepDef[I, O]) entry() (any, error) {
	cfg, err := newStepConfig(s.opts)
	if err != nil {
		return nil, fmt.Errorf("step %s: %w", s.name, err)
	}
	fn := s.fn
	plain := plainValue(reflect.TypeFor[I]())
	return &stepEntry{name: s.name, cfg: cfg, run: func(ctx context.Context, raw json.RawMessage, memo *inputMemo) (json.RawMessage, error) {
		var in I
		v, memoized := memo.get(raw)
		if memoized {
			in = v.(I)
		} else if err := unmarshalInput(raw, &in); err != nil {
			return nil, retry.Permanent(fmt.Errorf("decode input of step %s: %w", s.name, err))
		}
		out, err := fn(ctx, in) // a copy: in stays as decoded
		if err != nil {
			if plain && !memoized {
				memo.set(raw, in) // for a retry at once
			}
			return nil, err
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, retry.Permanent(fmt.Errorf("encode result of step %s: %w", s.name, err))
		}
		return b, nil
	}}, nil
}

// NewRawStep defines a step on raw JSON, for steps whose shape the engine
// does not know: HTTP steps, adapters for other languages.
func NewRawStep(name string, fn func(context.Context, json.RawMessage) (json.RawMessage, error), opts ...StepOption) *StepDef[json.RawMessage, json.RawMessage] {
	return NewStep(name, fn, opts...)
}

// stepEntry is a step as the engine runs it. run takes the memo of the
// attempts before it in the same chain (see inputMemo).
type stepEntry struct {
	name string
	cfg  stepConfig
	run  func(ctx context.Context, input json.RawMessage, memo *inputMemo) (json.RawMessage, error)
	// stored is set for a step registered from a stored definition
	// (RegisterStepDefinition).
	stored *storedStep
}

// An inputMemo keeps a step's input as the first failed attempt of a chain
// decoded it, so that the retries that follow it at once in the same
// goroutine do not decode it again: for a small input, decoding was a
// large part of what an attempt cost the engine besides its write. Only
// plain values are kept (plainValue): a copy of one shares nothing with
// the memo, so whatever an attempt does to its input, the next gets it as
// decoded. The input's bytes are compared each time, so a memo never
// serves another input. A type's own UnmarshalJSON then runs once per
// chain.
type inputMemo struct {
	raw   string
	value any
}

// get returns the value decoded from raw, if the memo holds it.
func (m *inputMemo) get(raw json.RawMessage) (any, bool) {
	if m.value == nil || m.raw != string(raw) {
		return nil, false
	}
	return m.value, true
}

// set keeps v, decoded from raw.
func (m *inputMemo) set(raw json.RawMessage, v any) {
	m.raw, m.value = string(raw), v
}

// plainValue reports whether a value of type t holds no references: a copy
// of it is a deep copy. Strings count as plain (they are immutable);
// pointers, slices, maps, interfaces, channels and functions do not.
func plainValue(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.String,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return plainValue(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !plainValue(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

// A StepOption configures a step where it is defined or where it is called;
// the call's options win.
type StepOption func(*stepConfig) error

type stepConfig struct {
	policy      *compiledPolicy
	key         string
	concurrency int
	retryIf     func(error) bool
	nextDelay   func(attempt int, err error) (time.Duration, bool)
}

// WithRetryIf gives a step a predicate that decides whether an error may
// be retried at all: false stops the step as permanent (the history says
// the predicate decided); true leaves how often and how long to the
// policy's rules. It is read where the step is defined: functions cannot
// be stored, so the engine that runs the step must have it registered.
func WithRetryIf(retryable func(error) bool) StepOption {
	return func(c *stepConfig) error {
		c.retryIf = retryable
		return nil
	}
}

// WithNextDelay gives a step a hook that replaces the policy's backoff:
// after attempt n fails with err, a retry the policy allows waits the
// returned delay instead, when ok. The deadline still holds. It is read
// where the step is defined.
func WithNextDelay(next func(attempt int, err error) (delay time.Duration, ok bool)) StepOption {
	return func(c *stepConfig) error {
		c.nextDelay = next
		return nil
	}
}

func newStepConfig(opts []StepOption) (stepConfig, error) {
	var c stepConfig
	for _, o := range opts {
		if err := o(&c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// WithPolicy sets the step's retry policy.
func WithPolicy(p retry.Policy) StepOption {
	return func(c *stepConfig) error {
		cp, err := compilePolicy(p)
		c.policy = cp
		return err
	}
}

// WithPolicyText sets the step's retry policy from its text form or one of
// its JSON shapes (see retry.ParseAny).
func WithPolicyText(s string) StepOption {
	return func(c *stepConfig) error {
		p, err := retry.ParseAny(s)
		if err != nil {
			return fmt.Errorf("policy: %w", err)
		}
		return WithPolicy(p)(c)
	}
}

// WithIdempotencyKey replaces the step's default key, a hash of the run id,
// the step's position, its name and its input.
func WithIdempotencyKey(key string) StepOption {
	return func(c *stepConfig) error {
		if key == "" {
			return fmt.Errorf("idempotency key is empty")
		}
		c.key = key
		return nil
	}
}

// WithConcurrency caps how many attempts of the step run at once in one
// engine. It is read where the step is defined.
func WithConcurrency(n int) StepOption {
	return func(c *stepConfig) error {
		if n < 0 {
			return fmt.Errorf("concurrency %d is negative", n)
		}
		c.concurrency = n
		return nil
	}
}

// StepInfo describes the attempt a step function is running.
type StepInfo struct {
	RunID          string
	Step           string
	Position       int
	Attempt        int
	IdempotencyKey string
	// Deadline is when the attempt times out; zero for no timeout.
	Deadline time.Time
	// StepVersion is the version of the stored step definition the step
	// was scheduled under (see RegisterStepDefinition); 0 for a step
	// without one.
	StepVersion int
	// TraceParent is the W3C traceparent of the attempt's span, for the
	// step to send on (an HTTP step sends it as its traceparent header);
	// empty for an engine without a Config.Tracer.
	TraceParent string
}

type stepInfoKey struct{}

// StepInfoFrom returns the attempt a step's context belongs to.
func StepInfoFrom(ctx context.Context) (StepInfo, bool) {
	info, ok := ctx.Value(stepInfoKey{}).(*StepInfo)
	if !ok {
		return StepInfo{}, false
	}
	return *info, true
}

// defaultKey is the idempotency key of a step: stable across attempts and
// replays because every part of it is.
func defaultKey(runID string, execution, position int, name string, input []byte) string {
	h := sha256.New()
	h.Write([]byte(runID))
	h.Write([]byte{0})
	if execution > 1 {
		h.Write([]byte(strconv.Itoa(execution)))
		h.Write([]byte{0})
	}
	h.Write([]byte(strconv.Itoa(position)))
	h.Write([]byte{0})
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(input)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// unmarshalInput decodes raw into v; an absent input leaves v zero.
func unmarshalInput(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}
