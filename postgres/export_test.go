package postgres

import (
	"context"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"reprise/postgres/internal/pgtx"
	"reprise/store"
)

// Merged returns how many statements s sent for several transitions at
// once (package pgtx).
func Merged(s *Store) int64 { return s.committer.Merged() }

// QueuedTransitions returns how many transitions wait for a group.
func QueuedTransitions(s *Store) int { return s.committer.Queued() }

// Histories reads the histories of ps in one statement, as HistoryList
// calls that arrive together are read, and returns each one's events and
// error.
func Histories(ctx context.Context, s *Store, ps []store.HistoryListParams) ([][]store.Event, []error) {
	reads := make([]*historyRead, len(ps))
	for i := range ps {
		reads[i] = &historyRead{p: &ps[i]}
	}
	s.histories(ctx, reads)
	events := make([][]store.Event, len(ps))
	errs := make([]error, len(ps))
	for i, r := range reads {
		events[i], errs[i] = r.events, r.err
	}
	return events, errs
}

// ClaimPlan returns the plan RunClaim's statement has on one of s's pooled
// connections, as EXPLAIN prints it: the generic plan a prepared statement
// keeps for the connection's life.
func ClaimPlan(ctx context.Context, s *Store) (string, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `PREPARE probe_claim(timestamptz, text, text[], int, interval) AS `+claimRunsSQL); err != nil {
		return "", err
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `DEALLOCATE probe_claim`) }()
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE probe_claim(NULL, 'probe', NULL, 10, '1 minute')`)
	if err != nil {
		return "", err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// TaskRowVersion returns the transaction that last wrote the task's row
// (its xmin): the same before and after a write that left the row alone.
func TaskRowVersion(ctx context.Context, s *Store, id int64) (string, error) {
	var xmin string
	err := s.pool.QueryRow(ctx, `SELECT xmin::text FROM reprise_task WHERE id = $1`, id).Scan(&xmin)
	return xmin, err
}

// EncodesArraysItself reports whether s's pooled connections write the
// arrays of the statements they send with package pgtx's encoder
// (pgtx.RegisterArrays): whether the codec of text[] is the one it
// registers.
func EncodesArraysItself(ctx context.Context, s *Store) (bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Release()
	want := pgtype.NewMap()
	pgtx.RegisterArrays(want)
	w, _ := want.TypeForOID(pgtype.TextArrayOID)
	got, ok := conn.Conn().TypeMap().TypeForOID(pgtype.TextArrayOID)
	return ok && reflect.TypeOf(got.Codec) == reflect.TypeOf(w.Codec), nil
}
