// Package httpapi serves the reprise JSON API over HTTP, and is
// its Go client.
package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"reprise"
	"reprise/flow"
	"reprise/httpstep"
	"reprise/internal/runfilter"
	"reprise/internal/runid"
	"reprise/store"
)

// Options configure the handler. The zero value works.
type Options struct {
	// Token, when set, is the bearer token every request but GET /healthz
	// and GET /v1/openapi.json must carry (Authorization: Bearer TOKEN). A request without it is
	// answered 401 from its headers alone: its body is never read, and its
	// connection is closed. Default: none, no auth.
	Token string
	// Tokens are more tokens accepted as Token is, for rotation: serve the
	// old and the new token together, move the clients to the new one,
	// then drop the old. Tokens are compared in constant time. A token is
	// printable ASCII without spaces. Default: none.
	Tokens []string
	// MaxBodyBytes limits a request body; a larger one gets 413.
	// Default: 1 MiB.
	MaxBodyBytes int64
	// MaxWait caps the wait of a long-poll (?wait= and a claim's wait).
	// Default: 60 s.
	MaxWait time.Duration
	// Logger receives the handler's logs (internal errors). Default: none.
	Logger *slog.Logger
	// Caller runs the HTTP steps registered through POST /v1/steps, and
	// checks their URLs when they are registered (Caller.CheckTarget).
	// Default: httpstep.New with AllowHosts set to AllowStepHosts.
	Caller *httpstep.Caller
	// AllowStepHosts limits the targets of HTTP steps, at registration
	// and at every connection, as httpstep.Options.AllowHosts says (CIDRs,
	// addresses, host names, *.domain patterns). It configures the
	// default Caller: with Caller set, give the list in its options
	// instead. Default: none; any target but a link-local, multicast or
	// unspecified address.
	AllowStepHosts []string
	// Metrics is the registry the API's counters (reprise_api_*) are
	// registered on; GET /metrics serves all it holds, so register the
	// engine's (package metrics) and the runtime's collectors on it too.
	// Default: a new registry with the API's counters only.
	Metrics *prometheus.Registry
	// Steps names steps registered in Go on the engine that may be started
	// as one-step runs ({"step": NAME}) and are listed by GET /v1/steps.
	// Default: none.
	Steps []string
	// Flows is the set the stored flows are registered in (flows.go), for
	// a caller that also runs SyncFlows on it; its HTTP steps should use
	// Caller (or AllowStepHosts). Default: a new set whose HTTP steps use
	// the handler's Caller.
	Flows *flow.Set
}

// api serves the endpoints; its fields after opts are its state.
type api struct {
	e       *reprise.Engine
	st      store.Store
	opts    Options
	tokens  [][sha256.Size]byte // the hashes of the accepted tokens
	log     *slog.Logger
	caller  *httpstep.Caller
	metrics metrics
	flows   *flow.Set

	mu    sync.Mutex
	steps map[string]*Step       // the Go steps and the stored ones as last read (steps.go)
	urls  map[stepVersion]string // the URLs of HTTP steps' versions read
}

// NewHandler returns the API of engine e, whose store is st (the
// Config.Store e was made with): /v1/..., /metrics and /healthz, as its
// contract, openapi.json, says. It lists runs, reads histories and keeps
// the steps registered through it in st.
// The engine must be running (Engine.Run) for runs to make progress. It
// reads the steps registered through the API from st (for up to 30 s)
// and registers them on e, so that their runs go on (steps.go).
func NewHandler(e *reprise.Engine, st store.Store, opts Options) (http.Handler, error) {
	if opts.MaxBodyBytes < 0 {
		return nil, errors.New("httpapi: MaxBodyBytes is negative")
	}
	tokens, err := hashTokens(opts.Token, opts.Tokens)
	if err != nil {
		return nil, err
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 60 * time.Second
	}
	a := &api{e: e, st: st, opts: opts, tokens: tokens, log: opts.Logger, caller: opts.Caller, steps: make(map[string]*Step),
		urls: make(map[stepVersion]string)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	reg := opts.Metrics
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if a.metrics, err = newMetrics(reg); err != nil {
		return nil, fmt.Errorf("httpapi: register metrics: %w", err)
	}
	if a.caller == nil {
		c, err := httpstep.New(httpstep.Options{AllowHosts: opts.AllowStepHosts})
		if err != nil {
			return nil, err
		}
		a.caller = c
	} else if len(opts.AllowStepHosts) > 0 {
		return nil, errors.New("httpapi: AllowStepHosts configures the default Caller; with Caller set, give AllowHosts in its httpstep.Options")
	}
	a.flows = opts.Flows
	if a.flows == nil {
		a.flows = flow.NewSet(e, &flow.Options{Caller: a.caller})
	}
	for _, name := range opts.Steps {
		if err := a.addGoStep(name); err != nil {
			return nil, err
		}
	}
	// The load is bounded by loadTimeout alone: NewHandler takes no ctx.
	loadCtx, cancel := context.WithTimeout(context.Background(), loadTimeout) //nolint:forbidigo // NewHandler has no ctx to derive from; it needs one (a change to internal/cli, its caller)
	err = a.loadSteps(loadCtx)
	if err == nil {
		// A stored flow that does not parse is no reason not to serve
		// the others.
		if err := SyncFlows(loadCtx, st, a.flows); err != nil {
			a.log.Warn("load flows", "err", err)
		}
	}
	cancel()
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	route := func(path string, methods map[string]http.HandlerFunc) http.Handler {
		h := a.methods(path, methods)
		mux.Handle(path, h)
		return h
	}
	route("/v1/runs", map[string]http.HandlerFunc{"GET": a.listRuns, "POST": a.startRun})
	// A run's routes, by what follows its id. A child run's id holds
	// slashes: escaped (order-1%2F2), it is the {id} of these routes;
	// as it is (order-1/2), childRoutes serves it.
	runRoutes := map[string]http.Handler{
		"":        route("/v1/runs/{id}", map[string]http.HandlerFunc{"GET": a.getRun}),
		"history": route("/v1/runs/{id}/history", map[string]http.HandlerFunc{"GET": a.history}),
		"cancel":  route("/v1/runs/{id}/cancel", map[string]http.HandlerFunc{"POST": a.cancelRun}),
		"redrive": route("/v1/runs/{id}/redrive", map[string]http.HandlerFunc{"POST": a.redriveRun}),
		"signals": route("/v1/runs/{id}/signals", map[string]http.HandlerFunc{"POST": a.signalRun}),
	}
	mux.Handle("/v1/runs/{path...}", childRoutes(runRoutes))
	route("/v1/steps", map[string]http.HandlerFunc{"GET": a.listSteps, "POST": a.registerStep})
	route("/v1/steps/{name}", map[string]http.HandlerFunc{"GET": a.getStep, "DELETE": a.deleteStep})
	route("/v1/flows", map[string]http.HandlerFunc{"GET": a.listFlows, "POST": a.pushFlow})
	route("/v1/flows/{name}", map[string]http.HandlerFunc{"GET": a.getFlow})
	route("/v1/tasks/claim", map[string]http.HandlerFunc{"POST": a.claim})
	route("/v1/tasks/{id}/complete", map[string]http.HandlerFunc{"POST": a.complete})
	route("/v1/tasks/{id}/fail", map[string]http.HandlerFunc{"POST": a.fail})
	route("/v1/tasks/{id}/heartbeat", map[string]http.HandlerFunc{"POST": a.heartbeat})
	route("/metrics", map[string]http.HandlerFunc{"GET": a.serveMetrics})
	route("/healthz", map[string]http.HandlerFunc{"GET": healthz})
	route("/v1/openapi.json", map[string]http.HandlerFunc{"GET": serveOpenAPI})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, notFound("no endpoint %s", r.URL.Path))
	})
	return a.authenticate(mux), nil
}

// methods dispatches a request for the path pattern on its method,
// answering 405 with Allow for any other, and 400 for a query parameter the
// endpoint does not take (queryParams).
func (a *api) methods(pattern string, m map[string]http.HandlerFunc) http.Handler {
	allow := make([]string, 0, len(m)+1)
	for method := range m {
		allow = append(allow, method)
	}
	if _, ok := m["GET"]; ok {
		allow = append(allow, "HEAD")
	}
	sort.Strings(allow)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		if method == "HEAD" {
			method = "GET"
		}
		h, ok := m[method]
		if !ok {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeProblem(w, &Problem{Type: ProblemMethod, Title: "Method Not Allowed", Status: http.StatusMethodNotAllowed,
				Detail: r.Method + " " + r.URL.Path + " is not served; allowed: " + strings.Join(allow, ", ")})
			return
		}
		if p := checkQuery(r.URL.RawQuery, queryParams[method+" "+pattern]); p != nil {
			writeProblem(w, p)
			return
		}
		h(w, r)
	})
}

// childRoutes serves the routes of a run whose id is a child run's,
// written with its slashes as they are (/v1/runs/order-1/2/history): the
// id is what comes before the last segment when that names one of the
// routes, else the whole path. Any other path is no endpoint.
func childRoutes(routes map[string]http.Handler) http.Handler {
	var actions []string
	for action := range routes {
		if action != "" {
			actions = append(actions, action)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, action := runid.Split(r.PathValue("path"), actions...)
		if runid.Check(id) != nil {
			writeProblem(w, notFound("no endpoint %s", r.URL.Path))
			return
		}
		r.SetPathValue("id", id)
		routes[action].ServeHTTP(w, r)
	})
}

// queryParams names the query parameters each endpoint takes, by method
// and path pattern. An endpoint not named takes none.
var queryParams = map[string][]string{
	"GET /v1/runs":              append(slices.Clone(runfilter.Params), "limit", "cursor"),
	"GET /v1/runs/{id}":         {"wait", "after"},
	"GET /v1/runs/{id}/history": {"wait", "after"},
	"GET /v1/steps/{name}":      {"version"},
	"GET /v1/flows/{name}":      {"version"},
	"DELETE /v1/steps/{name}":   {"force"},
}

// checkQuery refuses a query other than the allowed parameters, each given
// once, with values of valid UTF-8 without NUL.
func checkQuery(raw string, allowed []string) *Problem {
	if raw == "" {
		return nil
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return invalid("query", "the query string is malformed: %v", err)
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" || !cleanString(name) {
			return invalid("query", "a query parameter's name is empty, not valid UTF-8 or holds a NUL")
		}
		if !slices.Contains(allowed, name) {
			takes := "takes none"
			if len(allowed) > 0 {
				takes = "takes " + strings.Join(allowed, ", ")
			}
			return invalid(name, "unknown query parameter %q; this endpoint %s", name, takes)
		}
		if n := len(q[name]); n > 1 {
			return invalid(name, "query parameter %q is given %d times; give it once", name, n)
		}
		if !cleanString(q[name][0]) {
			return invalid(name, "query parameter %q is not valid UTF-8 or holds a NUL", name)
		}
	}
	return nil
}

// cleanString reports whether s is valid UTF-8 without NUL, as every
// string the API takes must be.
func cleanString(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// hashTokens checks the tokens and returns their hashes: a token is
// compared by its hash, so that the time a comparison takes tells nothing
// of the token's length.
func hashTokens(token string, more []string) ([][sha256.Size]byte, error) {
	all := more
	if token != "" {
		all = append([]string{token}, more...)
	}
	var hashes [][sha256.Size]byte
	var errs []error
	for i, t := range all {
		if t == "" || strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r > '~' }) {
			errs = append(errs, fmt.Errorf("httpapi: token %d is empty or holds a character other than printable ASCII", i+1))
			continue
		}
		hashes = append(hashes, sha256.Sum256([]byte(t)))
	}
	return hashes, errors.Join(errs...)
}

// public are the paths served without a token: the health check, and
// the contract, which is the repository's and tells nothing of the server.
var public = map[string]bool{"/healthz": true, "/v1/openapi.json": true}

// authenticate requires a token on every path but the public ones, from
// the request's headers alone.
func (a *api) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.metrics.requests.Inc()
		if len(a.tokens) == 0 || public[r.URL.Path] || a.authorized(r.Header.Get("Authorization")) {
			next.ServeHTTP(w, r)
			return
		}
		// The body of a request without the token is never read: the
		// connection closes after the answer, and the read deadline is
		// now, so that the server does not read the body to reuse it.
		w.Header().Set("Connection", "close")
		if r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="reprise"`)
		writeProblem(w, &Problem{Type: ProblemUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized,
			Detail: "send Authorization: Bearer TOKEN with one of the server's tokens"})
	})
}

// authorized reports whether the Authorization header is "Bearer TOKEN"
// (the scheme in any case, as HTTP has it) with one of the tokens,
// comparing with every token in constant time.
func (a *api) authorized(header string) bool {
	scheme, given, ok := strings.Cut(header, " ")
	ok = ok && strings.EqualFold(scheme, "Bearer")
	sum := sha256.Sum256([]byte(given))
	match := 0
	for _, t := range a.tokens {
		match |= subtle.ConstantTimeCompare(sum[:], t[:])
	}
	return ok && match == 1
}

func healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// internal answers 500 for an error the client cannot fix. The answer
// holds an error id and nothing of the error, which may name the
// database's user, host or files; the log line has both.
func (a *api) internal(w http.ResponseWriter, r *http.Request, err error) {
	id := newErrorID()
	a.log.Error("api request failed", "error_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	writeProblem(w, &Problem{Type: ProblemInternal, Title: "Internal Server Error", Status: http.StatusInternalServerError,
		Detail: "the server failed; its log has the error under error_id " + id, ErrorID: id})
}

// newErrorID returns a random id for an internal error.
func newErrorID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
