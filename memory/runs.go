package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"reprise/store"
)

// A run is a run's record, its workflow lease and its history.
type run struct {
	// Run is the record as RunGet returns it; UpdatedAt is kept as the
	// time of the last event.
	store.Run
	// parentPosition and parentExecution say where in its parent's
	// history the end of a child run is reported.
	parentPosition  int
	parentExecution int
	// owner holds the lease until leaseUntil, under token: each claim
	// takes a new token. A lapsed lease keeps its owner until another
	// claim; nobody holds a run whose owner is "" (leaseUntil zero).
	owner      string
	leaseUntil time.Time
	token      int64
	history    []store.Event
}

// out returns a copy of the run's record, for a caller.
func (r *run) out() *store.Run {
	c := r.Run
	c.Input, c.Output, c.Error = cloneJSON(c.Input), cloneJSON(c.Output), cloneError(c.Error)
	return &c
}

// byCreated orders runs oldest first, then by id.
func byCreated(a, b *run) int {
	return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), strings.Compare(a.ID, b.ID))
}

// RunCreate creates a run and appends its Started, or returns the
// existing run with the id, changed in nothing. With p.Owner it is leased
// to the owner (and running) under token 1; with p.First, the first
// advance is recorded in the same transition.
//
// A First with handed results (Completed) gives ErrLeaseLost, as in
// postgres: no task can be the new run's (sqlite ignores them).
func (s *Store) RunCreate(ctx context.Context, p *store.RunCreateParams) (store.RunLease, bool, error) {
	lease, created, err := s.runCreate(ctx, p)
	if err != nil {
		return store.RunLease{}, false, fmt.Errorf("create run %s: %w", p.ID, err)
	}
	return lease, created, nil
}

func (s *Store) runCreate(ctx context.Context, p *store.RunCreateParams) (store.RunLease, bool, error) {
	if err := p.Check(); err != nil {
		return store.RunLease{}, false, err
	}
	if err := checkJSON("input", p.Input); err != nil {
		return store.RunLease{}, false, err
	}
	var first *store.RunAdvanceParams
	if p.First != nil {
		fp := *p.First
		fp.RunID = p.ID
		first = &fp
		if err := checkAdvanceJSON(first); err != nil {
			return store.RunLease{}, false, fmt.Errorf("first advance: %w", err)
		}
	}
	now, err := s.begin(ctx)
	if err != nil {
		return store.RunLease{}, false, err
	}
	defer s.mu.Unlock()

	if r := s.runs[p.ID]; r != nil {
		return store.RunLease{Run: r.out()}, false, nil
	}
	r := &run{
		Run: store.Run{
			ID: p.ID, Workflow: p.Workflow, Status: store.RunPending, Input: cloneJSON(p.Input),
			Execution: 1, ParentID: p.ParentID, CreatedAt: now, TraceParent: p.TraceParent,
		},
		parentPosition: p.ParentPosition, parentExecution: p.ParentExecution,
	}
	if p.Owner != "" {
		r.Status, r.owner, r.leaseUntil, r.token = store.RunRunning, p.Owner, now.Add(p.LeaseTTL), 1
	}
	if first != nil {
		// Checked against the new run before it exists: a failed check
		// leaves no run behind.
		if err := s.checkAdvanceOf(r, first, now); err != nil {
			return store.RunLease{}, false, fmt.Errorf("first advance: %w", err)
		}
	}
	s.runs[r.ID] = r
	r.appendEvents(now, p.Started())
	lease := store.RunLease{Token: r.token}
	if first != nil {
		lease.Advanced = s.advance(r, first, now)
	}
	lease.Run = r.out()
	return lease, true, nil
}

// RunGet returns a run, or ErrNotFound.
func (s *Store) RunGet(ctx context.Context, id string) (*store.Run, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	defer s.mu.Unlock()
	r := s.runs[id]
	if r == nil {
		return nil, fmt.Errorf("get run %s: %w", id, store.ErrNotFound)
	}
	return r.out(), nil
}

// RunList lists runs newest first (by created time, then id descending),
// filtered by status and workflow, after the cursor p.Before: a Before
// that names no run lists none, as in both stores.
func (s *Store) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer s.mu.Unlock()
	var cursor *run
	if p.Before != "" {
		if cursor = s.runs[p.Before]; cursor == nil {
			return nil, nil
		}
	}
	var failing map[string]bool // the runs of the failing steps p selects, when it selects by them
	if p.Retrying || p.Step != "" || p.ErrorType != "" {
		failing = make(map[string]bool)
		for _, t := range s.tasks {
			if t.matches(p) && (!p.Retrying || t.LeaseUntil.IsZero()) {
				failing[t.RunID] = true
			}
		}
		for _, t := range s.failed {
			if !p.Retrying && t.matches(p) {
				failing[t.RunID] = true
			}
		}
	}
	var runs []*run
	for _, r := range s.runs {
		if (p.Status == "" || r.Status == p.Status) && (p.Workflow == "" || r.Workflow == p.Workflow) &&
			(cursor == nil || byCreated(r, cursor) < 0) &&
			(p.CreatedSince.IsZero() || !r.CreatedAt.Before(p.CreatedSince)) &&
			(p.CreatedUntil.IsZero() || r.CreatedAt.Before(p.CreatedUntil)) &&
			(!p.Retrying || r.Status == store.RunRunning) && (failing == nil || failing[r.ID]) {
			runs = append(runs, r)
		}
	}
	slices.SortFunc(runs, func(a, b *run) int { return byCreated(b, a) })
	runs = runs[:min(len(runs), limitOr100(p.Limit))]
	out := make([]*store.Run, len(runs))
	for i, r := range runs {
		out[i] = r.out()
	}
	return out, nil
}

// StatsGet counts the retrying runs and the ready tasks by step.
func (s *Store) StatsGet(ctx context.Context) (*store.Stats, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("get stats: %w", err)
	}
	defer s.mu.Unlock()
	stats := &store.Stats{Ready: map[string]int{}}
	retrying := map[string]bool{}
	for _, t := range s.tasks {
		if t.failing && t.LeaseUntil.IsZero() {
			retrying[t.RunID] = true
		}
		if t.ready(now) {
			stats.Ready[t.Step]++
		}
	}
	stats.Retrying = len(retrying)
	return stats, nil
}

// RunClaim leases up to p.Limit active runs whose lease is free or has
// lapsed (lease_until <= now), oldest first, each under a new token; a
// pending run is running from then on. LastSeq says how long each run's
// history is, as postgres says it (sqlite leaves it 0). It needs an
// owner, as postgres does.
func (s *Store) RunClaim(ctx context.Context, p *store.RunClaimParams) ([]store.RunLease, error) {
	if p.Owner == "" {
		return nil, errors.New("claim runs: owner is required")
	}
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim runs: %w", err)
	}
	defer s.mu.Unlock()
	var free []*run
	for _, r := range s.runs {
		// Workflows nil means any; empty, none.
		if !r.Status.Final() && !r.leaseUntil.After(now) && (p.Workflows == nil || slices.Contains(p.Workflows, r.Workflow)) {
			free = append(free, r)
		}
	}
	slices.SortFunc(free, byCreated)
	free = free[:min(len(free), max(p.Limit, 0))]
	leases := make([]store.RunLease, len(free))
	for i, r := range free {
		r.Status, r.owner, r.leaseUntil = store.RunRunning, p.Owner, now.Add(p.LeaseTTL)
		r.token++
		leases[i] = store.RunLease{Run: r.out(), Token: r.token, LastSeq: int64(len(r.history))}
	}
	return leases, nil
}

// RunRenew sets the leases of the owner's active runs, lapsed or not, to
// lapse p.LeaseTTL from now. It refuses what RunRenewParams' Check refuses
// (no owner, a LeaseTTL of zero or less).
func (s *Store) RunRenew(ctx context.Context, p *store.RunRenewParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("renew runs of %s: %w", p.Owner, err)
	}
	now, err := s.begin(ctx)
	if err != nil {
		return fmt.Errorf("renew runs of %s: %w", p.Owner, err)
	}
	defer s.mu.Unlock()
	for _, r := range s.runs {
		if r.owner == p.Owner && !r.Status.Final() {
			r.leaseUntil = now.Add(p.LeaseTTL)
		}
	}
	return nil
}

// RunRelease releases the leases of the owner's active runs, lapsed or
// not, for any engine to claim.
func (s *Store) RunRelease(ctx context.Context, p *store.RunReleaseParams) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("release runs of %s: %w", p.Owner, err)
	}
	if _, err := s.begin(ctx); err != nil {
		return fmt.Errorf("release runs of %s: %w", p.Owner, err)
	}
	defer s.mu.Unlock()
	for _, r := range s.runs {
		if r.owner == p.Owner && !r.Status.Final() {
			r.owner, r.leaseUntil = "", time.Time{}
		}
	}
	return nil
}

// RunCancel cancels an active run: appends RunCancelled, drops its work,
// cancels its active children (and theirs) and, for a child, tells its
// parent (ChildFailed, ChildStatus "cancelled").
func (s *Store) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Cancelled, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("cancel run %s: %w", p.ID, err)
	}
	defer s.mu.Unlock()
	r := s.runs[p.ID]
	switch {
	case r == nil:
		return nil, fmt.Errorf("cancel run %s: %w", p.ID, store.ErrNotFound)
	case r.Status.Final():
		return nil, fmt.Errorf("cancel run %s: %w", p.ID, store.ErrRunFinished)
	}
	below := s.cancelRun(r, now, p.Cancelled())
	if r.ParentID != "" {
		s.tellParent(r, store.ChildEnded(r.ID, r.parentPosition, store.RunCancelled, nil, nil), now)
	}
	return &store.Cancelled{Run: r.out(), Descendants: below}, nil
}

// RunRedrive reopens a failed run as its Redrive decides: the step's
// task, kept when it failed, is ready again with its attempt count and
// Base set to it, so that the policy starts afresh. The run is running
// again, without output or error, and unowned, for any engine to claim.
func (s *Store) RunRedrive(ctx context.Context, p *store.RunRedriveParams) (*store.Run, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("redrive run %s: %w", p.ID, err)
	}
	defer s.mu.Unlock()
	r := s.runs[p.ID]
	if r == nil {
		return nil, fmt.Errorf("redrive run %s: %w", p.ID, store.ErrNotFound)
	}
	redriven, err := p.Redrive(r.Status, func() (store.Event, error) {
		last, _ := store.LastStepEnd(r.history, r.Execution)
		return last, nil
	})
	if err != nil {
		return nil, fmt.Errorf("redrive run %s: %w", p.ID, err)
	}
	at := position{r.ID, r.Execution, redriven.Position}
	kept := s.failed[at]
	if kept == nil { // no task kept for the step: nothing to make ready again
		return nil, fmt.Errorf("redrive run %s: %w", p.ID, store.ErrNotRedrivable)
	}
	delete(s.failed, at)
	s.addTask(&store.Task{
		RunID: r.ID, Execution: kept.Execution, Position: kept.Position, Step: kept.Step, Input: kept.Input,
		IdempotencyKey: kept.IdempotencyKey, Policy: kept.Policy, Timeout: kept.Timeout,
		Attempt: kept.Attempt, Base: kept.Attempt, StepVersion: kept.StepVersion,
	}, now)
	r.Status, r.Output, r.Error = store.RunRunning, nil, nil
	r.owner, r.leaseUntil = "", time.Time{}
	r.appendEvents(now, redriven)
	return r.out(), nil
}

// SignalSend appends SignalReceived to an active run's current execution.
func (s *Store) SignalSend(ctx context.Context, p *store.SignalSendParams) (*store.Outcome, error) {
	if err := checkJSON("payload", p.Payload); err != nil {
		return nil, fmt.Errorf("signal run %s: %w", p.RunID, err)
	}
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("signal run %s: %w", p.RunID, err)
	}
	defer s.mu.Unlock()
	r := s.runs[p.RunID]
	switch {
	case r == nil:
		return nil, fmt.Errorf("signal run %s: %w", p.RunID, store.ErrNotFound)
	case r.Status.Final():
		return nil, fmt.Errorf("signal run %s: %w", p.RunID, store.ErrRunFinished)
	}
	events := r.appendEvents(now, p.Received())
	return &store.Outcome{RunID: r.ID, Owner: r.owner, Events: events}, nil
}
