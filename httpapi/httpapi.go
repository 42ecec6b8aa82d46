// Package httpapi serves the reprise JSON API of SPEC §7 over HTTP, and is
// its Go client.
package httpapi

import (
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"reprise"
	"reprise/httpstep"
)

// Options configure the handler. The zero value works.
type Options struct {
	// Token, when set, is the bearer token every request but GET /healthz
	// must carry (Authorization: Bearer TOKEN). Default: none, no auth.
	Token string
	// MaxBodyBytes limits a request body; a larger one gets 413.
	// Default: 1 MiB.
	MaxBodyBytes int64
	// MaxWait caps the wait of a long-poll (?wait= and a claim's wait).
	// Default: 60 s.
	MaxWait time.Duration
	// Logger receives the handler's logs (internal errors). Default: none.
	Logger *slog.Logger
	// Caller runs the HTTP steps registered through POST /v1/steps.
	// Default: httpstep.New with its defaults.
	Caller *httpstep.Caller
	// Steps names steps registered in Go on the engine that may be started
	// as one-step runs ({"step": NAME}) and are listed by GET /v1/steps.
	// Default: none.
	Steps []string
}

// api serves the endpoints; its fields after opts are its state.
type api struct {
	e       *reprise.Engine
	opts    Options
	log     *slog.Logger
	caller  *httpstep.Caller
	metrics metrics

	mu    sync.Mutex
	steps map[string]*Step
}

// NewHandler returns the API of engine e: /v1/..., /metrics and /healthz.
// The engine must be running (Engine.Run) for runs to make progress.
func NewHandler(e *reprise.Engine, opts Options) (http.Handler, error) {
	if opts.MaxBodyBytes < 0 {
		return nil, errors.New("httpapi: MaxBodyBytes is negative")
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 60 * time.Second
	}
	a := &api{e: e, opts: opts, log: opts.Logger, caller: opts.Caller, steps: make(map[string]*Step)}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.caller == nil {
		c, err := httpstep.New(httpstep.Options{})
		if err != nil {
			return nil, err
		}
		a.caller = c
	}
	for _, name := range opts.Steps {
		if err := a.addStep(&Step{Name: name, Kind: KindGo}); err != nil {
			return nil, err
		}
	}

	mux := http.NewServeMux()
	route := func(path string, methods map[string]http.HandlerFunc) {
		mux.Handle(path, a.methods(methods))
	}
	route("/v1/runs", map[string]http.HandlerFunc{"GET": a.listRuns, "POST": a.startRun})
	route("/v1/runs/{id}", map[string]http.HandlerFunc{"GET": a.getRun})
	route("/v1/runs/{id}/history", map[string]http.HandlerFunc{"GET": a.history})
	route("/v1/runs/{id}/cancel", map[string]http.HandlerFunc{"POST": a.cancelRun})
	route("/v1/runs/{id}/redrive", map[string]http.HandlerFunc{"POST": a.redriveRun})
	route("/v1/runs/{id}/signals", map[string]http.HandlerFunc{"POST": a.signalRun})
	route("/v1/steps", map[string]http.HandlerFunc{"GET": a.listSteps, "POST": a.registerStep})
	route("/v1/tasks/claim", map[string]http.HandlerFunc{"POST": a.claim})
	route("/v1/tasks/{id}/complete", map[string]http.HandlerFunc{"POST": a.complete})
	route("/v1/tasks/{id}/fail", map[string]http.HandlerFunc{"POST": a.fail})
	route("/v1/tasks/{id}/heartbeat", map[string]http.HandlerFunc{"POST": a.heartbeat})
	route("/metrics", map[string]http.HandlerFunc{"GET": a.serveMetrics})
	route("/healthz", map[string]http.HandlerFunc{"GET": healthz})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, notFound("no endpoint %s", r.URL.Path))
	})
	return a.authenticate(mux), nil
}

// methods dispatches on the request's method, answering 405 with Allow for
// any other.
func (a *api) methods(m map[string]http.HandlerFunc) http.Handler {
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
		h(w, r)
	})
}

// authenticate requires the bearer token on every path but /healthz.
func (a *api) authenticate(next http.Handler) http.Handler {
	want := []byte("Bearer " + a.opts.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.metrics.requests.Add(1)
		if a.opts.Token != "" && r.URL.Path != "/healthz" &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="reprise"`)
			writeProblem(w, &Problem{Type: ProblemUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized,
				Detail: "send Authorization: Bearer TOKEN with the server's token"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// internal answers 500 for an error the client cannot fix, and logs it.
func (a *api) internal(w http.ResponseWriter, r *http.Request, err error) {
	a.log.Error("api request", "method", r.Method, "path", r.URL.Path, "err", err)
	writeProblem(w, &Problem{Type: ProblemInternal, Title: "Internal Server Error", Status: http.StatusInternalServerError,
		Detail: err.Error()})
}
