package postgres_test

import (
	"context"
	"log"
	"os"

	"reprise/postgres"
)

// Open migrates the schema (unless Options.NoMigrate) and returns a store
// that several engine processes can share.
func ExampleOpen() {
	ctx := context.Background()
	s, err := postgres.Open(ctx, os.Getenv("DATABASE_URL"), &postgres.Options{Schema: "reprise"})
	if err != nil {
		log.Fatal(err)
	}
	// ... run engines on s; then, once they have stopped:
	if err := s.Close(); err != nil {
		log.Fatal(err)
	}
}

// Listen delivers the notices of every process on the schema until ctx
// ends; a NoticeResync says some may have been missed.
func ExampleStore_Listen() {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := postgres.Open(ctx, os.Getenv("DATABASE_URL"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			log.Print(err)
		}
	}()
	go func() { done <- s.Listen(ctx, onNotice) }()
	// ... run the engine; notices arrive until ctx ends.
}

func onNotice(n postgres.Notice) {
	switch n.Kind {
	case postgres.NoticeTaskReady:
		// Claim tasks of n.Step at n.At.
	case postgres.NoticeOutcome:
		// If n.Owner is this engine, read run n.RunID's new events.
	case postgres.NoticeRunReady, postgres.NoticeResync:
		// Claim runs; after a resync also tasks and timers.
	}
}

// Migrate is what `reprise migrate --db postgres://...` runs.
func ExampleMigrate() {
	err := postgres.Migrate(context.Background(), os.Getenv("DATABASE_URL"), &postgres.Options{Schema: "reprise"})
	if err != nil {
		log.Fatal(err)
	}
}
