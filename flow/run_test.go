package flow_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/flow"
	"reprise/reprisetest"
	"reprise/store"
)

// call is one request an endpoint of the test service received.
type call struct {
	Path    string
	Key     string
	Attempt int
	Input   json.RawMessage
}

// service is an HTTP service whose endpoints answer as the test says;
// it records every call.
type service struct {
	*httptest.Server
	mu     sync.Mutex
	calls  []call
	handle map[string]func(c call, n int) (status int, body string)
}

func newService(t *testing.T) *service {
	s := &service{handle: map[string]func(call, int) (int, string){}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Attempt        int             `json:"attempt"`
			IdempotencyKey string          `json:"idempotency_key"`
			Input          json.RawMessage `json:"input"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			t.Errorf("%s: body %s: %v", r.URL.Path, b, err)
		}
		if got := r.Header.Get("Idempotency-Key"); got != req.IdempotencyKey {
			t.Errorf("%s: Idempotency-Key %q, body's %q", r.URL.Path, got, req.IdempotencyKey)
		}
		c := call{Path: r.URL.Path, Key: req.IdempotencyKey, Attempt: req.Attempt, Input: req.Input}
		s.mu.Lock()
		s.calls = append(s.calls, c)
		n := 0
		for _, o := range s.calls {
			if o.Key == c.Key {
				n++
			}
		}
		h := s.handle[r.URL.Path]
		s.mu.Unlock()
		status, body := 200, `{"success": true, "output": `+string(req.Input)+`}`
		if h != nil {
			status, body = h(c, n)
		}
		switch {
		case status == 0:
			<-r.Context().Done() // hang
			return
		case status < 0:
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		case strings.HasPrefix(body, "retry-after:"):
			w.Header().Set("Retry-After", strings.TrimPrefix(body, "retry-after:"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if _, err := io.WriteString(w, body); err != nil {
			t.Errorf("%s: write the answer: %v", r.URL.Path, err)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// on sets how an endpoint answers: h gets the call and how many calls
// with its key came so far, this one included.
func (s *service) on(path string, h func(c call, n int) (int, string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handle[path] = h
}

func (s *service) callsTo(path string) []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []call
	for _, c := range s.calls {
		if c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// flowEnv parses a flow (with URL standing for the service's address),
// and runs an engine for it.
func flowEnv(t *testing.T, src string, svc *service) (*reprisetest.Env, *flow.Flow) {
	t.Helper()
	if svc != nil {
		src = strings.ReplaceAll(src, "URL", svc.URL)
	}
	f, err := flow.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	env := reprisetest.New(t, nil)
	if err := flow.Register(env.Engine, f, nil); err != nil {
		t.Fatal(err)
	}
	return env, f
}

// runFlow starts a run of f with input and waits for it.
func runFlow(t *testing.T, env *reprisetest.Env, f *flow.Flow, input string) (*store.Run, []store.Event) {
	t.Helper()
	run, _, err := flow.Start(t.Context(), env.Engine, f, json.RawMessage(input))
	if err != nil {
		t.Fatal(err)
	}
	run = env.Wait(run.ID)
	return run, env.History(run.ID)
}

// scheduled returns the idempotency keys of the steps scheduled, in the
// order of the history.
func scheduled(events []store.Event) []string {
	var keys []string
	for _, ev := range events {
		if ev.Type == store.EventStepScheduled {
			keys = append(keys, ev.IdempotencyKey)
		}
	}
	return keys
}

// keyName is the flow step and item a key names: "reserve[2]".
func keyName(key string) string {
	i := strings.LastIndexByte(key, '-')
	return key[:i]
}

// attempts gives, for each item (key name), the times its attempts
// started, relative to the run's start.
func attempts(events []store.Event) map[string][]time.Duration {
	start := events[0].At
	byPos := map[int]string{}
	out := map[string][]time.Duration{}
	for _, ev := range events {
		switch ev.Type {
		case store.EventStepScheduled:
			byPos[ev.Position] = keyName(ev.IdempotencyKey)
		case store.EventAttemptStarted:
			name := byPos[ev.Position]
			out[name] = append(out[name], ev.At.Sub(start))
		}
	}
	return out
}

func wantOutput(t *testing.T, run *store.Run, want string) {
	t.Helper()
	var got, w any
	if err := json.Unmarshal(run.Output, &got); err != nil {
		t.Fatalf("output %s: %v", run.Output, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("output %s, want %s", run.Output, want)
	}
}

func wantStatus(t *testing.T, run *store.Run, status store.RunStatus) {
	t.Helper()
	if run.Status != status {
		t.Fatalf("run %s (%+v), want %s", run.Status, run.Error, status)
	}
}

func TestFlowOutputAndReferences(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	svc.on("/quote", func(c call, n int) (int, string) {
		return 200, `{"success": true, "output": {"price": 42}}`
	})
	env, f := flowEnv(t, `
flow: fulfil-order
steps:
  quote:
    http: URL/quote
    input: {sku: "{{ input.sku }}", qty: "{{ input.qty }}"}
  reserve:
    needs: [quote]
    foreach: "{{ input.warehouses }}"
    http: URL/reserve
    input: {warehouse: "{{ item }}", price: "{{ steps.quote.output.price }}", note: "{{ item }} at {{ steps.quote.output.price }}"}
  notify:
    needs: [reserve]
    http: URL/notify
    input: "{{ steps.reserve.output }}"
    optional: true
goals: [quote, reserve]
`, svc)
	run, events := runFlow(t, env, f, `{"sku": "A-1", "qty": 3, "warehouses": ["north", "south", "east"]}`)
	wantStatus(t, run, reprise.RunCompleted)
	wantOutput(t, run, `{"quote": {"price": 42}, "reserve": [
		{"warehouse": "north", "price": 42, "note": "north at 42"},
		{"warehouse": "south", "price": 42, "note": "south at 42"},
		{"warehouse": "east", "price": 42, "note": "east at 42"}]}`)
	if got := string(svc.callsTo("/quote")[0].Input); got != `{"qty":3,"sku":"A-1"}` {
		t.Errorf("quote's input %s: a whole reference keeps its JSON type", got)
	}
	notify := svc.callsTo("/notify")
	if len(notify) != 1 || !strings.HasPrefix(string(notify[0].Input), `[{"note":"north at 42"`) {
		t.Errorf("notify's calls %+v", notify)
	}
	var names []string
	for _, k := range scheduled(events) {
		names = append(names, keyName(k))
	}
	if want := []string{"quote", "reserve[0]", "reserve[1]", "reserve[2]", "notify"}; !slices.Equal(names, want) {
		t.Errorf("steps scheduled %v, want %v", names, want)
	}
	for _, ev := range events {
		if ev.Type == store.EventStepScheduled && !strings.HasPrefix(ev.Step, "fulfil-order.") {
			t.Errorf("step scheduled as %q, want fulfil-order.NAME", ev.Step)
		}
	}
}

func TestFlowDAGParallel(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	svc.on("/slow", func(c call, n int) (int, string) {
		if n < 3 {
			return 503, "busy"
		}
		return 200, `{"success": true, "output": "slow"}`
	})
	env, f := flowEnv(t, `
flow: dag
steps:
  slow:
    http: URL/slow
    policy: "[retry: 5, backoff: 10s, backoff_kind: fixed]"
  fast:
    http: URL/fast
    input: fast
  after_slow:
    needs: [slow]
    http: URL/after
    input: "{{ steps.slow.output }}"
  after_both:
    needs: [slow, fast]
    http: URL/after
    input: "{{ steps.slow.output + steps.fast.output }}"
`, svc)
	run, events := runFlow(t, env, f, `null`)
	wantStatus(t, run, reprise.RunCompleted)
	wantOutput(t, run, `{"after_slow": "slow", "after_both": "slowfast"}`)
	at := attempts(events)
	want := map[string][]time.Duration{
		"slow": {0, 10 * time.Second, 20 * time.Second}, "fast": {0},
		"after_slow": {20 * time.Second}, "after_both": {20 * time.Second},
	}
	if !reflect.DeepEqual(at, want) {
		t.Errorf("attempts started at %v, want %v", at, want)
	}
}

func TestFlowParallelismBoundsItems(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	svc.on("/item", func(c call, n int) (int, string) {
		if n == 1 {
			return 503, "try again"
		}
		return 200, `{"success": true, "output": ` + string(c.Input) + `}`
	})
	env, f := flowEnv(t, `
flow: bounded
steps:
  each:
    http: URL/item
    foreach: "{{ input }}"
    parallelism: 2
    work_config: {max_retries: 1, backoff: 1000, backoff_type: fixed}
`, svc)
	run, events := runFlow(t, env, f, `[1, 2, 3, 4, 5]`)
	wantStatus(t, run, reprise.RunCompleted)
	wantOutput(t, run, `{"each": [1, 2, 3, 4, 5]}`)
	inFlight, most := 0, 0
	for _, ev := range events {
		switch ev.Type {
		case store.EventStepScheduled:
			inFlight++
			most = max(most, inFlight)
		case store.EventStepCompleted, store.EventStepFailed:
			inFlight--
		}
	}
	if most != 2 {
		t.Errorf("at most %d items in flight, want 2", most)
	}
	for name, times := range attempts(events) {
		if len(times) != 2 || times[1]-times[0] != time.Second {
			t.Errorf("%s: attempts at %v, want two, 1s apart", name, times)
		}
	}
}

func TestFlowWorkConfig(t *testing.T) {
	t.Parallel()
	const s = time.Second
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name, config string
		// okAt is the attempt that succeeds (0: none does).
		okAt     int
		status   store.RunStatus
		attempts []time.Duration
	}{
		{"no retries", `{max_retries: 0, backoff: 500}`, 0, reprise.RunFailed, []time.Duration{0}},
		{"three retries exhausted", `{max_retries: 3, backoff: 500, backoff_type: fixed}`, 0, reprise.RunFailed,
			[]time.Duration{0, ms(500), s, ms(1500)}},
		{"unlimited", `{max_retries: -1, backoff: 500, backoff_type: fixed}`, 7, reprise.RunCompleted,
			[]time.Duration{0, ms(500), s, ms(1500), 2 * s, ms(2500), 3 * s}},
		{"linear", `{max_retries: 3, backoff: 500, backoff_type: linear}`, 0, reprise.RunFailed,
			[]time.Duration{0, ms(500), ms(1500), 3 * s}},
		{"exponential with cap", `{max_retries: 4, backoff: 500, max_backoff: 1500, backoff_type: exponential}`, 0, reprise.RunFailed,
			[]time.Duration{0, ms(500), ms(1500), 3 * s, ms(4500)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			svc.on("/item", func(c call, n int) (int, string) {
				if string(c.Input) == "1" && n != tc.okAt {
					return 500, "down"
				}
				return 200, `{"success": true}`
			})
			env, f := flowEnv(t, `
flow: work
steps:
  each:
    http: URL/item
    foreach: "{{ input }}"
    work_config: `+tc.config+`
`, svc)
			run, events := runFlow(t, env, f, `[0, 1, 2]`)
			wantStatus(t, run, tc.status)
			at := attempts(events)
			if !reflect.DeepEqual(at["each[1]"], tc.attempts) {
				t.Errorf("item 1's attempts started at %v, want %v", at["each[1]"], tc.attempts)
			}
			if len(at["each[0]"]) != 1 {
				t.Errorf("item 0's attempts %v, want one: items are retried alone", at["each[0]"])
			}
			if tc.status == reprise.RunFailed {
				if run.Error == nil || run.Error.Type != "HTTP5xx" {
					t.Errorf("run error %+v, want the item's HTTP5xx", run.Error)
				}
				var reasons []string
				for _, ev := range events {
					if ev.Type == store.EventStepFailed {
						reasons = append(reasons, ev.Reason)
					}
				}
				if !slices.Equal(reasons, []string{"exhausted"}) {
					t.Errorf("steps failed with reasons %v, want one, exhausted", reasons)
				}
			}
		})
	}
}

func TestFlowHTTPClassificationPerItem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		answer func(n int) (int, string)
		// attempts of the item; errType of the run's error ("" completed).
		attempts int
		errType  string
	}{
		{"503 with Retry-After is retried", func(n int) (int, string) {
			if n < 3 {
				return 503, ""
			}
			return 200, `{"success": true}`
		}, 3, ""},
		{"a 4xx is permanent", func(int) (int, string) { return 404, "no such thing" }, 1, "HTTP4xx"},
		{"success false is permanent", func(int) (int, string) {
			return 200, `{"success": false, "error": {"type": "OutOfStock", "message": "none left"}}`
		}, 1, "OutOfStock"},
		{"success false retryable is retried", func(n int) (int, string) {
			if n < 2 {
				return 200, `{"success": false, "error": {"type": "Busy", "retryable": true}}`
			}
			return 200, `{"success": true}`
		}, 2, ""},
		// Go's transport may send a request again by itself when a
		// reused connection closes (it has an Idempotency-Key), so the
		// endpoint closes four times, which take two attempts or more.
		{"a transport error is retried", func(n int) (int, string) {
			if n < 5 {
				return -1, "" // the connection is closed
			}
			return 200, `{"success": true}`
		}, -1, ""},
		{"a hang times out and is retried", func(n int) (int, string) {
			if n < 2 {
				return 0, "" // hang
			}
			return 200, `{"success": true}`
		}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			svc.on("/item", func(c call, n int) (int, string) {
				if string(c.Input) != "1" {
					return 200, `{"success": true}`
				}
				return tc.answer(n)
			})
			env, f := flowEnv(t, `
flow: classify
steps:
  each:
    http: URL/item
    foreach: "{{ input }}"
    policy: "[retry: 4, backoff: 1s] [timeout: 5s]"
`, svc)
			run, events := runFlow(t, env, f, `[0, 1, 2]`)
			got := attempts(events)["each[1]"]
			if tc.attempts < 0 {
				if len(got) < 2 || failedTypes(events)[0] != "TransportError" {
					t.Errorf("item 1 had %d attempts, failing with %v; want two or more, failing with TransportError", len(got), failedTypes(events))
				}
			} else if len(got) != tc.attempts {
				t.Errorf("item 1 had %d attempts (at %v), want %d", len(got), got, tc.attempts)
			}
			if tc.errType == "" {
				wantStatus(t, run, reprise.RunCompleted)
				return
			}
			wantStatus(t, run, reprise.RunFailed)
			if run.Error.Type != tc.errType {
				t.Errorf("run error %+v, want type %s", run.Error, tc.errType)
			}
		})
	}
	t.Run("Retry-After sets the delay", func(t *testing.T) {
		t.Parallel()
		svc := newService(t)
		svc.on("/item", func(c call, n int) (int, string) {
			if n == 1 {
				return 503, "retry-after:7"
			}
			return 200, `{"success": true}`
		})
		env, f := flowEnv(t, `
flow: later
steps:
  each:
    http: URL/item
    foreach: [a]
    policy: "[retry: 2, backoff: 1s]"
`, svc)
		run, events := runFlow(t, env, f, `null`)
		wantStatus(t, run, reprise.RunCompleted)
		if got := attempts(events)["each[0]"]; !reflect.DeepEqual(got, []time.Duration{0, 7 * time.Second}) {
			t.Errorf("attempts at %v, want 0s and 7s (Retry-After: 7)", got)
		}
	})
}

// markers returns the names of the version markers in the history.
func markers(events []store.Event) []string {
	var out []string
	for _, ev := range events {
		if ev.Type == store.EventVersionMarker {
			out = append(out, ev.Change)
		}
	}
	return out
}

func TestFlowGoalsSkippedOptional(t *testing.T) {
	t.Parallel()
	const steps = `
steps:
  a:
    http: URL/ok
  broken:
    http: URL/bad
    optional: OPTIONAL
  uses_broken:
    needs: [broken]
    http: URL/ok
  after_that:
    needs: [uses_broken]
    http: URL/ok
  b:
    needs: [a]
    http: URL/ok
    input: "{{ steps.a.output }}"
`
	for _, tc := range []struct {
		name, goals, optional string
		status                store.RunStatus
		errType, output       string
		skipped               []string
	}{
		{"an optional step fails, its dependents are skipped", "goals: [b]", "true",
			reprise.RunCompleted, "", `{"b": null}`, []string{"skipped:uses_broken", "skipped:after_that"}},
		{"a goal needs a failed optional step", "goals: [b, after_that]", "true",
			reprise.RunFailed, flow.TypeGoalUnreachable, "", nil},
		{"a step that is not optional fails the flow", "goals: [b]", "false",
			reprise.RunFailed, "HTTP4xx", "", nil},
		{"default goals leave optional steps out", "", "true",
			reprise.RunFailed, flow.TypeGoalUnreachable, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc := newService(t)
			svc.on("/bad", func(call, int) (int, string) { return 400, "bad request" })
			src := "flow: goals\n" + strings.Replace(steps, "OPTIONAL", tc.optional, 1) + tc.goals + "\n"
			env, f := flowEnv(t, src, svc)
			run, events := runFlow(t, env, f, `null`)
			wantStatus(t, run, tc.status)
			if tc.status == reprise.RunCompleted {
				wantOutput(t, run, tc.output)
			} else if run.Error.Type != tc.errType {
				t.Errorf("run error %+v, want %s", run.Error, tc.errType)
			}
			if got := markers(events); !slices.Equal(got, tc.skipped) {
				t.Errorf("markers %v, want %v", got, tc.skipped)
			}
		})
	}
}

// TestFlowSkipAtTheEndIsRecorded: a step skipped by the flow's last
// decision, with nothing left in flight, is in the history as its marker.
func TestFlowSkipAtTheEndIsRecorded(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	svc.on("/bad", func(call, int) (int, string) { return 400, "bad request" })
	env, f := flowEnv(t, `
flow: skip-last
steps:
  a:
    http: URL/ok
  broken:
    needs: [a]
    http: URL/bad
    optional: true
  uses_broken:
    needs: [broken]
    http: URL/ok
goals: [a]
`, svc)
	run, events := runFlow(t, env, f, `null`)
	wantStatus(t, run, reprise.RunCompleted)
	if got := markers(events); !slices.Equal(got, []string{"skipped:uses_broken"}) {
		t.Errorf("markers %v, want [skipped:uses_broken]", got)
	}
}

func TestFlowOptionalForeachCancelsItsItems(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	svc.on("/item", func(c call, n int) (int, string) {
		switch string(c.Input) {
		case `"bad"`:
			return 422, "no"
		case `"slow"`:
			return 503, "later"
		}
		return 200, `{"success": true}`
	})
	env, f := flowEnv(t, `
flow: cancel
steps:
  each:
    http: URL/item
    foreach: ["bad", "slow", "ok"]
    policy: "[retry: unlimited, backoff: 1m]"
    optional: true
  other:
    http: URL/item
goals: [other]
`, svc)
	run, events := runFlow(t, env, f, `null`)
	wantStatus(t, run, reprise.RunCompleted)
	cancelled := 0
	for _, ev := range events {
		if ev.Type == store.EventStepCancelRequested {
			cancelled++
		}
	}
	if cancelled == 0 {
		t.Errorf("no item was cancelled; history %v", events)
	}
	if n := len(svc.callsTo("/item")); n > 5 {
		t.Errorf("%d calls: the slow item went on after its step failed", n)
	}
}

// TestFlowSeesAFailureBehindAStuckItem: an item retried without end on a
// 503 does not hide the failure of a call issued after it: the flow fails
// at once with the 4xx, and a step whose needs completed starts meanwhile.
func TestFlowSeesAFailureBehindAStuckItem(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	svc.on("/item", func(c call, n int) (int, string) {
		if string(c.Input) == `"stuck"` {
			return 503, "busy"
		}
		return 200, `{"success": true}`
	})
	svc.on("/check", func(call, int) (int, string) { return 404, "no such order" })
	env, f := flowEnv(t, `
flow: stuck
steps:
  each:
    http: URL/item
    foreach: ["stuck", "ok"]
    work_config: {max_retries: -1, backoff: 60000, backoff_type: fixed}
  quick:
    http: URL/item
  check:
    needs: [quick]
    http: URL/check
`, svc)
	run, _, err := flow.Start(t.Context(), env.Engine, f, json.RawMessage(`null`))
	if err != nil {
		t.Fatal(err)
	}
	stuck := func() int {
		n := 0
		for _, c := range svc.callsTo("/item") {
			if string(c.Input) == `"stuck"` {
				n++
			}
		}
		return n
	}
	var got *store.Run
	env.AdvanceUntil(func() bool {
		got, err = env.Store.RunGet(t.Context(), run.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Status.Final() || stuck() >= 3
	})
	wantStatus(t, got, reprise.RunFailed)
	if got.Error.Type != "HTTP4xx" || !strings.Contains(got.Error.Message, "check") {
		t.Errorf("run error %+v, want check's HTTP4xx", got.Error)
	}
	if n := stuck(); n != 1 {
		t.Errorf("the stuck item was called %d times, want once: the flow failed before its retry", n)
	}
}

func TestFlowRestartCallsCompletedItemsOnce(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	svc.on("/item", func(c call, n int) (int, string) {
		if string(c.Input) == "2" && n < 3 {
			return 503, "not yet"
		}
		return 200, `{"success": true, "output": ` + string(c.Input) + `}`
	})
	env, f := flowEnv(t, `
flow: restart
steps:
  each:
    http: URL/item
    foreach: "{{ input }}"
    work_config: {max_retries: 5, backoff: 60000, backoff_type: fixed}
`, svc)
	run, _, err := flow.Start(t.Context(), env.Engine, f, json.RawMessage(`[0, 1, 2, 3]`))
	if err != nil {
		t.Fatal(err)
	}
	// Run until item 2 waits for its retry, then restart the engine.
	env.AdvanceUntil(func() bool { return len(svc.callsTo("/item")) >= 5 })
	defs, err := flow.Definitions(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.Restart(nil, defs...)
	got := env.Wait(run.ID)
	wantStatus(t, got, reprise.RunCompleted)
	wantOutput(t, got, `{"each": [0, 1, 2, 3]}`)
	count := map[string]int{}
	for _, c := range svc.callsTo("/item") {
		count[string(c.Input)]++
	}
	if want := map[string]int{"0": 1, "1": 1, "2": 3, "3": 1}; !reflect.DeepEqual(count, want) {
		t.Errorf("calls per item %v, want %v", count, want)
	}
	at := attempts(env.History(run.ID))["each[2]"]
	if !reflect.DeepEqual(at, []time.Duration{0, time.Minute, 2 * time.Minute}) {
		t.Errorf("item 2's attempts at %v, want at 0, 1m and 2m: the backoff survives the restart", at)
	}
}

func TestFlowInputSchemaAndExpressionErrors(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	env, f := flowEnv(t, `
flow: schema
input_schema: {type: object, required: [items]}
steps:
  each:
    http: URL/item
    foreach: "{{ input.items }}"
`, svc)
	if _, _, err := flow.Start(t.Context(), env.Engine, f, json.RawMessage(`{"things": []}`)); err == nil {
		t.Error("an input without items started a run")
	}
	run, _ := runFlow(t, env, f, `{"items": "not a list"}`)
	wantStatus(t, run, reprise.RunFailed)
	if run.Error.Type != flow.TypeExpression || !strings.Contains(run.Error.Message, "not a list") {
		t.Errorf("run error %+v, want an ExpressionError saying foreach is not a list", run.Error)
	}
	run, _ = runFlow(t, env, f, `{"items": []}`)
	wantStatus(t, run, reprise.RunCompleted)
	wantOutput(t, run, `{"each": []}`)
}

// failedTypes lists the error types of the failed attempts.
func failedTypes(events []store.Event) []string {
	var out []string
	for _, ev := range events {
		if ev.Type == store.EventAttemptFailed {
			out = append(out, ev.Error.Type)
		}
	}
	return append(out, "")
}
