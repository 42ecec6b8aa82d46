package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"reprise/flow"
	"reprise/sqlite"
	"reprise/store"
)

// priceFlow is a flow of an HTTP step at url and a pull step after it.
func priceFlow(url string) string {
	return `flow: price
input_schema:
  type: object
  required: [sku]
  properties:
    sku: {type: string}
steps:
  quote:
    http: ` + url + `
    input: {sku: "{{ input.sku }}"}
  pack:
    needs: [quote]
    pull: true
    input: "{{ steps.quote.output.price }}"
`
}

// quoteServer answers every attempt with a price.
func quoteServer(t *testing.T) string {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"success": true, "output": {"price": 42}}`)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// push sends a flow file with a content type and returns the status and
// the answer.
func (s *testServer) push(t *testing.T, contentType, src string) (int, []byte) {
	t.Helper()
	return s.callAs(t, "POST", "/v1/flows", contentType, src)
}

func TestFlowsPushAndRead(t *testing.T) {
	t.Parallel()
	for _, kind := range testStores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newTestServerOn(t, kind, Options{})
			ctx := t.Context()
			src := priceFlow("http://127.0.0.1:9/quote")

			f, created, err := s.c.PushFlow(ctx, []byte(src), "application/yaml")
			if err != nil || !created || f.Name != "price" || f.Version != 1 ||
				!reflect.DeepEqual(f.Steps, []string{"quote", "pack"}) || !reflect.DeepEqual(f.Goals, []string{"pack"}) || f.Flow != nil {
				t.Fatalf("push: %+v, created %v, %v", f, created, err)
			}
			// The same flow again, as YAML or as JSON: the same version.
			parsed, err := flow.Parse("price.yaml", []byte(src))
			if err != nil {
				t.Fatal(err)
			}
			for _, again := range []struct{ ct, src string }{
				{"application/yaml", src},
				{"application/json", string(parsed.Canonical())},
				{"application/json; charset=utf-8", string(parsed.Canonical())},
			} {
				f, created, err := s.c.PushFlow(ctx, []byte(again.src), again.ct)
				if err != nil || created || f.Version != 1 {
					t.Fatalf("push again as %s: %+v, created %v, %v", again.ct, f, created, err)
				}
			}
			// A change is version 2, and the latest.
			f, created, err = s.c.PushFlow(ctx, []byte(strings.Replace(src, "9/quote", "9/quote2", 1)), "text/yaml")
			if err != nil || !created || f.Version != 2 {
				t.Fatalf("push a change: %+v, created %v, %v", f, created, err)
			}

			list, err := s.c.ListFlows(ctx)
			if err != nil || len(list) != 1 || list[0].Name != "price" || list[0].Version != 2 || list[0].Flow != nil {
				t.Fatalf("list: %+v, %v", list, err)
			}
			latest, err := s.c.GetFlow(ctx, "price", 0)
			if err != nil || latest.Version != 2 || !strings.Contains(string(latest.Flow), `"http":"http://127.0.0.1:9/quote2"`) {
				t.Fatalf("get latest: %+v (%s), %v", latest, latest.Flow, err)
			}
			v1, err := s.c.GetFlow(ctx, "price", 1)
			if err != nil || v1.Version != 1 || string(v1.Flow) != string(parsed.Canonical()) {
				t.Fatalf("get version 1: %+v (%s), %v", v1, v1.Flow, err)
			}
			for _, bad := range []struct {
				path   string
				status int
			}{
				{"/v1/flows/price?version=3", 404},
				{"/v1/flows/refund", 404},
				{"/v1/flows/price?version=0", 400},
				{"/v1/flows/price?version=x", 400},
				{"/v1/flows/price?v=1", 400},
				{"/v1/flows/-price", 400},
			} {
				if status, body := s.call(t, "GET", bad.path, ""); status != bad.status {
					t.Errorf("GET %s: %d %s, want %d", bad.path, status, body, bad.status)
				}
			}
		})
	}
}

func TestFlowsPushRefusesBadFlows(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{MaxBodyBytes: 4 << 10, AllowStepHosts: []string{"shop.example"}})
	src := `flow: price
steps:
  quote:
    http: http://shop.example/quote
    neds: [pack]
  pack:
    pull: true
    input: "{{ steps.qoute.output }}"
`
	status, body := s.push(t, "application/yaml", src)
	var p Problem
	if err := json.Unmarshal(body, &p); err != nil || status != 400 || p.Type != ProblemInvalid || p.Field != "body" {
		t.Fatalf("a flow with faults: %d %s", status, body)
	}
	want := []FlowError{
		{Line: 5, Column: 5, Message: `step quote: unknown key "neds" (did you mean needs?): a step has ` +
			"http, pull, step, input, needs, foreach, policy, work_config, parallelism, optional"},
	}
	if len(p.Errors) != 2 || p.Errors[0] != want[0] || p.Errors[1].Line != 8 || !strings.Contains(p.Errors[1].Message, "qoute") {
		t.Fatalf("errors = %+v, want %+v and one at line 8 naming qoute", p.Errors, want)
	}

	// A host the server may not call, placed at its step.
	status, body = s.push(t, "application/yaml", "flow: price\nsteps:\n  quote:\n    http: http://127.0.0.1:9/quote\n")
	if err := json.Unmarshal(body, &p); err != nil || status != 400 || len(p.Errors) != 1 || p.Errors[0].Line != 3 ||
		!strings.Contains(p.Errors[0].Message, "127.0.0.1") {
		t.Fatalf("a step's host not allowed: %d %s", status, body)
	}

	for _, bad := range []struct {
		ct, body string
		status   int
	}{
		{"text/plain", "flow: x\nsteps: {a: {pull: true}}\n", 415},
		{"application/yamlx", "flow: x\nsteps: {a: {pull: true}}\n", 415},
		{"application/yaml; charset=utf-16", "flow: x\nsteps: {a: {pull: true}}\n", 415},
		{"application/yaml", "flow: x\nsteps: {a: {pull: true}}\n---\nflow: y\n", 400},
		{"application/yaml", "", 400},
		{"application/yaml", "[1, 2]", 400},
		{"application/yaml", "flow: x\nsteps: {a: {pull: true}}\n#" + strings.Repeat("x", 5<<10) + "\n", 413},
		{"application/json", `{"flow": "x", "steps": {"a": {"pull": true}}`, 400},
		{"application/json", `{"flow": "x", "flow": "y", "steps": {"a": {"pull": true}}}`, 400},
	} {
		if status, body := s.push(t, bad.ct, bad.body); status != bad.status {
			t.Errorf("push %s %.40q: %d %s, want %d", bad.ct, bad.body, status, body, bad.status)
		}
	}
	// Nothing was kept.
	if list, err := s.c.ListFlows(t.Context()); err != nil || len(list) != 0 {
		t.Fatalf("flows after bad pushes: %+v, %v", list, err)
	}
}

// TestFlowsRunByName starts runs by the flow's name: the input is checked
// against the input_schema before anything is created, the HTTP step
// runs, the pull step is claimed as any pull step is.
func TestFlowsRunByName(t *testing.T) {
	t.Parallel()
	for _, kind := range testStores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			s := newTestServerOn(t, kind, Options{})
			ctx := t.Context()
			if _, _, err := s.c.PushFlow(ctx, []byte(priceFlow(quoteServer(t)+"/quote")), "application/yaml"); err != nil {
				t.Fatal(err)
			}

			for _, bad := range []struct {
				body   string
				status int
			}{
				{`{"flow": "price", "input": {"sku": 7}}`, 400},
				{`{"flow": "price"}`, 400},
				{`{"flow": "refund", "input": {"sku": "x"}}`, 404},
				{`{"flow": "price", "step": "resize", "input": {"sku": "x"}}`, 400},
				{`{"flow": "price", "workflow": "order", "input": {"sku": "x"}}`, 400},
				{`{"workflow": "flow:price", "input": {"sku": "x"}}`, 400},
				{`{"flow": "", "input": {"sku": "x"}}`, 400},
				{`{"flow": "no such/flow"}`, 400},
			} {
				status, body := s.call(t, "POST", "/v1/runs", bad.body)
				if status != bad.status {
					t.Errorf("POST /v1/runs %s: %d %s, want %d", bad.body, status, body, bad.status)
				}
			}
			if runs, err := s.c.ListRuns(ctx, &store.RunListParams{}); err != nil || len(runs) != 0 {
				t.Fatalf("runs after refused starts: %+v, %v", runs, err)
			}

			run, created, err := s.c.StartFlow(ctx, "price", json.RawMessage(`{"sku": "espresso"}`), "price-1")
			if err != nil || !created || run.Workflow != "flow:price" {
				t.Fatalf("start: %+v, %v, %v", run, created, err)
			}
			packed := claimAndComplete(t, s, "price.pack", run.ID, `{"box": 1}`)
			if string(packed) != "42" {
				t.Errorf("the pull step's input = %s, want 42", packed)
			}
			done := s.waitRun(t, run.ID)
			if done.Status != store.RunCompleted || string(done.Output) != `{"pack":{"box":1}}` {
				t.Fatalf("run: %+v (%s)", done, done.Output)
			}

			// A run keeps the version it started with: one started before
			// version 2 is pushed packs as version 1 says, one after as 2.
			v1, _, err := s.c.StartFlow(ctx, "price", json.RawMessage(`{"sku": "tea"}`), "price-2")
			if err != nil {
				t.Fatal(err)
			}
			v2src := strings.Replace(priceFlow(quoteServer(t)+"/quote"), "steps.quote.output.price }}", "steps.quote.output.price * 2 }}", 1)
			if f, created, err := s.c.PushFlow(ctx, []byte(v2src), "application/yaml"); err != nil || !created || f.Version != 2 {
				t.Fatalf("push version 2: %+v, %v, %v", f, created, err)
			}
			v2, _, err := s.c.StartFlow(ctx, "price", json.RawMessage(`{"sku": "tea"}`), "price-3")
			if err != nil {
				t.Fatal(err)
			}
			inputs := map[string]string{}
			for len(inputs) < 2 {
				task := claimOne(t, s, "price.pack")
				inputs[task.RunID] = string(task.Input)
				if err := s.c.Complete(ctx, task.ID, task.Token, json.RawMessage(`1`)); err != nil {
					t.Fatal(err)
				}
			}
			if inputs[v1.ID] != "42" || inputs[v2.ID] != "84" {
				t.Fatalf("pack's inputs by run: %v; want 42 for %s (version 1), 84 for %s (version 2)", inputs, v1.ID, v2.ID)
			}
		})
	}
}

// claimAndComplete claims the task of step of run, completes it with
// output and returns its input.
func claimAndComplete(t *testing.T, s *testServer, step, runID, output string) json.RawMessage {
	t.Helper()
	task := claimOne(t, s, step)
	if task.RunID != runID {
		t.Fatalf("claimed a task of run %s, want %s", task.RunID, runID)
	}
	if err := s.c.Complete(t.Context(), task.ID, task.Token, json.RawMessage(output)); err != nil {
		t.Fatal(err)
	}
	return task.Input
}

// claimOne claims a task of step through s, waiting for one.
func claimOne(t *testing.T, s *testServer, step string) Task {
	t.Helper()
	for {
		tasks, err := s.c.Claim(t.Context(), ClaimParams{Steps: []string{step}, Max: 1, Wait: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(tasks) > 0 {
			return tasks[0]
		}
	}
}

// TestFlowsPushedElsewhere: servers on one database. A flow pushed to
// one is run by name, and its pull step claimed, through another that
// had not heard of it.
func TestFlowsPushedElsewhere(t *testing.T) {
	t.Parallel()
	for _, kind := range testStores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			a := newTestServerOn(t, kind, Options{})
			b := serveOn(t, a.st, true, 2*time.Second, Options{})
			ctx := t.Context()
			if _, _, err := a.c.PushFlow(ctx, []byte(priceFlow(quoteServer(t)+"/quote")), "application/yaml"); err != nil {
				t.Fatal(err)
			}
			run, _, err := b.c.StartFlow(ctx, "price", json.RawMessage(`{"sku": "espresso"}`), "")
			if err != nil {
				t.Fatalf("start on a server that did not know the flow: %v", err)
			}
			claimAndComplete(t, b, "price.pack", run.ID, `1`)
			if done := b.waitRun(t, run.ID); done.Status != store.RunCompleted {
				t.Fatalf("run: %+v", done)
			}
		})
	}
}

// TestFlowsLoadedAtStart: a server made after a flow was pushed runs the
// runs of it that no engine ran, with no request naming the flow.
func TestFlowsLoadedAtStart(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "reprise.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := t.Context()
	idle := serveOn(t, st, false, 2*time.Second, Options{}) // its engine does not run
	if _, _, err := idle.c.PushFlow(ctx, []byte(priceFlow(quoteServer(t)+"/quote")), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	run, _, err := idle.c.StartFlow(ctx, "price", json.RawMessage(`{"sku": "tea"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	later := serveOn(t, st, true, 2*time.Second, Options{})
	// The pull step is claimed through the idle server: only the later
	// server's engine, which loaded the flow when it was made, can have
	// run the workflow that scheduled it. The result goes to the server
	// that runs the run (SQLite tells no other engine of it).
	task := claimOne(t, idle, "price.pack")
	if task.RunID != run.ID {
		t.Fatalf("claimed a task of run %s, want %s", task.RunID, run.ID)
	}
	if err := later.c.Complete(ctx, task.ID, task.Token, json.RawMessage(`2`)); err != nil {
		t.Fatal(err)
	}
	if done := later.waitRun(t, run.ID); done.Status != store.RunCompleted || string(done.Output) != `{"pack":2}` {
		t.Fatalf("run: %+v", done)
	}
}

// TestSyncFlowsNamesAStoredFlowThatDoesNotParse: a stored flow that no
// longer parses is named; the others are registered.
func TestSyncFlowsNamesAStoredFlowThatDoesNotParse(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{})
	ctx := t.Context()
	if _, _, err := s.st.FlowPut(ctx, &store.FlowPutParams{Name: "broken", Flow: json.RawMessage(`{"flow":"broken"}`)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.c.PushFlow(ctx, []byte(priceFlow("http://127.0.0.1:9/")), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	set := flow.NewSet(s.e, nil)
	err := SyncFlows(ctx, s.st, set)
	if err == nil || !strings.Contains(err.Error(), "broken version 1") {
		t.Fatalf("SyncFlows = %v, want an error naming broken version 1", err)
	}
	var list flow.ErrorList
	if !errors.As(err, &list) {
		t.Errorf("SyncFlows's error %T holds no flow.ErrorList", err)
	}
	if f, v := set.Latest("price"); f == nil || v != 1 {
		t.Fatalf("price after SyncFlows: %v, %d", f, v)
	}
}

// TestFlowsStoredThatDoNotParse: stored versions that no longer parse
// (a rule got stricter, the row was changed) are listed and shown with
// their error, without the secrets it quotes; no run starts from them and
// no claim takes their steps, each refused with a 400 that says why; the
// other flows and versions are served as before.
func TestFlowsStoredThatDoNotParse(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{})
	ctx := t.Context()
	if _, _, err := s.c.PushFlow(ctx, []byte(priceFlow("http://127.0.0.1:9/")), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	// Version 1 of changed parses; its version 2, and broken's only one,
	// do not (as if written by a newer reprise, or changed in the
	// database), and name a password.
	for _, put := range []struct{ name, flow string }{
		{"changed", `{"flow":"changed","steps":{"pack":{"pull":true}}}`},
		{"changed", `{"flow":"changed","steps":{"pack":{"pull":true,"retries":3}}}`},
		{"broken", `{"flow":"broken","steps":{"a":{"http":"http://u:hunter2@[::1"},"b":{"pull":true,"needs":["c"]}}}`},
	} {
		if _, _, err := s.st.FlowPut(ctx, &store.FlowPutParams{Name: put.name, Flow: json.RawMessage(put.flow)}); err != nil {
			t.Fatal(err)
		}
	}
	before := s.snapshot(t)

	status, body := s.call(t, "GET", "/v1/flows", "")
	var list flowList
	if err := json.Unmarshal(body, &list); status != 200 || err != nil {
		t.Fatalf("GET /v1/flows: %d %s", status, body)
	}
	errs := map[string]string{}
	for _, f := range list.Flows {
		errs[fmt.Sprintf("%s %d %d %d", f.Name, f.Version, len(f.Steps), len(f.Goals))] = f.Error
	}
	want := map[string]string{
		"price 1 2 1":   "",
		"changed 2 0 0": `does not parse: step pack: unknown key "retries"`,
		"broken 1 0 0":  `does not parse: http: bad URL: parse "http://xxxxx@[::1": missing ']' in host (and 1 more)`,
	}
	if len(errs) != len(want) {
		t.Fatalf("listed %v, want %v", errs, want)
	}
	for k, msg := range want {
		if e, ok := errs[k]; !ok || !strings.HasPrefix(e, msg) {
			t.Errorf("flow %s listed with error %q, want %q", k, e, msg)
		}
	}
	for _, path := range []string{"/v1/flows/broken", "/v1/flows/broken?version=1", "/v1/flows/changed"} {
		status, body := s.call(t, "GET", path, "")
		var f Flow
		if err := json.Unmarshal(body, &f); status != 200 || err != nil || f.Error == "" || f.Flow != nil {
			t.Errorf("GET %s: %d %s", path, status, body)
		}
	}
	if f, err := s.c.GetFlow(ctx, "changed", 1); err != nil || f.Error != "" || f.Flow == nil {
		t.Errorf("version 1 of changed: %+v, %v", f, err)
	}
	if strings.Contains(string(body), "hunter2") {
		t.Errorf("the list shows a password: %s", body)
	}

	p := s.wantProblem(t, "POST", "/v1/runs", `{"flow":"broken"}`, 400, "flow")
	if !strings.Contains(p.Detail, `flow "broken" cannot run: its latest version, 1, does not parse`) || strings.Contains(p.Detail, "hunter2") {
		t.Errorf("start: %q", p.Detail)
	}
	p = s.wantProblem(t, "POST", "/v1/tasks/claim", `{"steps":["price.pack","broken.b"]}`, 400, "steps.1")
	if !strings.Contains(p.Detail, `step "broken.b" is of flow broken, whose version 1 does not parse`) {
		t.Errorf("claim: %q", p.Detail)
	}
	if after := s.snapshot(t); after != before {
		t.Errorf("the refusals changed the state:\n%s\n%s", before, after)
	}
	// A version that parses, pushed after, replaces the broken one.
	if _, _, err := s.c.PushFlow(ctx, []byte("flow: broken\nsteps:\n  b:\n    pull: true\n"), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.c.StartFlow(ctx, "broken", nil, ""); err != nil {
		t.Errorf("start after a push: %v", err)
	}
}

// TestFlowShownWithoutSecrets: the credentials of a flow's URLs are not
// shown by GET /v1/flows/{name}.
func TestFlowShownWithoutSecrets(t *testing.T) {
	t.Parallel()
	s := newTestServer(t, Options{})
	src := "flow: pay\nsteps:\n  charge:\n    http: https://shop:hunter2@127.0.0.1:9/charge?api_key=k3y&x=1\n"
	if _, _, err := s.c.PushFlow(t.Context(), []byte(src), "application/yaml"); err != nil {
		t.Fatal(err)
	}
	f, err := s.c.GetFlow(t.Context(), "pay", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"flow":"pay","steps":{"charge":{"http":"https://xxxxx@127.0.0.1:9/charge?api_key=xxxxx&x=1"}},"goals":["charge"]}`
	var got, wantV any
	if err := json.Unmarshal(f.Flow, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &wantV); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantV) || strings.Contains(string(f.Flow), "hunter2") || strings.Contains(string(f.Flow), "k3y") {
		t.Fatalf("flow shown as %s, want %s", f.Flow, want)
	}
}
