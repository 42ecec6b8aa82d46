package postgres_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/postgres"
	"reprise/store"
)

// TestEventsOfAWriteShareARow checks the history's layout: the events one
// write appends to a run are one row (a step scheduled with its first
// attempt, an attempt failed with the next one), and read back as they
// were appended, also from the middle of a row.
func TestEventsOfAWriteShareARow(t *testing.T) {
	t.Parallel()
	dsn, schema := testSchema(t)
	s := openOn(t, dsn, &postgres.Options{Schema: schema})
	ctx := t.Context()

	lease, _, err := s.RunCreate(ctx, &store.RunCreateParams{ID: "r", Workflow: "wf", Owner: "e", LeaseTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	started := must[[]store.Event](t)(s.HistoryList(ctx, &store.HistoryListParams{RunID: "r"}))
	adv := must[*store.Advanced](t)(s.RunAdvance(ctx, &store.RunAdvanceParams{
		RunID: "r", Token: lease.Token, LeaseOwner: "e", LeaseTTL: time.Minute,
		Steps: []store.StepSpec{{Position: 1, Name: "charge", Input: json.RawMessage(`"x"`), IdempotencyKey: "k", Lease: true}},
	}))
	if len(adv.Tasks) != 1 {
		t.Fatalf("advance = %+v", adv)
	}
	task := adv.Tasks[0]
	o := must[*store.Outcome](t)(s.TaskFail(ctx, &store.TaskFailParams{
		TaskID: task.ID, Token: task.Token, Error: store.ErrorInfo{Type: "E", Message: "no"},
		Retry: true, LeaseNext: true, LeaseOwner: "e", LeaseTTL: time.Minute,
	}))
	appended := append(append(started, adv.Events...), o.Events...)
	if got := types(appended); got != "RunStarted StepScheduled AttemptStarted AttemptFailed AttemptStarted" {
		t.Fatalf("appended %s", got)
	}

	r, err := connect(t, dsn).Query(ctx, "SELECT seq FROM "+schema+".reprise_event WHERE run_id = 'r' ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pgx.CollectRows(r, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{1, 3, 5}; !reflect.DeepEqual(rows, want) {
		t.Errorf("rows end at seqs %v, want %v", rows, want)
	}
	for after := range int64(6) {
		got := must[[]store.Event](t)(s.HistoryList(ctx, &store.HistoryListParams{RunID: "r", AfterSeq: after}))
		if want := appended[after:]; !reflect.DeepEqual(got, want) {
			t.Errorf("history after %d:\n got %+v\nwant %+v", after, got, want)
		}
	}
}
