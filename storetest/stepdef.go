package storetest

import (
	"reflect"
	"testing"
	"time"

	"reprise/store"
)

// define calls StepDefine, which must succeed.
func (f *fixture) define(name, kind, url, policy string) (*store.StepDefinition, bool) {
	f.t.Helper()
	def, created, err := f.store.StepDefine(f.t.Context(), &store.StepDefineParams{Name: name, Kind: kind, URL: url, Policy: policy})
	if err != nil {
		f.t.Fatalf("StepDefine(%s): %v", name, err)
	}
	return def, created
}

// stepDef calls StepDefGet, which must succeed.
func (f *fixture) stepDef(name string, version int) *store.StepDefinition {
	f.t.Helper()
	def, err := f.store.StepDefGet(f.t.Context(), &store.StepDefGetParams{Name: name, Version: version})
	if err != nil {
		f.t.Fatalf("StepDefGet(%s, %d): %v", name, version, err)
	}
	return def
}

// stepDefs calls StepDefList, which must succeed.
func (f *fixture) stepDefs() []*store.StepDefinition {
	f.t.Helper()
	defs, err := f.store.StepDefList(f.t.Context(), &store.StepDefListParams{})
	if err != nil {
		f.t.Fatalf("StepDefList: %v", err)
	}
	return defs
}

// requireDef compares a definition field by field, times as instants.
func requireDef(t *testing.T, got, want *store.StepDefinition) {
	t.Helper()
	norm := func(d *store.StepDefinition) store.StepDefinition {
		n := *d
		n.CreatedAt, n.DeletedAt = normTime(n.CreatedAt), normTime(n.DeletedAt)
		return n
	}
	if got == nil || !reflect.DeepEqual(norm(got), norm(want)) {
		t.Fatalf("definition = %+v, want %+v", got, want)
	}
}

func testStepDefinitions(t *testing.T, open Open) {
	const url1, url2 = "https://pay.example/v1", "https://pay.example/v2"

	t.Run("EachChangeIsANewVersion", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		t0 := f.now()

		def, created := f.define("charge", "http", url1, "[retry: 3]")
		v1 := &store.StepDefinition{Name: "charge", Version: 1, Kind: "http", URL: url1, Policy: "[retry: 3]", CreatedAt: t0}
		if !created {
			t.Fatal("a new step: created = false")
		}
		requireDef(t, def, v1)

		// The same definition again is the current version, unchanged.
		f.clock.Advance(time.Second)
		if def, created := f.define("charge", "http", url1, "[retry: 3]"); created {
			t.Fatalf("the same definition again: created a version %+v", def)
		} else {
			requireDef(t, def, v1)
		}

		t1 := f.now()
		def, created = f.define("charge", "http", url2, "[retry: 3]")
		v2 := &store.StepDefinition{Name: "charge", Version: 2, Kind: "http", URL: url2, Policy: "[retry: 3]", CreatedAt: t1}
		if !created {
			t.Fatal("a new URL: created = false")
		}
		requireDef(t, def, v2)
		f.clock.Advance(time.Second)
		t2 := f.now()
		def, _ = f.define("charge", "http", url2, "")
		v3 := &store.StepDefinition{Name: "charge", Version: 3, Kind: "http", URL: url2, CreatedAt: t2}
		requireDef(t, def, v3)

		// Each version stays readable; version 0 is the current one.
		requireDef(t, f.stepDef("charge", 0), v3)
		requireDef(t, f.stepDef("charge", 1), v1)
		requireDef(t, f.stepDef("charge", 2), v2)
		requireDef(t, f.stepDef("charge", 3), v3)
		for _, p := range []store.StepDefGetParams{{Name: "charge", Version: 4}, {Name: "refund"}, {Name: "refund", Version: 1}} {
			_, err := f.store.StepDefGet(t.Context(), &p)
			requireErr(t, err, store.ErrNotFound)
		}
	})

	t.Run("KindCannotChange", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		v1, _ := f.define("resize", "pull", "", "")
		_, _, err := f.store.StepDefine(t.Context(), &store.StepDefineParams{Name: "resize", Kind: "http", URL: url1})
		requireErr(t, err, store.ErrStepKindChanged)
		requireDef(t, f.stepDef("resize", 0), v1)
		for _, p := range []store.StepDefineParams{{Kind: "http"}, {Name: "x"}} {
			if _, _, err := f.store.StepDefine(t.Context(), &p); err == nil {
				t.Fatalf("StepDefine(%+v) succeeded, want an error", p)
			}
		}
	})

	t.Run("ListHasTheCurrentVersionOfEachStep", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		if defs := f.stepDefs(); len(defs) != 0 {
			t.Fatalf("StepDefList of an empty store = %+v", defs)
		}
		f.define("ship", "pull", "", "")
		f.define("charge", "http", url1, "")
		charge, _ := f.define("charge", "http", url2, "[retry: 5]")
		resize, _ := f.define("resize", "pull", "", "")
		ship, _ := f.define("ship", "pull", "", "[timeout: 1m]")
		f.define("gone", "http", url1, "")
		if err := f.store.StepDefDelete(t.Context(), &store.StepDefDeleteParams{Name: "gone"}); err != nil {
			t.Fatal(err)
		}

		defs := f.stepDefs()
		want := []*store.StepDefinition{charge, resize, ship}
		if len(defs) != len(want) {
			t.Fatalf("StepDefList = %d definitions, want %d: %+v", len(defs), len(want), defs)
		}
		for i := range want {
			requireDef(t, defs[i], want[i])
		}
	})

	t.Run("DeleteRefusedWhileATaskNeedsTheStep", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		def, _ := f.define("charge", "http", url1, "")
		f.schedule("run-1", newStep(1, "charge"))
		del := func(force bool) error {
			return f.store.StepDefDelete(t.Context(), &store.StepDefDeleteParams{Name: "charge", Force: force})
		}

		// Ready, leased, waiting to retry: each keeps it in use.
		requireErr(t, del(false), store.ErrStepInUse)
		task := f.claimOne("charge")
		requireErr(t, del(false), store.ErrStepInUse)
		f.retry(task, time.Minute)
		requireErr(t, del(false), store.ErrStepInUse)
		requireDef(t, f.stepDef("charge", 0), def)

		f.clock.Advance(time.Minute)
		f.complete(f.claimOne("charge"))
		f.clock.Advance(time.Second)
		now := f.now()
		if err := del(false); err != nil {
			t.Fatalf("StepDefDelete once no task needs it: %v", err)
		}
		_, err := f.store.StepDefGet(t.Context(), &store.StepDefGetParams{Name: "charge"})
		requireErr(t, err, store.ErrNotFound)
		deleted := *def
		deleted.DeletedAt = now
		requireDef(t, f.stepDef("charge", 1), &deleted)
		if defs := f.stepDefs(); len(defs) != 0 {
			t.Fatalf("StepDefList after the delete = %+v", defs)
		}
		requireErr(t, del(false), store.ErrNotFound)
		requireErr(t, del(true), store.ErrNotFound)

		// Defined again, even as another kind, it takes the next number:
		// a version is never reused.
		again, created := f.define("charge", "pull", "", "")
		if !created || again.Version != 2 || again.Kind != "pull" {
			t.Fatalf("defined again after the delete: %+v, created %v; want version 2, pull", again, created)
		}
		requireDef(t, f.stepDef("charge", 1), &deleted)
	})

	t.Run("DeleteRefusedWhileARunOfItsWorkflowIsActive", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		f.define("charge", "http", url1, "")
		_, _, err := f.store.RunCreate(t.Context(), &store.RunCreateParams{ID: "one-step", Workflow: "step:charge"})
		if err != nil {
			t.Fatal(err)
		}
		p := &store.StepDefDeleteParams{Name: "charge", Workflows: []string{"other", "step:charge"}}
		requireErr(t, f.store.StepDefDelete(t.Context(), p), store.ErrStepInUse)
		// Other workflows' runs do not count.
		p.Workflows = []string{"other"}
		if err := f.store.StepDefDelete(t.Context(), p); err != nil {
			t.Fatalf("StepDefDelete with no run of the workflows given: %v", err)
		}
	})

	t.Run("DeleteWithForce", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		f.define("charge", "http", url1, "")
		f.schedule("run-1", newStep(1, "charge"))
		if err := f.store.StepDefDelete(t.Context(), &store.StepDefDeleteParams{Name: "charge", Force: true}); err != nil {
			t.Fatalf("StepDefDelete with Force while in use: %v", err)
		}
		_, err := f.store.StepDefGet(t.Context(), &store.StepDefGetParams{Name: "charge"})
		requireErr(t, err, store.ErrNotFound)
		// The task stays: it waits for the step to be defined again.
		if task := f.claimOne("charge"); task.RunID != "run-1" {
			t.Fatalf("task = %+v", task)
		}
	})

	t.Run("AScheduledStepKeepsItsVersion", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		versioned := func(s store.StepSpec, v int) store.StepSpec {
			s.StepVersion = v
			return s
		}
		lease := f.create("run-1")
		events := f.advance(lease, store.RunAdvanceParams{Steps: []store.StepSpec{
			versioned(newStep(1, "charge"), 3), versioned(newStep(2, "ship"), 0),
		}})
		if len(events) != 2 || events[0].Version != 3 || events[1].Version != 0 {
			t.Fatalf("StepScheduled events = %s, want versions 3 and 0", dump(events))
		}
		if got := f.history("run-1"); got[1].Version != 3 {
			t.Fatalf("StepScheduled read back = %s, want version 3", dump(got[1:2]))
		}

		// Claimed, read, retried at once in place or not, failed for good
		// and redriven: the task keeps its version.
		task := f.claimOne("charge")
		if task.StepVersion != 3 {
			t.Fatalf("claimed task's StepVersion = %d, want 3", task.StepVersion)
		}
		if ship := f.claimOne("ship"); ship.StepVersion != 0 {
			t.Fatalf("ship's StepVersion = %d, want 0", ship.StepVersion)
		}
		if got, err := f.store.TaskGet(t.Context(), task.ID); err != nil || got.StepVersion != 3 {
			t.Fatalf("TaskGet = %+v, %v; want StepVersion 3", got, err)
		}
		next := f.retryLeased(task, worker, minute).Next
		if next == nil || next.StepVersion != 3 {
			t.Fatalf("next attempt, in place = %+v, want StepVersion 3", next)
		}
		next = f.retryLeased(next, worker2, minute).Next
		if next == nil || next.StepVersion != 3 {
			t.Fatalf("next attempt = %+v, want StepVersion 3", next)
		}
		f.failAttempt(next)
		f.failRun(lease)
		if _, err := f.store.RunRedrive(t.Context(), &store.RunRedriveParams{ID: "run-1", By: "operator"}); err != nil {
			t.Fatal(err)
		}
		if task := f.claimOne("charge"); task.StepVersion != 3 {
			t.Fatalf("redriven task's StepVersion = %d, want 3", task.StepVersion)
		}

		// A step leased as it is scheduled has it too.
		lease2 := f.create("run-2")
		adv := f.advanced(lease2, store.RunAdvanceParams{LeaseOwner: engine, LeaseTTL: minute,
			Steps: []store.StepSpec{func() store.StepSpec { s := versioned(newStep(1, "charge"), 4); s.Lease = true; return s }()}})
		if len(adv.Tasks) != 1 || adv.Tasks[0].StepVersion != 4 {
			t.Fatalf("leased at once: %+v, want one task of StepVersion 4", adv.Tasks)
		}
		if got, err := f.store.TaskGet(t.Context(), adv.Tasks[0].ID); err != nil || got.StepVersion != 4 {
			t.Fatalf("TaskGet = %+v, %v; want StepVersion 4", got, err)
		}
	})
}
