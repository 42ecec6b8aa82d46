package reprisetest

import (
	"context"
	"testing"

	"reprise"
)

// Run starts an engine on cfg, its store and clock as given (real time
// unless cfg.Clock says otherwise), with defs registered, and runs it until
// the test ends. Cleanups the test registers after Run run before the
// engine stops; those registered before it, after.
func Run(t testing.TB, cfg reprise.Config, defs ...reprise.Definition) *reprise.Engine {
	t.Helper()
	e, err := reprise.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(defs...); err != nil {
		t.Fatal(err)
	}
	// The engine outlives t's context, which ends before the cleanups run.
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("engine: %v", err)
		}
	})
	return e
}
