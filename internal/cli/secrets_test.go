package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"reprise/httpapi"
	"reprise/store"
)

// The secrets of the URLs in the tests' flows and inputs: a password in
// the user information, and a token in the query.
const (
	secretUser     = "shop"
	secretPassword = "s3cretpw"
	secretToken    = "abc123tok"
)

// secretEndpoint is an HTTP step's endpoint that checks that each call
// carries the credentials of its URL (as Basic auth, and the token in
// the query). Its first call is answered 503, the next ones 200 with an
// output that holds a URL with the secrets.
type secretEndpoint struct {
	*httptest.Server
	mu    sync.Mutex
	calls int
}

func newSecretEndpoint(t *testing.T) *secretEndpoint {
	t.Helper()
	ep := &secretEndpoint{}
	ep.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, password, ok := r.BasicAuth()
		if !ok || user != secretUser || password != secretPassword || r.URL.Query().Get("token") != secretToken {
			t.Errorf("the endpoint got user %q, password %q, token %q; want the URL's credentials", user, password, r.URL.Query().Get("token"))
		}
		ep.mu.Lock()
		ep.calls++
		n := ep.calls
		ep.mu.Unlock()
		if n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		answer(t, w, `{"success": true, "output": {"charged": true, "receipt": "`+secretURL("https://receipts.example/r")+`"}}`)
	}))
	t.Cleanup(ep.Close)
	return ep
}

// url is the endpoint's URL at path, with the secrets.
func (ep *secretEndpoint) url(path string) string {
	return secretURL(ep.URL + path)
}

// called returns how many calls the endpoint got.
func (ep *secretEndpoint) called() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.calls
}

// secretURL is raw, an http(s) URL, with the user information and the
// token of the tests.
func secretURL(raw string) string {
	scheme, rest, _ := strings.Cut(raw, "://")
	return scheme + "://" + secretUser + ":" + secretPassword + "@" + rest + "?token=" + secretToken
}

// checkNoSecrets fails the test if what (a surface's name) shows a secret,
// or, when it shows payloads, shows no xxxxx where the secrets were.
func checkNoSecrets(t *testing.T, what, shown string, payloads bool) {
	t.Helper()
	for _, s := range []string{secretPassword, secretToken} {
		if strings.Contains(shown, s) {
			t.Errorf("%s shows the secret %q:\n%s", what, s, shown)
		}
	}
	if payloads && !strings.Contains(shown, "xxxxx") {
		t.Errorf("%s shows no xxxxx where the secrets were:\n%s", what, shown)
	}
}

// payFlow is a flow whose HTTP step calls ep with the secrets in its URL,
// and whose pull step gets a URL with the secrets in its input.
func payFlow(ep *secretEndpoint) string {
	return fmt.Sprintf(`flow: pay
steps:
  charge:
    http: %s
    input: {order: "{{ input.order }}"}
    policy: "[retry: 3, backoff: 10ms]"
  notify:
    needs: [charge]
    pull: true
    input: {callback: "{{ input.callback }}"}
`, ep.url("/charge"))
}

// TestServerShowsNoSecrets runs a flow whose HTTP step's URL holds
// credentials through the real server (the endpoint gets them, and a pull
// worker gets its input as it is), then reads the run every way there is
// to read it: the API (the start's answer, the run, its long-poll, the
// list, the history and its long-poll, a problem), the web page (the list,
// the run, its live stream, an action's page), the run commands (on the
// server and on the database), and the server's log. None shows a
// secret; each shows xxxxx where the secrets were.
func TestServerShowsNoSecrets(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := kindDB(t, kind, "reprise_cli_secrets")
			ep := newSecretEndpoint(t)
			// A stored flow that does not parse, as another server might
			// have kept it: the server logs its error, which quotes its URL,
			// when it starts.
			storeBrokenFlow(t, db, ep)
			p := spawnServer(t, db)
			c := newClient(t, p.url)
			ctx := t.Context()
			if _, _, err := c.PushFlow(ctx, []byte(payFlow(ep)), "application/yaml"); err != nil {
				t.Fatal(err)
			}
			input := `{"order": "A-1", "callback": "` + secretURL("https://hooks.example/cb") + `"}`
			status, started := rawCall(t, p.url, http.MethodPost, "/v1/runs", `{"flow": "pay", "id": "pay-1", "input": `+input+`}`)
			if status != http.StatusCreated {
				t.Fatalf("start: %d %s", status, started)
			}
			checkNoSecrets(t, "the start's answer", started, true)

			// The pull worker gets the step's input as it is.
			tasks, err := c.Claim(ctx, httpapi.ClaimParams{Steps: []string{"pay.notify"}, Wait: 20 * time.Second})
			if err != nil || len(tasks) != 1 {
				t.Fatalf("claim: %v, %v", tasks, err)
			}
			if want := `"` + secretURL("https://hooks.example/cb") + `"`; !strings.Contains(string(tasks[0].Input), want) {
				t.Fatalf("the claimed input %s does not hold %s as it is", tasks[0].Input, want)
			}
			if err := c.Complete(ctx, tasks[0].ID, tasks[0].Token, json.RawMessage(`{"sent_to": "`+secretURL("https://hooks.example/cb")+`"}`)); err != nil {
				t.Fatal(err)
			}
			if run := waitRun(t, c, "pay-1"); run.Status != store.RunCompleted {
				t.Fatalf("run pay-1 %s: %+v", run.Status, run.Error)
			}
			if n := ep.called(); n != 2 {
				t.Errorf("the endpoint got %d calls, want 2: a 503, then the one that succeeded", n)
			}

			// A run of the flow that does not parse: refused, saying why,
			// which quotes its URL.
			status, problem := rawCall(t, p.url, http.MethodPost, "/v1/runs", `{"flow": "broken"}`)
			var prob httpapi.Problem
			if err := json.Unmarshal([]byte(problem), &prob); err != nil || status != http.StatusBadRequest || prob.Field != "flow" {
				t.Fatalf("start of a broken flow: %d %s", status, problem)
			}

			surfaces := map[string]string{"POST /v1/runs {\"flow\": \"broken\"}": problem}
			for _, path := range []string{"/v1/runs/pay-1", "/v1/runs/pay-1?wait=5s&after=1", "/v1/runs", "/v1/runs?status=completed",
				"/v1/runs/pay-1/history", "/v1/runs/pay-1/history?wait=5s&after=2", "/v1/flows/pay", "/v1/flows", "/v1/flows/broken",
				"/", "/runs/pay-1"} {
				status, body := rawCall(t, p.url, http.MethodGet, path, "")
				if status != http.StatusOK {
					t.Errorf("GET %s: %d %s", path, status, body)
				}
				surfaces["GET "+path] = body
			}
			// The live stream names events by their numbers only.
			status, live := rawCall(t, p.url, http.MethodGet, "/runs/pay-1/live", "")
			if status != http.StatusOK || !strings.Contains(live, "event: end") {
				t.Errorf("GET /runs/pay-1/live: %d %s", status, live)
			}
			checkNoSecrets(t, "GET /runs/pay-1/live", live, false)
			for _, where := range [][]string{{"--server", p.url}, {"--db", db}} {
				for _, args := range [][]string{{"runs", "--json"}, {"show", "pay-1"}, {"show", "pay-1", "--json"},
					{"history", "pay-1"}, {"history", "pay-1", "--json"}} {
					args = append(args, where...)
					stdout, stderr, code := runMain(args...)
					if code != exitOK {
						t.Errorf("reprise %s: exit %d: %s", strings.Join(args, " "), code, stderr)
					}
					surfaces["reprise "+strings.Join(args, " ")] = stdout + stderr
				}
			}
			for what, shown := range surfaces {
				checkNoSecrets(t, what, shown, what != "GET /") // the list of runs shows no payload
			}
			wantShown := "xxxxx@" + strings.TrimPrefix(ep.URL, "http://") + "/charge?token=xxxxx"
			for _, what := range []string{"GET /v1/runs/pay-1", "GET /v1/runs", "GET /v1/runs/pay-1/history", "GET /runs/pay-1",
				"reprise show pay-1 --server " + p.url} {
				if !strings.Contains(surfaces[what], wantShown) {
					t.Errorf("%s does not show the step's URL as %s:\n%s", what, wantShown, surfaces[what])
				}
			}

			p.stop()
			log := p.output()
			if !strings.Contains(log, "stored flow broken version 1 does not parse") {
				t.Errorf("the log has no line of the flow that does not parse:\n%s", log)
			}
			checkNoSecrets(t, "the server's log", log, true) // that line quotes the URL
		})
	}
}

// storeBrokenFlow stores in db, as another server might have, a flow
// whose URL, with the secrets, does not parse.
func storeBrokenFlow(t *testing.T, db string, ep *secretEndpoint) {
	t.Helper()
	st, err := openStore(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	broken := fmt.Sprintf(`{"flow":"broken","steps":{"call":{"http":%q}},"goals":["call"]}`, ep.url("/%zz"))
	if _, _, err := st.FlowPut(t.Context(), &store.FlowPutParams{Name: "broken", Flow: json.RawMessage(broken)}); err != nil {
		t.Fatal(err)
	}
}

// rawCall sends a request to the server at base and returns the status
// and the body as it came.
func rawCall(t *testing.T, base, method, path, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestFlowRunShowsNoSecrets: reprise flow run calls the endpoint with the
// credentials of its URL and prints the run, as a timeline and as JSON,
// without them; so does reprise history on its database.
func TestFlowRunShowsNoSecrets(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := kindDB(t, kind, "reprise_cli_flowrun_secrets")
			ep := newSecretEndpoint(t)
			file := filepath.Join(t.TempDir(), "pay.yaml")
			src := strings.Replace(payFlow(ep), "  notify:\n    needs: [charge]\n    pull: true\n    input: {callback: \"{{ input.callback }}\"}\n", "", 1)
			if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			for i, asJSON := range []bool{false, true} {
				id := fmt.Sprintf("pay-%d", i)
				args := []string{"flow", "run", file, "--db", db, "--id", id, "--input", `{"order": "A-1"}`}
				if asJSON {
					args = append(args, "--json")
				}
				stdout, stderr, code := runMain(args...)
				if code != exitOK {
					t.Fatalf("reprise %s: exit %d: %s%s", strings.Join(args, " "), code, stdout, stderr)
				}
				checkNoSecrets(t, "reprise "+strings.Join(args, " "), stdout+stderr, true)
				hist, stderr, code := runMain("history", id, "--db", db)
				if code != exitOK {
					t.Fatalf("reprise history %s: exit %d: %s", id, code, stderr)
				}
				checkNoSecrets(t, "reprise history "+id, hist+stderr, true)
			}
			if n := ep.called(); n != 3 {
				t.Errorf("the endpoint got %d calls, want 3: a 503, then 200s", n)
			}
		})
	}
}
