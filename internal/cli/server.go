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
	"syscall"
	"time"

	"reprise"
	"reprise/httpapi"
	"reprise/postgres"
)

// serverMain serves the HTTP API on an engine that runs the demo's
// workflows and every step registered through the API, until SIGINT or
// SIGTERM.
func serverMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("server", "[--db DB] [--addr HOST:PORT] [--token T] [--lease-ttl D] [--writers N]")
	db := fs.String("db", defaultDB, "database: a SQLite path, sqlite:PATH or postgres://URL")
	addr := fs.String("addr", "127.0.0.1:7420", "address to listen on; a non-loopback one needs a token")
	token := fs.String("token", "", "bearer token every API call must carry (default $REPRISE_TOKEN)")
	leaseTTL := fs.Duration("lease-ttl", 30*time.Second, "how long an attempt's lease lasts between heartbeats")
	maxBody := fs.Int64("max-body", 1<<20, "largest request body accepted, in bytes")
	writers := fs.Int("writers", 0, "PostgreSQL: transactions recording transitions at once (default 2; 1 when several engine processes share a small server)")
	pos, code, ok := parseArgs(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageErrorf(fs, stderr, "unexpected argument %q", pos[0])
	}
	if *token == "" {
		*token = os.Getenv("REPRISE_TOKEN")
	}
	if *leaseTTL <= 0 {
		return usageErrorf(fs, stderr, "--lease-ttl %v must be positive", *leaseTTL)
	}
	if *maxBody <= 0 {
		return usageErrorf(fs, stderr, "--max-body %d must be positive", *maxBody)
	}
	if *writers < 0 {
		return usageErrorf(fs, stderr, "--writers %d must not be negative", *writers)
	}
	if *writers > 0 && !isPostgresURL(*db) {
		return usageErrorf(fs, stderr, "--writers applies to a postgres:// --db, not %q", *db)
	}
	if err := checkExposure(*addr, *token); err != nil {
		return usageErrorf(fs, stderr, "%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, stderr, *db, *writers, *addr, *token, *leaseTTL, *maxBody); err != nil {
		fmt.Fprintf(stderr, "reprise server: %v\n", err)
		return exitFail
	}
	return exitOK
}

// checkExposure refuses to serve an address other machines can reach
// without a token.
func checkExposure(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", addr, err)
	}
	if token != "" || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("--addr %q is reachable from other machines; give --token (or set REPRISE_TOKEN) to require one, or listen on 127.0.0.1", addr)
}

func serve(ctx context.Context, stderr io.Writer, db string, writers int, addr, token string, leaseTTL time.Duration, maxBody int64) error {
	store, err := openStoreWith(ctx, db, postgres.Options{Writers: writers})
	if err != nil {
		return err
	}
	defer store.Close()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := reprise.New(reprise.Config{Store: store, Logger: logger, LeaseTTL: leaseTTL})
	if err != nil {
		return err
	}
	if err := e.Register(demoDefinitions()...); err != nil {
		return err
	}
	demoSteps := []string{reserveStep.Name(), chargeStep.Name(), shipStep.Name(), refundStep.Name(), releaseStep.Name()}
	h, err := httpapi.NewHandler(e, httpapi.Options{Token: token, MaxBodyBytes: maxBody, Logger: logger, Steps: demoSteps})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}

	// Requests, long-polls included, end when the server stops; the
	// engine stops after them.
	reqCtx, stopRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRequests()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
	}
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngine()
	engineDone := make(chan error, 1)
	go func() { engineDone <- e.Run(engineCtx) }()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stderr, "reprise server: listening on http://%s (database %s)\n", ln.Addr(), db)

	select {
	case err = <-served:
	case <-ctx.Done():
		fmt.Fprintln(stderr, "reprise server: shutting down")
		stopRequests()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(shutdownCtx)
		cancel()
		<-served
	}
	stopEngine()
	if eerr := <-engineDone; eerr != nil {
		err = errors.Join(err, eerr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
