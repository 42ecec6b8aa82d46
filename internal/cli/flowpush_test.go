package cli

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise/store"
)

// buildShop builds the demo shop of examples/flows once per test binary.
var buildShop = sync.OnceValues(func() (string, error) { return goBuild("reprise/examples/flows", "shop") })

// startShop runs the demo shop process on a free loopback port and
// returns its base URL once it answers; it is killed when the test ends.
func startShop(t *testing.T) string {
	t.Helper()
	bin, err := buildShop()
	if err != nil {
		t.Fatalf("build the shop: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--addr", addr)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // the shop has no clean stop
		_ = cmd.Wait()
	})
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(base + "/")
		if err == nil {
			resp.Body.Close()
			return base
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shop does not answer at %s: %v\n%s", base, err, out.String())
		}
		<-tick.C
	}
}

// exampleFlow writes examples/flows/order.yaml into the test's directory
// with the shop's address in place of the demo's.
func exampleFlow(t *testing.T, shop string) string {
	t.Helper()
	src, err := os.ReadFile("../../examples/flows/order.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "order.yaml", strings.ReplaceAll(string(src), "http://127.0.0.1:7431", shop))
}

// TestFlowPushToServer pushes the example flow to a reprise server
// process, with the demo shop running, starts a run of it through the
// API, and reads its history grouped by step.
func TestFlowPushToServer(t *testing.T) {
	t.Parallel()
	shop := startShop(t)
	srv := spawnServer(t, filepath.Join(t.TempDir(), "reprise.db"))
	file := exampleFlow(t, shop)

	var stdout, stderr bytes.Buffer
	if code := Main([]string{"flow", "push", file, "--server", srv.url}, &stdout, &stderr); code != exitOK ||
		stdout.String() != "flow order version 1 (pushed)\n" {
		t.Fatalf("flow push: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := Main([]string{"flow", "push", file, "--server", srv.url}, &stdout, &stderr); code != exitOK ||
		stdout.String() != "flow order version 1 (unchanged: the latest version is the same flow)\n" {
		t.Fatalf("flow push again: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := Main([]string{"flow", "list", "--server", srv.url}, &stdout, &stderr); code != exitOK ||
		!strings.Contains(stdout.String(), "order") || !strings.Contains(stdout.String(), "quote,reserve,gift_wrap") {
		t.Fatalf("flow list: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}

	c := newClient(t, srv.url)
	if _, _, err := c.StartFlow(t.Context(), "order", json.RawMessage(`{"sku": 1}`), ""); err == nil ||
		!strings.Contains(err.Error(), "input_schema") {
		t.Fatalf("a run whose input does not match: %v", err)
	}
	run, created, err := c.StartFlow(t.Context(), "order",
		json.RawMessage(`{"sku": "espresso", "warehouses": ["north", "south", "east"]}`), "order-1")
	if err != nil || !created {
		t.Fatalf("start: %+v, %v, %v", run, created, err)
	}
	done := waitRunLong(t, c, run.ID)
	var out map[string]any
	if err := json.Unmarshal(done.Output, &out); err != nil || done.Status != store.RunCompleted ||
		out["notify"] != "sent" || len(out["reserve"].([]any)) != 3 {
		t.Fatalf("run: %s, output %s: %v", done.Status, done.Output, err)
	}

	// The history, its flow's steps with their work items.
	stdout.Reset()
	if code := Main([]string{"history", run.ID, "--server", srv.url}, &stdout, &stderr); code != exitOK {
		t.Fatalf("history: exit %d\n%s", code, stderr.String())
	}
	_, steps, ok := strings.Cut(stdout.String(), "\nflow order, ")
	want := `goals quote, reserve, notify
  quote         2 attempt(s) (goal)
  reserve       3 item(s), attempts per item: [0] 1, [1] 2, [2] 1 (goal)
  gift_wrap     FAILED after 1 attempt(s): HTTP4xx: post SHOP/gift-wrap: HTTP4xx: 422 Unprocessable Entity: gift wrapping is not offer… (optional)
  send_wrapped  skipped: a step it needs failed or was skipped
  loyalty       FAILED after 1 attempt(s): NotAMember: post SHOP/loyalty: NotAMember: the customer has no loyalty account (optional)
  notify        1 attempt(s) (goal)
`
	if steps = strings.ReplaceAll(steps, shop, "SHOP"); !ok || steps != want {
		t.Errorf("history's steps:\n%s\nwant:\n%s\nwhole:\n%s", steps, want, stdout.String())
	}
}

// TestFlowPushRefused: a flow file with faults is refused before it is
// sent, each fault placed in the file; one the server refuses (a host it
// may not call) is placed in the file too. Both exit 2.
func TestFlowPushRefused(t *testing.T) {
	t.Parallel()
	srv := spawnServer(t, filepath.Join(t.TempDir(), "reprise.db"), "--allow-step-hosts", "shop.example")
	bad := writeFile(t, "bad.yaml", "flow: order\nsteps:\n  quote:\n    http: http://shop.example/quote\n    neds: [x]\n")
	var stdout, stderr bytes.Buffer
	code := Main([]string{"flow", "push", bad, "--server", srv.url}, &stdout, &stderr)
	if code != exitUsage || !strings.HasPrefix(stderr.String(), bad+":5:5: step quote: unknown key \"neds\"") {
		t.Fatalf("push a flow with faults: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}

	stderr.Reset()
	file := exampleFlow(t, "http://127.0.0.1:9")
	code = Main([]string{"flow", "push", file, "--server", srv.url}, &stdout, &stderr)
	if code != exitUsage || !strings.HasPrefix(stderr.String(), file+":11:3: step quote: ") ||
		!strings.Contains(stderr.String(), "127.0.0.1") {
		t.Fatalf("push a flow the server refuses: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("refused pushes printed %q", stdout.String())
	}

	stderr.Reset()
	if code := Main([]string{"flow", "push", file}, &stdout, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "--server") {
		t.Fatalf("push without a server: exit %d\n%s", code, stderr.String())
	}
}

// TestServerTakesOverAFlowPushedElsewhere: two servers on one PostgreSQL
// database. A flow is pushed to the first, which starts a run of it and is
// killed during the run's step; the second, which no request told of the
// flow, finishes the run: it reads the stored flows every few seconds.
func TestServerTakesOverAFlowPushedElsewhere(t *testing.T) {
	t.Parallel()
	db := pgServerDB(t, "reprise_cli_flow_takeover")
	entered, release := make(chan struct{}), make(chan struct{})
	endpoint := newStepEndpoint(t, func(_ string, n int, w http.ResponseWriter) {
		if n == 1 {
			close(entered)
			<-release
			http.Error(w, "the caller is gone", http.StatusInternalServerError)
			return
		}
		answer(t, w, `{"success": true, "output": "held"}`)
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release) // a test that fails before it lets the call go
		}
	})
	a, b := spawnServer(t, db), spawnServer(t, db)
	file := writeFile(t, "hold.yaml", "flow: hold\nsteps:\n  call:\n    http: "+endpoint.URL+"/hold\n    policy: \"[retry: 3, backoff: 100ms]\"\n")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"flow", "push", file, "--server", a.url}, &stdout, &stderr); code != exitOK {
		t.Fatalf("flow push: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if _, _, err := newClient(t, a.url).StartFlow(t.Context(), "hold", nil, "held-1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the step's first attempt never reached the endpoint")
	}
	a.kill()
	close(release)
	run := waitRunLong(t, newClient(t, b.url), "held-1")
	if run.Status != store.RunCompleted || string(run.Output) != `{"call":"held"}` {
		t.Fatalf("run: %s %s\n%s", run.Status, run.Output, b.output())
	}
	if calls := endpoint.runs("/hold"); len(calls) != 2 {
		t.Fatalf("calls %v, want the killed attempt and its retry", calls)
	}
}
