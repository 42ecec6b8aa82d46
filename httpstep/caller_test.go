package httpstep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"reprise/retry"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// now is the clock of every test Caller, for Retry-After dates.
var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newCaller(t testing.TB, opts Options) *Caller {
	t.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return now }
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// serve starts a loopback server that the test closes when it ends.
func serve(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// hang returns a handler that blocks until its request is abandoned or the
// test ends, after writing head (when not empty) as the start of a 200
// response and closing arrived.
func hang(t testing.TB, arrived chan<- struct{}, head string) http.HandlerFunc {
	done := t.Context().Done() // closed before the server's Close runs
	return func(w http.ResponseWriter, r *http.Request) {
		if head != "" {
			w.Header().Set("Content-Length", "1000")
			if _, err := io.WriteString(w, head); err != nil {
				t.Errorf("write the head of the answer: %v", err)
			}
			w.(http.Flusher).Flush()
		}
		close(arrived)
		select {
		case <-r.Context().Done():
		case <-done:
		}
	}
}

func request(attempt int) *Request {
	return &Request{
		RunID:          "run-1",
		Step:           "charge",
		Attempt:        attempt,
		IdempotencyKey: "key-7f3a",
		Input:          json.RawMessage(`{"amount":42,"currency":"EUR"}`),
	}
}

// want describes an expected outcome: an output, or an error as the engine
// sees it (type chain, permanence, retry-after hint) and words its message
// must hold.
type want struct {
	output     string
	typ        string
	retryable  bool
	retryAfter time.Duration
	message    []string
}

func (w want) check(t *testing.T, out json.RawMessage, err error) {
	t.Helper()
	if w.typ == "" {
		if err != nil {
			t.Fatalf("error %v, want output %s", err, w.output)
		}
		if string(out) != w.output {
			t.Fatalf("output %s, want %s", out, w.output)
		}
		return
	}
	if err == nil {
		t.Fatalf("output %s, want error %s", out, w.typ)
	}
	var re *retry.Error
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) holds no *retry.Error", err, err)
	}
	if chain := retry.TypeChain(err); len(chain) != 1 || chain[0] != w.typ {
		t.Errorf("type chain %v, want [%s]", chain, w.typ)
	}
	if got := !retry.IsPermanent(err); got != w.retryable {
		t.Errorf("retryable %v, want %v (%v)", got, w.retryable, err)
	}
	if got := retry.RetryAfterOf(err); got != w.retryAfter {
		t.Errorf("retry after %v, want %v", got, w.retryAfter)
	}
	for _, m := range w.message {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("message %q lacks %q", err.Error(), m)
		}
	}
}

// respond returns a handler answering status with headers (name, value
// pairs) and body.
func respond(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		// A failed write is a caller that stopped reading, which the test
		// of that caller sees from its side.
		_, _ = io.WriteString(w, body)
	}
}

// TestCallClassifies pins every row of docs/http-steps.md's table.
func TestCallClassifies(t *testing.T) {
	t.Parallel()
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    want
	}{
		// 2xx otherwise: success.
		{"success output", respond(200, `{"success": true, "output": {"charge": "ch_1"}}`),
			want{output: `{"charge": "ch_1"}`}},
		{"success without output", respond(200, `{"success": true}`), want{output: `null`}},
		{"success true with error ignored", respond(200, `{"success": true, "output": 1, "error": {"type": "X"}}`),
			want{output: `1`}},
		{"object without success", respond(200, ` {"charge": "ch_1", "output": 2} `+"\n"),
			want{output: `{"charge": "ch_1", "output": 2}`}},
		{"array", respond(200, `[1, 2]`), want{output: `[1, 2]`}},
		{"string", respond(200, `"done"`), want{output: `"done"`}},
		{"number", respond(200, `42`), want{output: `42`}},
		{"empty body", respond(200, ``), want{output: `null`}},
		{"204", respond(204, ``), want{output: `null`}},
		{"201 whitespace", respond(201, " \r\n\t"), want{output: `null`}},
		{"Success is not success", respond(200, `{"Success": false}`), want{output: `{"Success": false}`}},

		// 2xx with "success": false.
		{"failure typed", respond(200, `{"success": false, "error": {"type": "CardDeclined", "message": "insufficient funds"}}`),
			want{typ: "CardDeclined", message: []string{"CardDeclined: insufficient funds"}}},
		{"failure retryable", respond(200, `{"success": false, "error": {"type": "Busy", "retryable": true, "retry_after_ms": 1500}}`),
			want{typ: "Busy", retryable: true, retryAfter: 1500 * time.Millisecond}},
		{"failure retryable false", respond(200, `{"success": false, "error": {"type": "Busy", "retryable": false, "retry_after_ms": 1500}}`),
			want{typ: "Busy", retryAfter: 1500 * time.Millisecond}},
		{"failure untyped", respond(200, `{"success": false, "error": {"message": "nope", "retryable": true}}`),
			want{typ: TypeStepFailed, retryable: true, message: []string{"nope"}}},
		{"failure without error", respond(200, `{"success": false}`),
			want{typ: TypeStepFailed, message: []string{"success: false"}}},
		{"failure null error", respond(200, `{"success": false, "error": null}`), want{typ: TypeStepFailed}},
		{"failure string error", respond(200, `{"success": false, "error": "boom"}`),
			want{typ: TypeStepFailed, message: []string{"boom"}}},
		{"failure negative retry after", respond(200, `{"success": false, "error": {"type": "A", "retryable": true, "retry_after_ms": -5}}`),
			want{typ: "A", retryable: true}},
		{"failure absurd retry after", respond(200, `{"success": false, "error": {"type": "A", "retryable": true, "retry_after_ms": 9223372036854775807}}`),
			want{typ: "A", retryable: true, retryAfter: MaxRetryAfter}},
		{"failure on 202", respond(202, `{"success": false, "error": {"type": "A"}}`), want{typ: "A"}},

		// 2xx that breaks the contract.
		{"not JSON", respond(200, `<html>oops</html>`),
			want{typ: TypeInvalidResponse, message: []string{"not JSON", "<html>oops</html>"}}},
		{"truncated JSON", respond(200, `{"success": true, "output": `), want{typ: TypeInvalidResponse}},
		{"trailing garbage", respond(200, `{"a": 1} x`), want{typ: TypeInvalidResponse}},
		{"success not a bool", respond(200, `{"success": "yes"}`),
			want{typ: TypeInvalidResponse, message: []string{`"yes"`}}},
		{"success null", respond(200, `{"success": null}`), want{typ: TypeInvalidResponse}},
		{"error a number", respond(200, `{"success": false, "error": 42}`), want{typ: TypeInvalidResponse}},
		{"error field mistyped", respond(200, `{"success": false, "error": {"type": "A", "retryable": "yes"}}`),
			want{typ: TypeInvalidResponse}},

		// 5xx: retryable, Retry-After honoured.
		{"500", respond(500, "database\n  is down"),
			want{typ: TypeHTTP5xx, retryable: true, message: []string{"500 Internal Server Error", "database is down"}}},
		{"503 seconds", respond(503, "", "Retry-After", "7"),
			want{typ: TypeHTTP5xx, retryable: true, retryAfter: 7 * time.Second, message: []string{"Retry-After: 7"}}},
		{"503 date", respond(503, "", "Retry-After", date(90*time.Second)),
			want{typ: TypeHTTP5xx, retryable: true, retryAfter: 90 * time.Second}},
		{"503 past date", respond(503, "", "Retry-After", date(-time.Hour)), want{typ: TypeHTTP5xx, retryable: true}},
		{"503 negative", respond(503, "", "Retry-After", "-3"), want{typ: TypeHTTP5xx, retryable: true}},
		{"503 garbage", respond(503, "", "Retry-After", "soon"), want{typ: TypeHTTP5xx, retryable: true}},
		{"503 long garbage", respond(503, "", "Retry-After", strings.Repeat("x", 1000)),
			want{typ: TypeHTTP5xx, retryable: true, message: []string{"(Retry-After: " + strings.Repeat("x", headerBytes) + "…)"}}},
		{"503 fraction", respond(503, "", "Retry-After", "1.5"), want{typ: TypeHTTP5xx, retryable: true}},
		{"503 absurd", respond(503, "", "Retry-After", "99999999999"),
			want{typ: TypeHTTP5xx, retryable: true, retryAfter: MaxRetryAfter}},
		{"503 overflow", respond(503, "", "Retry-After", "99999999999999999999999"),
			want{typ: TypeHTTP5xx, retryable: true, retryAfter: MaxRetryAfter}},
		{"503 far date", respond(503, "", "Retry-After", date(48*time.Hour)),
			want{typ: TypeHTTP5xx, retryable: true, retryAfter: MaxRetryAfter}},
		{"599", respond(599, ""), want{typ: TypeHTTP5xx, retryable: true}},
		{"502 with failure body", respond(502, `{"success": false, "error": {"type": "A"}}`),
			want{typ: TypeHTTP5xx, retryable: true, message: []string{`"type": "A"`}}},

		// 429: retryable, Retry-After honoured.
		{"429", respond(429, "slow down"),
			want{typ: TypeRateLimited, retryable: true, message: []string{"429 Too Many Requests", "slow down"}}},
		{"429 seconds", respond(429, "", "Retry-After", " 2 "),
			want{typ: TypeRateLimited, retryable: true, retryAfter: 2 * time.Second}},
		{"429 date", respond(429, "", "Retry-After", date(30*time.Second)),
			want{typ: TypeRateLimited, retryable: true, retryAfter: 30 * time.Second}},
		{"429 RFC 850 date", respond(429, "", "Retry-After", now.Add(time.Minute).Format(time.RFC850)),
			want{typ: TypeRateLimited, retryable: true, retryAfter: time.Minute}},

		// Other 4xx: permanent.
		{"400", respond(400, `{"error": "amount must be positive"}`),
			want{typ: TypeHTTP4xx, message: []string{"400 Bad Request", "amount must be positive"}}},
		{"404", respond(404, ""), want{typ: TypeHTTP4xx, message: []string{"404 Not Found"}}},
		{"408", respond(408, ""), want{typ: TypeHTTP4xx}},
		{"409 Retry-After ignored", respond(409, "", "Retry-After", "5"), want{typ: TypeHTTP4xx}},
		{"4xx with success body", respond(422, `{"success": true, "output": 1}`), want{typ: TypeHTTP4xx}},

		// 3xx not followed, and other final statuses: permanent.
		{"302", respond(302, "", "Location", "/elsewhere"),
			want{typ: TypeHTTP3xx, message: []string{"302 Found", "/elsewhere"}}},
		{"303", respond(303, "", "Location", "/elsewhere"), want{typ: TypeHTTP3xx}},
		{"304", respond(304, ""), want{typ: TypeHTTP3xx}},
		{"307 without Location", respond(307, ""), want{typ: TypeHTTP3xx}},
		{"600", respond(600, ""), want{typ: TypeInvalidResponse, message: []string{"600"}}},
	}
	c := newCaller(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := serve(t, tt.handler)
			out, err := c.Call(t.Context(), srv.URL, request(1))
			tt.want.check(t, out, err)
		})
	}
}

// TestCallFinal101 answers a final 101 on a connection of its own.
func TestCallFinal101(t *testing.T) {
	t.Parallel()
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		if _, err := buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: nothing\r\n\r\n"); err != nil {
			t.Error(err)
			return
		}
		if err := buf.Flush(); err != nil {
			t.Error(err)
		}
	})
	out, err := newCaller(t, Options{}).Call(t.Context(), srv.URL, request(1))
	want{typ: TypeInvalidResponse, message: []string{"101"}}.check(t, out, err)
}

// TestCallSendsRequest pins the wire: the JSON body (golden file), the
// method and the headers, with Idempotency-Key the same on every attempt.
func TestCallSendsRequest(t *testing.T) {
	t.Parallel()
	type received struct {
		method string
		header http.Header
		body   []byte
	}
	got := make(chan received, 3)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{r.Method, r.Header, body}
	})
	c := newCaller(t, Options{
		UserAgent: "test-agent/2",
		Header:    http.Header{"authorization": {"Bearer s3cret"}, "X-Tenant": {"a", "b"}},
	})

	for attempt := 1; attempt <= 3; attempt++ {
		if _, err := c.Call(t.Context(), srv.URL+"/charge?x=1", request(attempt)); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if r.method != http.MethodPost {
			t.Errorf("method %s, want POST", r.method)
		}
		for name, want := range map[string]string{
			"Content-Type":    "application/json",
			"Accept":          "application/json",
			"User-Agent":      "test-agent/2",
			"Idempotency-Key": "key-7f3a",
			"Reprise-Attempt": strconv.Itoa(attempt),
			"Authorization":   "Bearer s3cret",
		} {
			if v := r.header.Values(name); len(v) != 1 || v[0] != want {
				t.Errorf("attempt %d: %s %q, want %q", attempt, name, v, want)
			}
		}
		if v := r.header.Values("X-Tenant"); strings.Join(v, ",") != "a,b" {
			t.Errorf("X-Tenant %q, want [a b]", v)
		}
		if attempt == 1 {
			golden(t, "request.json", r.body)
		}
		var body map[string]any
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		if body["attempt"] != float64(attempt) || body["idempotency_key"] != "key-7f3a" {
			t.Errorf("attempt %d: body %s", attempt, r.body)
		}
	}
}

func TestCallSendsNullInput(t *testing.T) {
	t.Parallel()
	body := make(chan []byte, 1)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body <- b
	})
	req := request(1)
	req.Input = nil
	if _, err := newCaller(t, Options{}).Call(t.Context(), srv.URL, req); err != nil {
		t.Fatal(err)
	}
	if b := <-body; !bytes.HasSuffix(b, []byte(`"input":null}`)) {
		t.Errorf("body %s, want input null", b)
	}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, bytes.TrimSuffix(want, []byte("\n"))) {
		t.Errorf("%s differs:\ngot  %s\nwant %s", path, got, want)
	}
}

func TestCallRedirects(t *testing.T) {
	t.Parallel()
	type hop struct {
		method, key, body string
	}
	tests := []struct {
		name         string
		status       int
		hops         int // redirects before the endpoint answers
		maxRedirects int
		want         want
	}{
		{"307 followed", 307, 1, 0, want{output: `"ok"`}},
		{"308 followed", 308, 2, 0, want{output: `"ok"`}},
		{"limit reached", 307, 10, 0, want{output: `"ok"`}},
		{"limit passed", 307, 11, 0, want{typ: TypeHTTP3xx, message: []string{"307 Temporary Redirect", "/hop/11"}}},
		{"custom limit", 308, 3, 2, want{typ: TypeHTTP3xx}},
		{"none followed", 307, 1, -1, want{typ: TypeHTTP3xx}},
		{"301 not followed", 301, 1, 0, want{typ: TypeHTTP3xx, message: []string{"301 Moved Permanently"}}},
		{"302 not followed", 302, 1, 0, want{typ: TypeHTTP3xx}},
		{"303 not followed", 303, 1, 0, want{typ: TypeHTTP3xx}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu   sync.Mutex
				seen []hop
			)
			srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				seen = append(seen, hop{r.Method, r.Header.Get("Idempotency-Key"), string(body)})
				n := len(seen)
				mu.Unlock()
				if n <= tt.hops {
					w.Header().Set("Location", fmt.Sprintf("/hop/%d", n))
					w.WriteHeader(tt.status)
					return
				}
				if _, err := io.WriteString(w, `"ok"`); err != nil {
					t.Error(err)
				}
			})
			c := newCaller(t, Options{MaxRedirects: tt.maxRedirects})
			out, err := c.Call(t.Context(), srv.URL, request(1))
			tt.want.check(t, out, err)
			mu.Lock()
			defer mu.Unlock()
			for i, h := range seen {
				if h != seen[0] || h.method != http.MethodPost || h.key != "key-7f3a" || h.body == "" {
					t.Errorf("request %d: %+v, want the first again: %+v", i, h, seen[0])
				}
			}
		})
	}
}

func TestCallResponseLimit(t *testing.T) {
	t.Parallel()
	const limit = 64
	// jsonOf returns a JSON string of n bytes.
	jsonOf := func(n int) string { return `"` + strings.Repeat("a", n-2) + `"` }
	chunked := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			for _, part := range []string{body[:10], body[10:]} {
				if _, err := io.WriteString(w, part); err != nil {
					return // the caller stopped reading at its limit
				}
				w.(http.Flusher).Flush()
			}
		}
	}
	tests := []struct {
		name    string
		max     int64
		handler http.HandlerFunc
		want    want
	}{
		{"at the limit", limit, respond(200, jsonOf(limit)), want{output: jsonOf(limit)}},
		{"over, with Content-Length", limit, respond(200, jsonOf(limit+1)),
			want{typ: TypeResponseTooLarge, message: []string{"exceeds the limit of 64 bytes"}}},
		{"at the limit, chunked", limit, chunked(jsonOf(limit)), want{output: jsonOf(limit)}},
		{"over, chunked", limit, chunked(jsonOf(limit + 1)), want{typ: TypeResponseTooLarge}},
		{"default limit", 0, respond(200, jsonOf(DefaultMaxResponseBytes)), want{output: jsonOf(DefaultMaxResponseBytes)}},
		{"over the default limit", 0, chunked(jsonOf(DefaultMaxResponseBytes + 1)), want{typ: TypeResponseTooLarge}},
		{"5xx body is cut", limit, respond(500, strings.Repeat("é", 1000)),
			want{typ: TypeHTTP5xx, retryable: true, message: []string{strings.Repeat("é", snippetBytes/2) + "…"}}},
		{"invalid 2xx body is cut", 0, respond(200, strings.Repeat("x", 10000)),
			want{typ: TypeInvalidResponse, message: []string{strings.Repeat("x", snippetBytes) + "…"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := serve(t, tt.handler)
			out, err := newCaller(t, Options{MaxResponseBytes: tt.max}).Call(t.Context(), srv.URL, request(1))
			tt.want.check(t, out, err)
			if err != nil && len(err.Error()) > 2*snippetBytes+200 {
				t.Errorf("message is %d bytes long", len(err.Error()))
			}
		})
	}
}

func TestCallFailureMessageIsCut(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("m", 3*maxMessageBytes)
	srv := serve(t, respond(200, `{"success": false, "error": {"type": "A", "message": "`+long+`"}}`))
	_, err := newCaller(t, Options{}).Call(t.Context(), srv.URL, request(1))
	var re *retry.Error
	if !errors.As(err, &re) || re.Message != long[:maxMessageBytes]+"…" {
		t.Fatalf("error %.100v…, want a message cut at %d bytes", err, maxMessageBytes)
	}
}

// TestCallInterrupted runs attempts against an endpoint that hangs, before
// or while sending its body, until the context ends: by its deadline or a
// cancel whose cause is a timeout (a Timeout attempt error), or by a cancel
// for another reason (an error wrapping the cause, and no attempt error).
func TestCallInterrupted(t *testing.T) {
	t.Parallel()
	errAttemptTimeout := errors.New("attempt timeout")
	errShutdown := errors.New("engine shutting down")
	type contextFunc func(context.Context, <-chan struct{}) (context.Context, context.CancelFunc)
	deadline := func(ctx context.Context, _ <-chan struct{}) (context.Context, context.CancelFunc) {
		return context.WithTimeout(ctx, 50*time.Millisecond)
	}
	cancelWith := func(cause error) contextFunc {
		return func(ctx context.Context, arrived <-chan struct{}) (context.Context, context.CancelFunc) {
			return cancelOnArrival(ctx, arrived, cause)
		}
	}
	tests := []struct {
		name    string
		head    string // start of a 200 body written before hanging
		context contextFunc
		cause   error  // not a timeout: the error must wrap it
		message string // a timeout: its message holds this
	}{
		{"deadline", "", deadline, nil, "context deadline exceeded"},
		{"deadline while reading the body", `{"success": tr`, deadline, nil, "context deadline exceeded"},
		{"deadline with a cause", "", func(ctx context.Context, _ <-chan struct{}) (context.Context, context.CancelFunc) {
			return context.WithTimeoutCause(ctx, 50*time.Millisecond, errAttemptTimeout)
		}, nil, "attempt timeout"},
		{"cancelled with a Timeout error", "", cancelWith(retry.NewError("Timeout", "lease expired")), nil, "lease expired"},
		{"cancelled with DeadlineExceeded", "", cancelWith(fmt.Errorf("watchdog: %w", context.DeadlineExceeded)), nil, "watchdog"},
		{"shutdown", "", cancelWith(errShutdown), errShutdown, ""},
		{"shutdown while reading the body", `{"a"`, cancelWith(errShutdown), errShutdown, ""},
		{"plain cancel", "", cancelWith(context.Canceled), context.Canceled, ""},
	}
	c := newCaller(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			arrived := make(chan struct{})
			srv := serve(t, hang(t, arrived, tt.head))
			ctx, cancel := tt.context(t.Context(), arrived)
			defer cancel()
			out, err := c.Call(ctx, srv.URL, request(1))
			if tt.cause == nil {
				want{typ: TypeTimeout, retryable: true, message: []string{tt.message}}.check(t, out, err)
				return
			}
			var re *retry.Error
			if !errors.Is(err, tt.cause) || errors.As(err, &re) {
				t.Fatalf("error %v (%T), want one wrapping %v and no *retry.Error", err, err, tt.cause)
			}
			if !strings.HasPrefix(err.Error(), "post "+srv.URL) {
				t.Errorf("error %q does not name the URL", err)
			}
		})
	}
}

// cancelOnArrival returns a context cancelled with cause once the endpoint
// has the request.
func cancelOnArrival(ctx context.Context, arrived <-chan struct{}, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-arrived:
			cancel(cause)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

func TestCallTransportErrors(t *testing.T) {
	t.Parallel()
	refused := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		return "http://" + ln.Addr().String()
	}
	// hijacked returns the URL of a server that writes raw to the
	// connection, then drops it (resetting it when reset is true).
	hijacked := func(raw string, reset bool) func(*testing.T) string {
		return func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer conn.Close()
				if _, err := io.WriteString(conn, raw); err != nil {
					t.Error(err)
					return
				}
				if reset {
					if err := conn.(*net.TCPConn).SetLinger(0); err != nil {
						t.Error(err)
					}
				}
			}).URL
		}
	}
	tests := []struct {
		name      string
		url       func(*testing.T) string
		transport http.RoundTripper
		message   string
	}{
		{"connection refused", refused, nil, "refused"},
		{"connection reset", hijacked("", true), nil, ""},
		{"closed before a response", hijacked("", false), nil, "EOF"},
		{"closed mid-body", hijacked("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"a\"", false), nil, "EOF"},
		{"malformed response", hijacked("HTTP/9 what\r\n\r\n", false), nil, "malformed"},
		{"DNS failure", func(*testing.T) string { return "http://no-such-host.invalid/step" },
			&http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{
					Err: "no such host", Name: "no-such-host.invalid", IsNotFound: true}}
			}}, "no such host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u := tt.url(t)
			out, err := newCaller(t, Options{Transport: tt.transport}).Call(t.Context(), u, request(1))
			want{typ: TypeTransport, retryable: true, message: []string{"post " + u + ": TransportError: ", tt.message}}.check(t, out, err)
			if strings.Count(err.Error(), u) != 1 {
				t.Errorf("error %q repeats the URL", err)
			}
		})
	}
}

func TestCallInvalidRequest(t *testing.T) {
	t.Parallel()
	srv := serve(t, respond(200, `"ok"`))
	badInput := request(1)
	badInput.Input = json.RawMessage(`{"a":`)
	noKey, badKey := request(1), request(1)
	noKey.IdempotencyKey = ""
	badKey.IdempotencyKey = "k\r\nX-Injected: 1"
	tests := []struct {
		name    string
		url     string
		req     *Request
		message string
	}{
		{"no request", srv.URL, nil, "no request"},
		{"input not JSON", srv.URL, badInput, "encode request"},
		{"no idempotency key", srv.URL, noKey, "idempotency key \"\" is empty"},
		{"idempotency key with a line break", srv.URL, badKey, "holds a control character"},
		{"unparsable URL", "http://a b.example/", request(1), "invalid character"},
		{"relative URL", "/step", request(1), "scheme must be http or https"},
		{"other scheme", "ftp://example.com/step", request(1), "scheme must be http or https"},
		{"no host", "http:///step", request(1), "no host"},
	}
	c := newCaller(t, Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := c.Call(t.Context(), tt.url, tt.req)
			want{typ: TypeInvalidRequest, message: []string{tt.message}}.check(t, out, err)
		})
	}
}

// TestCallHidesSecrets: errors name the URL without its user information
// (a password, or a token given as the user), query or fragment, and
// quote neither a URL that does not parse nor a redirect's Location with
// their secrets.
func TestCallHidesSecrets(t *testing.T) {
	t.Parallel()
	failing := serve(t, respond(500, ""))
	redirect := serve(t, respond(302, "", "Location", "https://u:hunter4@elsewhere.example/x?token=hunter5"))
	withUser := func(srv *httptest.Server, userinfo string) string {
		return strings.Replace(srv.URL, "http://", "http://"+userinfo+"@", 1)
	}
	for _, tt := range []struct{ url, typ, want string }{
		{withUser(failing, "user:hunter2") + "/step?api_key=hunter3#frag", TypeHTTP5xx, "post http://xxxxx@127.0.0.1:"},
		{withUser(failing, "ghp_hunter1") + "/step", TypeHTTP5xx, "/step"},
		{withUser(redirect, "user:hunter2") + "/step", TypeHTTP3xx, "to https://xxxxx@elsewhere.example/x?token=xxxxx"},
		{"http://user:hunter6@example.com/%zz?token=hunter7", TypeInvalidRequest, "http://xxxxx@example.com/%zz?token=xxxxx"},
		{"ftp://user:hunter8@example.com/x", TypeInvalidRequest, "ftp://xxxxx@example.com/x"},
	} {
		_, err := newCaller(t, Options{}).Call(t.Context(), tt.url, request(1))
		var rerr *retry.Error
		if err == nil || !errors.As(err, &rerr) || rerr.Type != tt.typ || strings.Contains(err.Error(), "hunter") ||
			!strings.Contains(err.Error(), tt.want) {
			t.Errorf("Call(%s): error %v, want a %s naming %q without the secrets", tt.url, err, tt.typ, tt.want)
		}
	}
	for _, raw := range []string{"http://user:hunter6@example.com/%zz?token=hunter7", "ftp://user:hunter8@example.com/x"} {
		if err := CheckURL(raw); err == nil || strings.Contains(err.Error(), "hunter") || !strings.Contains(err.Error(), "xxxxx@") {
			t.Errorf("CheckURL(%s) = %v, want an error naming the URL without its secrets", raw, err)
		}
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{
		"http://localhost:8080/step":    true,
		"https://api.example.com/a?b=c": true,
		"HTTPS://example.com":           true,
		"ftp://example.com":             false,
		"example.com/step":              false,
		"http://":                       false,
		"":                              false,
		"http://a b/":                   false,
		"http://10.0.0.1:8080/step":     true,
		"http://[::1]:8080/step":        true,
		"http://metadata.test/":         true, // not resolved
		"http://169.254.169.254/":       false,
		"http://[fe80::1%25eth0]/":      false,
		"http://[::ffff:a9fe:a9fe]/":    false,
		"http://0.0.0.0:8080/":          false,
		"http://[::]:8080/":             false,
		"http://239.1.2.3/":             false,
	} {
		if err := CheckURL(raw); (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v, want ok %v", raw, err, ok)
		}
	}
}

func TestNewRejectsOptions(t *testing.T) {
	t.Parallel()
	_, err := New(Options{
		MaxResponseBytes: -1,
		AllowHosts:       []string{"10.0.0.0/8", "10.0.0.0/33"},
		Header: http.Header{
			"Idempotency-Key": {"x"},
			"content-type":    {"text/plain"},
			"Bad Name":        {"x"},
			"X-Split":         {"a\r\nInjected: 1"},
		},
	})
	if err == nil {
		t.Fatal("New accepted bad options")
	}
	for _, m := range []string{"max response bytes -1 is negative", "Idempotency-Key is set by the caller",
		"Content-Type is set by the caller", `"Bad Name" is not a valid token`, "X-Split: value holds a control character",
		`allowed host "10.0.0.0/33" is not a CIDR`} {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q lacks %q", err, m)
		}
	}
}

func TestNewKeepsAccept(t *testing.T) {
	t.Parallel()
	accept := make(chan string, 1)
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) { accept <- r.Header.Get("Accept") })
	c := newCaller(t, Options{Header: http.Header{"Accept": {"application/vnd.step+json"}}})
	if _, err := c.Call(t.Context(), srv.URL, request(1)); err != nil {
		t.Fatal(err)
	}
	if got := <-accept; got != "application/vnd.step+json" {
		t.Errorf("Accept %q", got)
	}
}

// TestCallConcurrent shares one Caller across goroutines (run with -race).
func TestCallConcurrent(t *testing.T) {
	t.Parallel()
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		var req Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("decode the request: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `{"success": true, "output": %d}`, req.Attempt)
	})
	c := newCaller(t, Options{})
	const workers, calls = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				n := w*calls + i
				out, err := c.Call(t.Context(), srv.URL, request(n))
				if err != nil || string(out) != strconv.Itoa(n) {
					t.Errorf("call %d: %s, %v", n, out, err)
				}
			}
		})
	}
	wg.Wait()
}

// TestCallReusesConnections: calls one after another share one connection,
// whatever the outcome, since every body is read to its end.
func TestCallReusesConnections(t *testing.T) {
	t.Parallel()
	var conns sync.Map
	handlers := []http.HandlerFunc{
		respond(200, `{"success": true, "output": 1}`),
		respond(503, strings.Repeat("busy ", 1000), "Retry-After", "1"),
		respond(400, "bad"),
		respond(200, `{"success": false}`),
	}
	var calls atomic.Int64
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		conns.Store(r.RemoteAddr, true)
		handlers[(calls.Add(1)-1)%int64(len(handlers))](w, r)
	})
	c := newCaller(t, Options{})
	for i := range 20 {
		// Each call is one request: the first handler's is the only success.
		if _, err := c.Call(t.Context(), srv.URL, request(i+1)); (err == nil) != (i%len(handlers) == 0) {
			t.Errorf("call %d: error %v, want one from all but the first handler", i+1, err)
		}
	}
	n := 0
	conns.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d connections for 20 calls in a row, want 1", n)
	}
}
