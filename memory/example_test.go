package memory_test

import (
	"context"
	"fmt"
	"log"

	"reprise"
	"reprise/memory"
	"reprise/store"
)

// An engine on the memory store: what it keeps lasts as long as the
// process, which suits tests and demos.
func ExampleNew() {
	greet := reprise.NewStep("greet", func(ctx context.Context, name string) (string, error) {
		return "hello, " + name, nil
	})
	hello := reprise.NewWorkflow("hello", func(ctx context.Context, name string) (string, error) {
		return reprise.Step(ctx, greet, name)
	})

	st := memory.New(memory.Options{})
	e, err := reprise.New(reprise.Config{Store: st})
	if err != nil {
		log.Fatal(err)
	}
	if err := e.Register(hello, greet); err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	out, err := hello.Run(ctx, e, "world")
	fmt.Println(out, err)

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	st.Close()
	// Output: hello, world <nil>
}

// Open gives another store on the same memory, as another process would
// open the same database; closing a store is how its process dies, and the
// engines started on it are gone for the others.
func ExampleStore_Open() {
	ctx := context.Background()
	first := memory.New(memory.Options{})
	second := first.Open()
	if err := first.EngineStart(ctx, &store.EngineStartParams{ID: "engine-a"}); err != nil {
		log.Fatal(err)
	}
	first.Close() // without EngineStop: engine-a's process died

	gone, err := second.EngineGone(ctx)
	fmt.Println(gone, err)
	second.Close()
	// Output: [engine-a] <nil>
}
