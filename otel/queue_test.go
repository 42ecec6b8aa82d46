package otel

import (
	"context"
	"fmt"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"reprise"
)

// Ends that find the queue full are dropped and counted, the engine not
// held up; those queued become spans, at the latest on ForceFlush.
func TestQueueDropsWhenFull(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tr := New(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tr.Shutdown(context.WithoutCancel(t.Context())) })
	tr.building.Lock() // a build held up: nothing leaves the queue
	for i := range maxQueued + 5 {
		tr.RunEnded(reprise.RunEnd{RunID: fmt.Sprintf("r%d", i), Workflow: "w", Status: reprise.RunCompleted})
	}
	if got := tr.Dropped(); got != 5 {
		t.Errorf("Dropped() = %d, want 5", got)
	}
	tr.building.Unlock()
	if err := tr.ForceFlush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := len(exp.GetSpans()); got != maxQueued {
		t.Errorf("%d spans exported, want %d", got, maxQueued)
	}
}
