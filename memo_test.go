package reprise_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"reprise"
	"reprise/retry"
	"reprise/store"
)

// memoDecodes counts the decodes of a plainInput, by its Note.
var memoDecodes sync.Map // string → *int

// plainInput is a plain value (no references): a retry at once may be
// handed the first attempt's decoded copy.
type plainInput struct {
	Note string
	N    int
}

func (p *plainInput) UnmarshalJSON(b []byte) error {
	type fields plainInput
	if err := json.Unmarshal(b, (*fields)(p)); err != nil {
		return err
	}
	n, _ := memoDecodes.LoadOrStore(p.Note, new(int))
	*n.(*int)++
	return nil
}

// refInput holds a slice: every attempt decodes its own.
type refInput struct {
	Items []int
}

// memoSeen records what each attempt of the steps below saw.
var memoSeen struct {
	sync.Mutex
	plain map[string][]int   // by Note: N as each attempt found it
	ref   map[string][][]int // by run: Items as each attempt found them
}

// Both steps fail their first two attempts, retried at once, and change
// their input as they go: no attempt may see another's changes.
var (
	plainStep = reprise.NewStep("memo-plain", func(ctx context.Context, in plainInput) (int, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		memoSeen.Lock()
		memoSeen.plain[in.Note] = append(memoSeen.plain[in.Note], in.N)
		memoSeen.Unlock()
		in.N += 100
		if info.Attempt < 3 {
			return 0, errors.New("not yet")
		}
		return in.N, nil
	}, reprise.WithPolicy(retry.Attempts(3, retry.None)))
	refStep = reprise.NewStep("memo-ref", func(ctx context.Context, in refInput) (int, error) {
		info, _ := reprise.StepInfoFrom(ctx)
		memoSeen.Lock()
		memoSeen.ref[info.RunID] = append(memoSeen.ref[info.RunID], slices.Clone(in.Items))
		memoSeen.Unlock()
		in.Items[0] += 100
		if info.Attempt < 3 {
			return 0, errors.New("not yet")
		}
		return in.Items[0], nil
	}, reprise.WithPolicy(retry.Attempts(3, retry.None)))
	memoWorkflow = reprise.NewWorkflow("memo", func(ctx context.Context, note string) (int, error) {
		a, err := reprise.Step(ctx, plainStep, plainInput{Note: note, N: 1})
		if err != nil {
			return 0, err
		}
		b, err := reprise.Step(ctx, refStep, refInput{Items: []int{1, 2}})
		return a + b, err
	})
)

// TestRetriesAtOnceShareAPlainInput checks that the retries at once of a
// step whose input is a plain value reuse the first attempt's decoded
// input, and that every attempt still sees its input as scheduled, plain
// or not.
func TestRetriesAtOnceShareAPlainInput(t *testing.T) {
	t.Parallel() // the only test of memoSeen and memoDecodes
	memoSeen.Lock()
	memoSeen.plain, memoSeen.ref = map[string][]int{}, map[string][][]int{}
	memoSeen.Unlock()
	memoDecodes.Clear()
	env := newEnv(t, nil, memoWorkflow, plainStep, refStep)
	h, err := memoWorkflow.Start(t.Context(), env.Engine, "once")
	if err != nil {
		t.Fatal(err)
	}
	run := env.Wait(h.ID)
	if run.Status != reprise.RunCompleted {
		t.Fatalf("run %s: %v", run.Status, run.Error)
	}
	history, err := env.Store.HistoryList(t.Context(), &store.HistoryListParams{RunID: h.ID})
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, e := range history {
		if e.Type == store.EventAttemptStarted {
			started++
		}
	}
	if started != 6 {
		t.Fatalf("%d attempts started, want 6 (three of each step)", started)
	}
	memoSeen.Lock()
	defer memoSeen.Unlock()
	if got := memoSeen.plain["once"]; !slices.Equal(got, []int{1, 1, 1}) {
		t.Errorf("the plain step's attempts saw N %v, want 1 each time", got)
	}
	if got := memoSeen.ref[h.ID]; len(got) != 3 || slices.ContainsFunc(got, func(items []int) bool { return !slices.Equal(items, []int{1, 2}) }) {
		t.Errorf("the other step's attempts saw %v, want [1 2] each time", got)
	}
	decodes := 0
	if n, ok := memoDecodes.Load("once"); ok {
		decodes = *n.(*int)
	}
	if decodes != 1 {
		t.Errorf("the plain input was decoded %d times, want once for its three attempts", decodes)
	}
}

func TestPlainValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ   reflect.Type
		plain bool
	}{
		{reflect.TypeFor[int](), true},
		{reflect.TypeFor[string](), true},
		{reflect.TypeFor[[2]float64](), true},
		{reflect.TypeFor[plainInput](), true},
		{reflect.TypeFor[struct {
			A struct{ B [3]bool }
			C string
		}](), true},
		{reflect.TypeFor[refInput](), false},
		{reflect.TypeFor[*int](), false},
		{reflect.TypeFor[map[string]int](), false},
		{reflect.TypeFor[any](), false},
		{reflect.TypeFor[json.RawMessage](), false},
		{reflect.TypeFor[time.Time](), false}, // its *Location
		{reflect.TypeFor[[1][]int](), false},
		{reflect.TypeFor[func()](), false},
	}
	for _, tt := range tests {
		if got := reprise.PlainValue(tt.typ); got != tt.plain {
			t.Errorf("PlainValue(%v) = %v, want %v", tt.typ, got, tt.plain)
		}
	}
}
