package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"reprise"
	"reprise/flow"
	"reprise/httpapi"
	"reprise/httpstep"
	"reprise/internal/redact"
	"reprise/metrics"
	"reprise/postgres"
	"reprise/store"
	"reprise/webui"
)

// longPollMax caps the wait of a long-poll (?wait=, a claim's wait): the
// server's write timeout must leave time to answer after it.
const longPollMax = 60 * time.Second

// minTokenLen is the length a token must have at least.
const minTokenLen = 16

// serverConfig is what serverMain reads from its flags and environment.
type serverConfig struct {
	db                string
	addr              string
	tokens            []string
	leaseTTL          time.Duration
	shutdownGrace     time.Duration
	maxBody           int64
	writers           int
	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	idleTimeout       time.Duration
	maxConns          int
	maxResident       int
	maxPending        int
	allowStepHosts    []string
	workerID          string
}

// serverMain serves the HTTP API on an engine that runs the demo's
// workflows and every step registered through the API, until SIGINT or
// SIGTERM.
func serverMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("server", "[--db DB] [--addr HOST:PORT] [--token T]... [--lease-ttl D] [--shutdown-grace D] [--writers N]\n"+
		"       [--max-body BYTES] [--max-conns N] [--read-header-timeout D] [--read-timeout D] [--write-timeout D] [--idle-timeout D]\n"+
		"       [--worker-id ID] [--allow-step-hosts HOSTS]... [--max-resident-runs N] [--max-pending-runs N]")
	var c serverConfig
	var tokens tokenList
	dbVar(fs, &c.db, defaultDB, dbUsage)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:7420", "address to listen on; a non-loopback one needs a token")
	fs.Var(&tokens, "token", fmt.Sprintf("a bearer `TOKEN` every API call must carry, %d characters or more; repeat it, or separate tokens with commas, to accept several (rotation) (default $REPRISE_TOKENS, comma-separated, and $REPRISE_TOKEN)", minTokenLen))
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 30*time.Second, "how long an attempt's lease lasts between heartbeats")
	fs.DurationVar(&c.shutdownGrace, "shutdown-grace", 10*time.Second, "on SIGTERM or SIGINT, how long running attempts and requests may finish before they are cut off and the server exits")
	fs.Int64Var(&c.maxBody, "max-body", 1<<20, "largest request body accepted, in bytes (413 beyond)")
	fs.IntVar(&c.writers, "writers", 0, "PostgreSQL: transactions recording transitions at once (default 2; 1 when several engine processes share a small server)")
	fs.IntVar(&c.maxConns, "max-conns", 512, "connections served at once; more wait to be accepted")
	fs.DurationVar(&c.readHeaderTimeout, "read-header-timeout", 10*time.Second, "time a client has to send a request's headers")
	fs.DurationVar(&c.readTimeout, "read-timeout", 30*time.Second, "time a client has to send a whole request, headers and body")
	fs.DurationVar(&c.writeTimeout, "write-timeout", 90*time.Second, fmt.Sprintf("time from a request's headers to the end of its answer; more than a long-poll's longest wait (%v)", longPollMax))
	fs.DurationVar(&c.idleTimeout, "idle-timeout", 60*time.Second, "how long a kept-alive connection may wait for its next request")
	fs.IntVar(&c.maxResident, "max-resident-runs", 0, "runs whose workflow code the engine keeps in memory; past it, waiting runs are evicted and replayed from their histories when their waits end (0: 10 times the step slots, at least 2000; -1: no cap)")
	fs.IntVar(&c.maxPending, "max-pending-runs", 0, "runs started through the server that wait to start (their first steps queued for a worker); past it, POST /v1/runs answers 429 (0: 10 times the step slots; -1: no cap, the queue is in the database)")
	fs.Var((*hostList)(&c.allowStepHosts), "allow-step-hosts", "the only `HOSTS` HTTP steps may call: CIDRs, addresses, host names and *.domain patterns, comma-separated; repeat it to add more (default: any but link-local, multicast and unspecified addresses)")
	fs.StringVar(&c.workerID, "worker-id", os.Getenv("REPRISE_WORKER_ID"), "the engine's `ID` in leases and history, one live engine per id; restarted under the id of one that crashed, it takes that one's work back at once (default $REPRISE_WORKER_ID, else host-pid-random)")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageErrorf(fs, stderr, "unexpected argument %q", pos[0])
	}
	c.tokens = tokens
	if len(c.tokens) == 0 {
		c.tokens = envTokens()
	}
	if err := c.check(); err != nil {
		return usageErrorf(fs, stderr, "%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, stderr, &c); err != nil {
		fmt.Fprintf(stderr, "reprise server: %s\n", redact.String(err.Error()))
		return exitFail
	}
	return exitOK
}

// tokenList is the --token flag: each value holds one token or several,
// separated by commas. A blank one is kept, for check to refuse.
type tokenList []string

func (l *tokenList) String() string { return fmt.Sprintf("%d tokens", len(*l)) }

func (l *tokenList) Set(v string) error {
	*l = append(*l, strings.Split(v, ",")...)
	return nil
}

// hostList is the --allow-step-hosts flag: each value holds one entry or
// several, separated by commas.
type hostList []string

func (l *hostList) String() string { return strings.Join(*l, ",") }

func (l *hostList) Set(v string) error {
	*l = append(*l, strings.Split(v, ",")...)
	return nil
}

// envTokens reads the tokens of $REPRISE_TOKENS (comma-separated) and
// $REPRISE_TOKEN.
func envTokens() []string {
	var tokens tokenList
	if s := os.Getenv("REPRISE_TOKENS"); s != "" {
		_ = tokens.Set(s) // it never fails
	}
	if t := os.Getenv("REPRISE_TOKEN"); t != "" {
		tokens = append(tokens, t)
	}
	return tokens
}

// check validates the configuration, reporting every fault at once.
func (c *serverConfig) check() error {
	var errs []error
	for i, t := range c.tokens {
		switch {
		case strings.TrimSpace(t) == "":
			errs = append(errs, fmt.Errorf("token %d is blank", i+1))
		case strings.ContainsFunc(t, func(r rune) bool { return r <= ' ' || r > '~' }):
			errs = append(errs, fmt.Errorf("token %d holds a space or a character other than printable ASCII", i+1))
		case len(t) < minTokenLen:
			errs = append(errs, fmt.Errorf("token %d has %d characters; a token needs %d or more (openssl rand -hex 32 makes one)", i+1, len(t), minTokenLen))
		}
	}
	positive := func(name string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %v must be positive", name, d))
		}
	}
	positive("--lease-ttl", c.leaseTTL)
	positive("--shutdown-grace", c.shutdownGrace)
	positive("--read-header-timeout", c.readHeaderTimeout)
	positive("--read-timeout", c.readTimeout)
	positive("--idle-timeout", c.idleTimeout)
	if least := longPollMax + 10*time.Second; c.writeTimeout < least {
		errs = append(errs, fmt.Errorf("--write-timeout %v is too short: a long-poll waits up to %v before it answers; give %v or more", c.writeTimeout, longPollMax, least))
	}
	if c.maxPending < -1 {
		errs = append(errs, fmt.Errorf("--max-pending-runs %d must be -1 (no cap), 0 (the default) or positive", c.maxPending))
	}
	if c.maxResident < -1 {
		errs = append(errs, fmt.Errorf("--max-resident-runs %d must be -1 (no cap), 0 (the default) or positive", c.maxResident))
	}
	if c.maxBody <= 0 {
		errs = append(errs, fmt.Errorf("--max-body %d must be positive", c.maxBody))
	}
	if _, err := httpstep.New(httpstep.Options{AllowHosts: c.allowStepHosts}); err != nil {
		errs = append(errs, fmt.Errorf("--allow-step-hosts: %w", err))
	}
	if c.maxConns <= 0 {
		errs = append(errs, fmt.Errorf("--max-conns %d must be positive", c.maxConns))
	}
	if c.writers < 0 {
		errs = append(errs, fmt.Errorf("--writers %d must not be negative", c.writers))
	}
	if c.writers > 0 && !isPostgresURL(c.db) {
		errs = append(errs, fmt.Errorf("--writers applies to a postgres:// --db, not %q", redact.String(c.db)))
	}
	if err := checkExposure(c.addr, c.tokens); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkExposure refuses to serve an address other machines can reach
// without a token.
func checkExposure(addr string, tokens []string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", addr, err)
	}
	if len(tokens) > 0 || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--addr %q is reachable from other machines; give --token (or set REPRISE_TOKENS) to require one, or listen on 127.0.0.1", addr)
}

func serve(ctx context.Context, stderr io.Writer, c *serverConfig) error {
	st, err := openEngineStore(ctx, c.db, postgres.Options{Writers: c.writers})
	if err != nil {
		return err
	}
	defer st.Close()
	// Every line logged goes through redact: errors may quote the --db.
	logHandler := redactHandler{slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})}
	logger := slog.New(logHandler)
	// One registry for /metrics: the runtime, the engine and the API.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	observer, err := metrics.New(reg)
	if err != nil {
		return err
	}
	cfg := reprise.Config{Store: st, Logger: logger, LeaseTTL: c.leaseTTL, ShutdownGrace: c.shutdownGrace, WorkerID: c.workerID,
		MaxResidentRuns: c.maxResident, MaxPendingRuns: c.maxPending, Observer: observer}
	tracer, err := serverTracer(ctx)
	if err != nil {
		return err
	}
	if tracer != nil {
		cfg.Observer, cfg.Tracer = observers{observer, tracer}, tracer
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "reprise_trace_ends_dropped_total",
			Help: "Ends of attempts and runs not traced: the tracer's queue was full.",
		}, func() float64 { return float64(tracer.Dropped()) }))
		defer func() {
			if err := shutdownTracer(ctx, tracer); err != nil {
				logger.Warn("traces", "err", err)
			}
		}()
	}
	e, err := reprise.New(cfg)
	if err != nil {
		return err
	}
	if err := e.Register(demoDefinitions()...); err != nil {
		return err
	}
	demoSteps := []string{reserveStep.Name(), chargeStep.Name(), shipStep.Name(), refundStep.Name(), releaseStep.Name()}
	// The flows' HTTP steps call only the hosts the API's steps may.
	flowCaller, err := httpstep.New(httpstep.Options{AllowHosts: c.allowStepHosts})
	if err != nil {
		return err
	}
	flows := flow.NewSet(e, &flow.Options{Caller: flowCaller})
	gauges, err := metrics.NewGauges(reg, metrics.GaugesConfig{Store: st, Engine: e, Steps: demoSteps})
	if err != nil {
		return err
	}
	h, err := httpapi.NewHandler(e, st, httpapi.Options{Tokens: c.tokens, MaxBodyBytes: c.maxBody, MaxWait: longPollMax,
		Logger: logger, Steps: demoSteps, AllowStepHosts: c.allowStepHosts, Metrics: reg, Flows: flows})
	if err != nil {
		return err
	}
	ui, err := webui.New(webui.Config{Engine: e, Store: st, Tokens: c.tokens, Logger: logger})
	if err != nil {
		return err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	ln = newLimitListener(ln, c.maxConns)

	// Requests, long-polls included, end when the server stops; the
	// engine stops after them.
	reqCtx, stopRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRequests()
	srv := &http.Server{
		Handler:           withWebUI(h, ui),
		ReadHeaderTimeout: c.readHeaderTimeout,
		ReadTimeout:       c.readTimeout,
		WriteTimeout:      c.writeTimeout,
		IdleTimeout:       c.idleTimeout,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ErrorLog:          slog.NewLogLogger(logHandler, slog.LevelWarn),
	}
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngine()
	engineDone := make(chan error, 1)
	go func() { engineDone <- e.Run(engineCtx) }()
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		syncFlows(engineCtx, st, flows, logger)
	}()
	defer func() {
		stopEngine()
		<-synced
	}()
	gaugesDone := make(chan error, 1)
	go func() { gaugesDone <- gauges.Run(engineCtx) }()
	served := make(chan error, 1) // none once the server is closed
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		served <- err
	}()
	fmt.Fprintf(stderr, "reprise server: listening on http://%s (database %s); the web page is at http://%s/\n",
		ln.Addr(), redact.String(c.db), ln.Addr())

	var engineErr error
	engineStopped := false
	select {
	case err = <-served:
	case engineErr = <-engineDone:
		// The engine could not start (another live engine has its id):
		// serving without one would accept work nobody does.
		engineStopped = true
		srv.Close()
		err = <-served
	case <-ctx.Done():
		fmt.Fprintln(stderr, "reprise server: shutting down")
		// The requests in flight finish first, within the grace, so that
		// none starts a run on an engine that has already let its runs
		// go; the engine's attempts then get the grace too (below).
		stopRequests()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.shutdownGrace)
		err = srv.Shutdown(shutdownCtx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintln(stderr, "reprise server: requests still running after the shutdown grace were cut off")
			err = srv.Close()
		}
		err = errors.Join(err, <-served)
	}
	stopEngine()
	if !engineStopped {
		engineErr = <-engineDone
	}
	return errors.Join(err, engineErr, <-gaugesDone)
}

// withWebUI serves the web page at / and the API at its paths (/v1/,
// /metrics, /healthz).
func withWebUI(api, ui http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)
	mux.Handle("/metrics", api)
	mux.Handle("/healthz", api)
	mux.Handle("/", ui)
	return mux
}

// A limitListener serves at most a number of connections at once: Accept
// waits for one of them to close, and the connections that arrive
// meanwhile wait in the kernel's backlog. It bounds the server's file
// descriptors; the timeouts bound how long a connection keeps its place.
type limitListener struct {
	net.Listener
	slots chan struct{} // one per open connection
	done  chan struct{} // closed by Close
	once  sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// A limitConn gives its place back when it closes.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the connection as net/http does before it closes
// one whose request it did not read to the end, so that the client reads
// the answer before the connection is reset.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// flowSyncEvery is how often a server reads the flows stored in its
// database, to run the runs of those pushed to another server.
const flowSyncEvery = 5 * time.Second

// syncFlows registers the flows pushed to the other servers on the
// database, every flowSyncEvery until ctx ends (docs/flows.md).
func syncFlows(ctx context.Context, st store.Store, flows *flow.Set, log *slog.Logger) {
	t := time.NewTicker(flowSyncEvery)
	defer t.Stop()
	var s flowSync
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.once(ctx, st, flows, log)
		}
	}
}

// flowSync is the state of syncFlows: the error it last logged.
type flowSync struct{ logged string }

// once registers the flows stored since the last time, and logs an error
// unless it is the one logged last: a stored flow that does not parse is
// told of once, not every flowSyncEvery, until it is replaced.
func (s *flowSync) once(ctx context.Context, st store.Store, flows *flow.Set, log *slog.Logger) {
	err := httpapi.SyncFlows(ctx, st, flows)
	switch {
	case ctx.Err() != nil:
	case err == nil:
		s.logged = ""
	case err.Error() != s.logged:
		s.logged = err.Error()
		log.Warn("sync flows", "err", err)
	}
}
