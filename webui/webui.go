// Package webui serves reprise's web page: the runs, and each run's
// attempts on a timeline, with the actions of the API (cancel, redrive,
// signal) behind the API's tokens.
//
// The page is HTML rendered on the server (html/template, embedded), with a
// little plain JavaScript for countdowns and live updates; it works
// without the JavaScript too. It reads and acts through two narrow
// interfaces, Engine and Store, which a *reprise.Engine and a store.Store
// satisfy. `reprise server` serves it at / beside the API (docs/webui.md).
package webui

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"reprise"
	"reprise/store"
)

// Engine is what the page needs of an engine (a *reprise.Engine): it reads
// runs, their histories and what they wait for, and cancels, redrives and
// signals them.
type Engine interface {
	GetRun(ctx context.Context, id string) (*reprise.Run, error)
	History(ctx context.Context, id string) ([]reprise.Event, error)
	RunWaiting(ctx context.Context, id string) (*reprise.Waiting, error)
	CancelRun(ctx context.Context, id, reason string) error
	RedriveRun(ctx context.Context, runID, by string) error
	SignalRun(ctx context.Context, runID, name string, payload any) error
}

// Store is what the page reads of the engine's store (a store.Store): the
// list of runs, and a run's events after a sequence number, which a live
// page polls for.
type Store interface {
	RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error)
	HistoryList(ctx context.Context, p *store.HistoryListParams) ([]store.Event, error)
}

// Config configures the page. Engine and Store are required; the zero
// value of every other field works.
type Config struct {
	// Engine reads and acts on runs. Required.
	Engine Engine
	// Store lists runs and follows a run's history. Required.
	Store Store
	// Tokens are the API's bearer tokens. With any, the page asks for one
	// in a login form and keeps a session in a cookie; without, it has no
	// login, as the API has none. Default: none.
	Tokens []string
	// SessionTTL is how long a login lasts. Default: 12 h.
	SessionTTL time.Duration
	// PollInterval is how often a live run page's stream reads the run's
	// history for new events. Default: 500 ms.
	PollInterval time.Duration
	// StreamFor is how long one live stream lasts before the browser
	// opens the next (it must end within the server's write timeout).
	// Default: 45 s.
	StreamFor time.Duration
	// Logger receives the page's internal errors, under the error_id the
	// page shows. Default: none.
	Logger *slog.Logger
	// Now is the page's clock, for countdowns and sessions.
	// Default: time.Now.
	Now func() time.Time
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Handler serves the page. It is an http.Handler for /, to mount beside
// the API's /v1/.
type Handler struct {
	cfg    Config
	auth   *auth
	log    *slog.Logger
	pages  map[string]*template.Template
	mux    *http.ServeMux
	origin *http.CrossOriginProtection
}

// New checks cfg and returns the page's handler.
func New(cfg Config) (*Handler, error) {
	var errs []error
	if cfg.Engine == nil {
		errs = append(errs, errors.New("webui: Config.Engine is required"))
	}
	if cfg.Store == nil {
		errs = append(errs, errors.New("webui: Config.Store is required"))
	}
	if cfg.SessionTTL < 0 || cfg.PollInterval < 0 || cfg.StreamFor < 0 {
		errs = append(errs, errors.New("webui: SessionTTL, PollInterval and StreamFor must not be negative"))
	}
	for i, t := range cfg.Tokens {
		if t == "" || strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r > '~' }) {
			errs = append(errs, fmt.Errorf("webui: token %d is empty or holds a character other than printable ASCII", i+1))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 500 * time.Millisecond
	}
	if cfg.StreamFor == 0 {
		cfg.StreamFor = 45 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Engine, cfg.Store = shownEngine{cfg.Engine}, shownStore{cfg.Store}
	h := &Handler{cfg: cfg, log: cfg.Logger, origin: http.NewCrossOriginProtection()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.auth = newAuth(cfg.Tokens, cfg.SessionTTL, cfg.Now)
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h.pages = pages
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.listRuns)
	mux.HandleFunc("GET /runs/{path...}", h.runGet)
	mux.HandleFunc("POST /runs/{path...}", h.runPost)
	mux.HandleFunc("GET /login", h.loginForm)
	mux.HandleFunc("POST /login", h.login)
	mux.HandleFunc("POST /logout", h.logout)
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.Handle("GET /static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
	})
	h.mux = mux
}

// ServeHTTP serves the page, with the headers every answer carries.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// A page is what every template receives: the page's own data in Data.
type page struct {
	Title string
	// Auth is true when the server has tokens (and so a login).
	Auth bool
	// CSRF is the token every form posts back (auth.go).
	CSRF string
	Data any
}

// render writes the named page with status.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	t, ok := h.pages[name]
	if !ok {
		panic("webui: no page " + name)
	}
	p := page{Title: title, Auth: !h.auth.open, CSRF: h.auth.csrfToken(w, r), Data: data}
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, "layout", p); err != nil {
		h.internal(w, r, fmt.Errorf("render %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte(b.String()))
	}
}

// failure is the data of the error page.
type failure struct {
	Status  int
	Heading string
	Message string
	ErrorID string
}

// fail answers an error page.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, heading, message string) {
	h.render(w, r, status, "error", heading, failure{Status: status, Heading: heading, Message: message})
}

// internal answers 500 for an error the user cannot fix. The page shows
// an error id and nothing of the error, which may name the database's
// user, host or files; the log line has both.
func (h *Handler) internal(w http.ResponseWriter, r *http.Request, err error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	h.log.Error("web page request failed", "error_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	t := h.pages["error"]
	var out strings.Builder
	data := page{Title: "Server error", Auth: !h.auth.open, Data: failure{Status: 500, Heading: "Server error",
		Message: "The server failed; its log has the error under this id.", ErrorID: id}}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusInternalServerError)
	if t == nil || t.ExecuteTemplate(&out, "layout", data) != nil {
		fmt.Fprintf(w, "server error %s\n", id)
		return
	}
	_, _ = w.Write([]byte(out.String()))
}
