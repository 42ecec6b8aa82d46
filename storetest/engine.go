package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"reprise/store"
)

// testTaskRelease pins TaskRelease: the live leases of one owner lapse at
// once, and nothing else changes.
func testTaskRelease(t *testing.T, open Open) {
	t.Run("CutsTheOwnersLiveLeasesToNow", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)

		f.schedule("run-1", newStep(1, "charge"), newStep(2, "ship"), newStep(3, "email"), newStep(4, "audit"))
		charge := f.claim(engine, "charge", 1, minute)[0]
		ship := f.claim(engine2, "ship", 1, minute)[0]
		email := f.claim(engine, "email", 1, 10*time.Second)[0]
		f.clock.Advance(20 * time.Second) // email's lease lapsed already
		n, err := f.store.TaskRelease(t.Context(), &store.TaskReleaseParams{Owner: engine})
		if err != nil || n != 1 {
			t.Fatalf("TaskRelease = %d, %v; want 1 lease cut (charge's; email's had lapsed)", n, err)
		}
		got := f.expired(10)
		ids := make([]int64, len(got))
		for i, task := range got {
			ids[i] = task.ID
		}
		slices.Sort(ids)
		if want := []int64{charge.ID, email.ID}; !slices.Equal(ids, want) {
			t.Fatalf("lapsed after the release: %v, want charge and email %v", ids, want)
		}
		for _, task := range got {
			if task.Owner != engine {
				t.Errorf("task %d listed with owner %q, want %q", task.ID, task.Owner, engine)
			}
			if task.ID == charge.ID && !task.LeaseUntil.Equal(f.now()) {
				t.Errorf("charge's lease ends %v, want now %v", task.LeaseUntil, f.now())
			}
			if task.ID == email.ID && !task.LeaseUntil.Equal(email.LeaseUntil) {
				t.Errorf("email's lapsed lease moved to %v, want %v", task.LeaseUntil, email.LeaseUntil)
			}
		}
		// The holder of a released lease writes nothing more; another
		// owner's lease and the unleased task are as they were.
		_, err = f.store.TaskComplete(t.Context(), &store.TaskCompleteParams{TaskID: charge.ID, Token: charge.Token, Output: []byte(`1`)})
		if !errors.Is(err, store.ErrLeaseLost) {
			t.Fatalf("TaskComplete on a released lease: %v, want ErrLeaseLost", err)
		}
		if got, err := f.store.TaskGet(t.Context(), ship.ID); err != nil || !got.LeaseUntil.Equal(ship.LeaseUntil) || got.Owner != engine2 {
			t.Fatalf("another owner's task: %+v, %v; want its lease as it was", got, err)
		}
		f.claimOne("audit")
	})

	t.Run("NothingToRelease", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		f.schedule("run-1", newStep(1, "charge"))
		n, err := f.store.TaskRelease(t.Context(), &store.TaskReleaseParams{Owner: engine})
		if err != nil || n != 0 {
			t.Fatalf("TaskRelease of an owner without leases = %d, %v; want 0", n, err)
		}
		f.claimOne("charge")
	})
}

// Engines runs the cases of EngineStart, EngineStop and EngineGone, which
// need two stores on one database: pair opens them, the first for the
// suite to close (closing it is how an engine's process dies here), the
// second for t to close.
func Engines(t *testing.T, pair func(t *testing.T) (first, second store.Store)) {
	// open opens a case's stores; the first is closed when t ends unless
	// the case closed it.
	open := func(t *testing.T) (first store.Store, closeFirst func() error, second store.Store) {
		first, second = pair(t)
		closeFirst = sync.OnceValue(first.Close)
		t.Cleanup(func() {
			if err := closeFirst(); err != nil {
				t.Errorf("close the first store: %v", err)
			}
		})
		return first, closeFirst, second
	}
	t.Run("OneLiveEnginePerID", func(t *testing.T) {
		t.Parallel()
		a, _, b := open(t)
		start := func(s store.Store, id string) error {
			return s.EngineStart(t.Context(), &store.EngineStartParams{ID: id})
		}
		if err := start(a, "engine-a"); err != nil {
			t.Fatalf("EngineStart: %v", err)
		}
		for _, s := range []store.Store{a, b} {
			if err := start(s, "engine-a"); !errors.Is(err, store.ErrEngineLive) {
				t.Fatalf("EngineStart of a live id: %v, want ErrEngineLive", err)
			}
		}
		if err := start(b, "engine-b"); err != nil {
			t.Fatalf("EngineStart of another id: %v", err)
		}
		if gone := engineGone(t, b); len(gone) != 0 {
			t.Fatalf("EngineGone = %v with both engines live", gone)
		}
		// A clean stop frees the id and leaves nothing gone.
		if err := b.EngineStop(t.Context(), "engine-b"); err != nil {
			t.Fatalf("EngineStop: %v", err)
		}
		if err := start(a, "engine-b"); err != nil {
			t.Fatalf("EngineStart after a stop: %v", err)
		}
		if gone := engineGone(t, b); len(gone) != 0 {
			t.Fatalf("EngineGone = %v after a clean stop", gone)
		}
	})

	t.Run("AnEngineWhoseProcessDiedIsGone", func(t *testing.T) {
		t.Parallel()
		a, closeA, b := open(t)
		if err := a.EngineStart(t.Context(), &store.EngineStartParams{ID: "engine-a"}); err != nil {
			t.Fatalf("EngineStart: %v", err)
		}
		if err := closeA(); err != nil { // the process dies: no EngineStop
			t.Fatalf("Close: %v", err)
		}
		if gone := engineGone(t, b); !slices.Equal(gone, []string{"engine-a"}) {
			t.Fatalf("EngineGone = %v, want [engine-a]", gone)
		}
		// Restarted under its id, it is live again; forgotten, it is gone
		// from the list.
		if err := b.EngineStart(t.Context(), &store.EngineStartParams{ID: "engine-a"}); err != nil {
			t.Fatalf("EngineStart under a dead engine's id: %v", err)
		}
		if gone := engineGone(t, b); len(gone) != 0 {
			t.Fatalf("EngineGone = %v, want none once restarted", gone)
		}
		if err := b.EngineStop(t.Context(), "engine-a"); err != nil {
			t.Fatalf("EngineStop: %v", err)
		}
	})
}

func engineGone(t *testing.T, s store.Store) []string {
	t.Helper()
	gone, err := s.EngineGone(t.Context())
	if err != nil {
		t.Fatalf("EngineGone: %v", err)
	}
	return gone
}
