package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"reprise/store"
)

// putFlow calls FlowPut, which must succeed.
func (f *fixture) putFlow(name, doc string) (*store.FlowDefinition, bool) {
	f.t.Helper()
	def, created, err := f.store.FlowPut(f.t.Context(), &store.FlowPutParams{Name: name, Flow: json.RawMessage(doc)})
	if err != nil {
		f.t.Fatalf("FlowPut(%s): %v", name, err)
	}
	return def, created
}

// getFlow calls FlowGet, which must succeed.
func (f *fixture) getFlow(name string, version int) *store.FlowDefinition {
	f.t.Helper()
	def, err := f.store.FlowGet(f.t.Context(), &store.FlowGetParams{Name: name, Version: version})
	if err != nil {
		f.t.Fatalf("FlowGet(%s, %d): %v", name, version, err)
	}
	return def
}

// requireFlow compares a flow definition field by field: the flow byte
// for byte, times as instants.
func requireFlow(t *testing.T, got, want *store.FlowDefinition) {
	t.Helper()
	if got == nil || got.Name != want.Name || got.Version != want.Version || !bytes.Equal(got.Flow, want.Flow) ||
		!normTime(got.CreatedAt).Equal(normTime(want.CreatedAt)) {
		t.Fatalf("flow = %+v (%s), want %+v (%s)", got, got.Flow, want, want.Flow)
	}
}

func testFlows(t *testing.T, open Open) {
	// The flows are kept as given, byte for byte: key order and spaces
	// are the caller's canonical form, not the database's.
	const (
		doc1 = `{"flow":"order","steps":{"b":{"pull":true},"a":{"http":"https://shop.example/a"}},"goals":["a"]}`
		doc2 = `{"flow":"order","steps":{"b":{"pull":true}},  "goals":["b"]}`
	)

	t.Run("EachChangeIsANewVersion", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		t0 := f.now()
		def, created := f.putFlow("order", doc1)
		v1 := &store.FlowDefinition{Name: "order", Version: 1, Flow: json.RawMessage(doc1), CreatedAt: t0}
		if !created {
			t.Fatal("a new flow: created = false")
		}
		requireFlow(t, def, v1)

		// The same flow again is the latest version, unchanged.
		f.clock.Advance(time.Second)
		if def, created := f.putFlow("order", doc1); created {
			t.Fatalf("the same flow again: created a version %+v", def)
		} else {
			requireFlow(t, def, v1)
		}

		t1 := f.now()
		def, created = f.putFlow("order", doc2)
		v2 := &store.FlowDefinition{Name: "order", Version: 2, Flow: json.RawMessage(doc2), CreatedAt: t1}
		if !created {
			t.Fatal("a changed flow: created = false")
		}
		requireFlow(t, def, v2)

		// The first flow again is not the latest: a new version.
		f.clock.Advance(time.Second)
		t2 := f.now()
		def, created = f.putFlow("order", doc1)
		v3 := &store.FlowDefinition{Name: "order", Version: 3, Flow: json.RawMessage(doc1), CreatedAt: t2}
		if !created {
			t.Fatal("an older version's flow again: created = false")
		}
		requireFlow(t, def, v3)

		requireFlow(t, f.getFlow("order", 0), v3)
		requireFlow(t, f.getFlow("order", 1), v1)
		requireFlow(t, f.getFlow("order", 2), v2)
		requireFlow(t, f.getFlow("order", 3), v3)
		for _, p := range []store.FlowGetParams{{Name: "order", Version: 4}, {Name: "refund"}, {Name: "refund", Version: 1}} {
			_, err := f.store.FlowGet(t.Context(), &p)
			requireErr(t, err, store.ErrNotFound)
		}
	})

	t.Run("ListHasTheLatestVersionOfEachFlow", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		defs, err := f.store.FlowList(t.Context(), &store.FlowListParams{})
		if err != nil || len(defs) != 0 {
			t.Fatalf("FlowList of an empty store = %+v, %v", defs, err)
		}
		f.putFlow("ship", `{"flow":"ship"}`)
		f.putFlow("order", doc1)
		order, _ := f.putFlow("order", doc2)
		ship, _ := f.putFlow("ship", `{"flow":"ship","goals":[]}`)
		refund, _ := f.putFlow("refund", `{"flow":"refund"}`)

		defs, err = f.store.FlowList(t.Context(), &store.FlowListParams{})
		if err != nil {
			t.Fatal(err)
		}
		want := []*store.FlowDefinition{order, refund, ship}
		if len(defs) != len(want) {
			t.Fatalf("FlowList = %d flows, want %d: %+v", len(defs), len(want), defs)
		}
		for i := range want {
			requireFlow(t, defs[i], want[i])
		}
	})

	t.Run("BadParamsChangeNothing", func(t *testing.T) {
		t.Parallel()
		f := setup(t, open)
		v1, _ := f.putFlow("order", doc1)
		for _, p := range []store.FlowPutParams{
			{Flow: json.RawMessage(doc1)},
			{Name: "order"},
			{Name: "order", Flow: json.RawMessage(`{"flow":`)},
			{Name: "refund", Flow: json.RawMessage(`not json`)},
		} {
			if def, _, err := f.store.FlowPut(t.Context(), &p); err == nil {
				t.Fatalf("FlowPut(%s, %q) = %+v, want an error", p.Name, p.Flow, def)
			}
		}
		for _, p := range []store.FlowGetParams{{}, {Name: "order", Version: -1}} {
			if def, err := f.store.FlowGet(t.Context(), &p); err == nil || errors.Is(err, store.ErrNotFound) {
				t.Fatalf("FlowGet(%+v) = %+v, %v; want an error other than not found", p, def, err)
			}
		}
		requireFlow(t, f.getFlow("order", 0), v1)
		defs, err := f.store.FlowList(t.Context(), &store.FlowListParams{})
		if err != nil || len(defs) != 1 {
			t.Fatalf("FlowList after bad puts = %+v, %v", defs, err)
		}
	})
}
