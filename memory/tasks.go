package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"reprise/store"
)

// A task is a step's place in the queue: ready while its LeaseUntil is
// zero (from readyAt on), leased while it is set, lapsed or not.
type task struct {
	// Task is the task as TaskGet returns it. Owner is "" while it is
	// ready; StartedAt stays the last attempt's.
	store.Task
	readyAt time.Time
}

// at is where the task is in its run.
func (t *task) at() position { return position{t.RunID, t.Execution, t.Position} }

// ready reports whether the task can be claimed at now.
func (t *task) ready(now time.Time) bool {
	return t.LeaseUntil.IsZero() && !t.readyAt.After(now)
}

// out returns a copy of the task, for a caller.
func (t *task) out() *store.Task {
	c := t.Task
	c.Input, c.Policy = cloneJSON(c.Input), cloneJSON(c.Policy)
	return &c
}

// byReady orders tasks by ready time, then id.
func byReady(a, b *task) int {
	return cmp.Or(a.readyAt.Compare(b.readyAt), cmp.Compare(a.ID, b.ID))
}

// tasksWhere returns the tasks keep keeps, ordered by order.
func (s *Store) tasksWhere(keep func(*task) bool, order func(a, b *task) int) []*task {
	var tasks []*task
	for _, t := range s.tasks {
		if keep(t) {
			tasks = append(tasks, t)
		}
	}
	slices.SortFunc(tasks, order)
	return tasks
}

// schedule makes a step of run r a ready task.
func (s *Store) schedule(r *run, st *store.StepSpec, now time.Time) *task {
	s.lastTaskID++
	t := &task{
		Task: store.Task{
			ID: s.lastTaskID, RunID: r.ID, Execution: r.Execution, Position: st.Position, Step: st.Name,
			Input: cloneJSON(st.Input), IdempotencyKey: st.IdempotencyKey, Policy: cloneJSON(st.Policy),
			Timeout: st.Timeout, StepVersion: st.StepVersion,
		},
		readyAt: now,
	}
	s.tasks[t.ID] = t
	return t
}

// start starts the task's next attempt under a new token, leased to owner
// for ttl cut to the attempt's timeout, and returns its AttemptStarted,
// for the caller to append. A claim, a step leased as it is scheduled and
// a retry leased at once all start an attempt so.
func (t *task) start(owner string, ttl time.Duration, now time.Time) store.Event {
	t.Attempt++
	t.Token++
	t.Owner, t.StartedAt = owner, now
	if t.FirstStartedAt.IsZero() {
		t.FirstStartedAt = now
	}
	if t.Timeout > 0 && t.Timeout < ttl {
		ttl = t.Timeout
	}
	t.LeaseUntil = now.Add(ttl)
	return store.Event{
		Type: store.EventAttemptStarted, Execution: t.Execution, Position: t.Position, Step: t.Step,
		Attempt: t.Attempt, Worker: owner, LeaseUntil: t.LeaseUntil, IdempotencyKey: t.IdempotencyKey,
	}
}

// leased returns the task whose attempt a write is about: its token must
// match, and its lease hold at now, or, for the reaper's write (lapsed),
// have lapsed. Anything else is stale: ErrLeaseLost.
func (s *Store) leased(id, token int64, lapsed bool, now time.Time) (*task, error) {
	t := s.tasks[id]
	if t == nil || t.Token != token || t.LeaseUntil.IsZero() || t.LeaseUntil.After(now) == lapsed {
		return nil, store.ErrLeaseLost
	}
	return t, nil
}

// report appends events about the task's current attempt to its run, and
// returns them with the run's owner to tell.
func (s *Store) report(t *task, now time.Time, events ...store.Event) *store.Outcome {
	for i := range events {
		e := &events[i]
		e.Execution, e.Position, e.Step, e.Attempt = t.Execution, t.Position, t.Step, t.Attempt
	}
	r := s.runs[t.RunID]
	return &store.Outcome{RunID: r.ID, Owner: r.owner, Events: r.appendEvents(now, events...)}
}

// TaskClaim leases the oldest ready tasks (ready time, then id), up to
// each step's quota and the total limit, each under a new token, and
// appends AttemptStarted for each, in the order returned. It needs an
// owner, as postgres does.
func (s *Store) TaskClaim(ctx context.Context, p *store.TaskClaimParams) ([]*store.Task, error) {
	if p.Owner == "" {
		return nil, errors.New("claim tasks: owner is required")
	}
	quota := make(map[string]int) // by step name
	total := 0
	for _, q := range p.Steps {
		if q.Limit > 0 {
			quota[q.Name] = max(quota[q.Name], q.Limit)
			total += q.Limit
		}
	}
	if p.Limit > 0 {
		total = min(total, p.Limit)
	}
	if total == 0 {
		return nil, nil
	}
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	defer s.mu.Unlock()
	var picked []*task
	for name, limit := range quota {
		ready := s.tasksWhere(func(t *task) bool { return t.Step == name && t.ready(now) }, byReady)
		picked = append(picked, ready[:min(len(ready), limit)]...)
	}
	slices.SortFunc(picked, byReady)
	picked = picked[:min(len(picked), total)]
	tasks := make([]*store.Task, len(picked))
	for i, t := range picked {
		s.runs[t.RunID].appendEvents(now, t.start(p.Owner, p.LeaseTTL, now))
		if p.Keep {
			s.attempts[t.ID] = append(s.attempts[t.ID], store.TaskAttempt{
				TaskID: t.ID, Token: t.Token, RunID: t.RunID, Execution: t.Execution, Position: t.Position,
				Attempt: t.Attempt,
			})
		}
		tasks[i] = t.out()
	}
	return tasks, nil
}

// TaskGet returns a task as it stands, or ErrNotFound once it is done or
// dropped.
func (s *Store) TaskGet(ctx context.Context, id int64) (*store.Task, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("get task %d: %w", id, err)
	}
	defer s.mu.Unlock()
	t := s.tasks[id]
	if t == nil {
		return nil, fmt.Errorf("get task %d: %w", id, store.ErrNotFound)
	}
	return t.out(), nil
}

// TaskAttemptList returns the kept attempts of a task, by token. They
// stay as long as the store.
func (s *Store) TaskAttemptList(ctx context.Context, p *store.TaskAttemptListParams) ([]store.TaskAttempt, error) {
	if _, err := s.begin(ctx); err != nil {
		return nil, fmt.Errorf("list attempts of task %d: %w", p.TaskID, err)
	}
	defer s.mu.Unlock()
	return slices.Clone(s.attempts[p.TaskID]), nil // tokens only grow: in token order
}

// TaskHeartbeat extends a live lease to p.LeaseTTL from now, never past
// the attempt's timeout.
func (s *Store) TaskHeartbeat(ctx context.Context, p *store.TaskHeartbeatParams) (time.Time, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("heartbeat task %d: %w", p.TaskID, err)
	}
	defer s.mu.Unlock()
	t, err := s.leased(p.TaskID, p.Token, false, now)
	if err != nil {
		return time.Time{}, fmt.Errorf("heartbeat task %d: %w", p.TaskID, err)
	}
	t.LeaseUntil = now.Add(p.LeaseTTL)
	if end := t.StartedAt.Add(t.Timeout); t.Timeout > 0 && end.Before(t.LeaseUntil) {
		t.LeaseUntil = end
	}
	return t.LeaseUntil, nil
}

// TaskComplete records an attempt's result: appends StepCompleted and
// removes the task. p.Attempt is not needed: this store never starts an
// attempt in place (see TaskFail), so the task's is the truth.
func (s *Store) TaskComplete(ctx context.Context, p *store.TaskCompleteParams) (*store.Outcome, error) {
	if err := checkJSON("output", p.Output); err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	defer s.mu.Unlock()
	t, err := s.leased(p.TaskID, p.Token, false, now)
	if err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	delete(s.tasks, t.ID)
	return s.report(t, now, store.Event{Type: store.EventStepCompleted, Output: p.Output}), nil
}

// TaskFail records a failed attempt and the policy's decision: appends
// AttemptFailed, then makes the task ready again at the retry time, or
// appends StepFailed and moves the task aside, for RunRedrive. A lapsed
// lease (p.Expired) counts towards the task's Lapses; any other result
// resets them.
//
// With p.LeaseNext, a retry at once starts the next attempt as a claim
// would, under a new token and a new lease (AttemptStarted follows), as
// sqlite does. It never keeps the lease before, nor starts the attempt in
// place under the same token, as postgres may (TaskFailParams.LeaseNext).
// LeaseNext needs LeaseOwner and LeaseTTL even when a delay or a failure
// for good makes it moot, as in postgres (sqlite checks them only when it
// leases).
func (s *Store) TaskFail(ctx context.Context, p *store.TaskFailParams) (*store.Outcome, error) {
	if p.LeaseNext && (p.LeaseOwner == "" || p.LeaseTTL <= 0) {
		return nil, fmt.Errorf("fail task %d: leasing the next attempt needs LeaseOwner and LeaseTTL", p.TaskID)
	}
	leaseNext := p.LeaseNext && p.Retry && p.Delay == 0
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	defer s.mu.Unlock()
	t, err := s.leased(p.TaskID, p.Token, p.Expired, now)
	if err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	failed := store.Event{Type: store.EventAttemptFailed, Error: &p.Error, Rule: p.Rule}
	if !p.Retry {
		failed.Reason = p.Reason
		delete(s.tasks, t.ID)
		s.failed[t.at()] = t
		return s.report(t, now, failed, store.Event{Type: store.EventStepFailed, Error: &p.Error, Reason: p.Reason}), nil
	}
	failed.Delay, failed.RetryAt = p.Delay, now.Add(p.Delay)
	out := s.report(t, now, failed)
	if p.Expired {
		t.Lapses++
	} else {
		t.Lapses = 0
	}
	if leaseNext {
		t.readyAt = now
		out.Events = append(out.Events, s.runs[t.RunID].appendEvents(now, t.start(p.LeaseOwner, p.LeaseTTL, now))...)
		out.Next = t.out()
		return out, nil
	}
	t.Owner, t.LeaseUntil, t.readyAt = "", time.Time{}, failed.RetryAt
	return out, nil
}

// TaskListExpired returns up to p.Limit (zero: 100) leased tasks whose
// lease has lapsed, earliest first.
func (s *Store) TaskListExpired(ctx context.Context, p *store.TaskListExpiredParams) ([]*store.Task, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("list expired tasks: %w", err)
	}
	defer s.mu.Unlock()
	expired := s.tasksWhere(func(t *task) bool { return !t.LeaseUntil.IsZero() && !t.LeaseUntil.After(now) },
		func(a, b *task) int { return cmp.Or(a.LeaseUntil.Compare(b.LeaseUntil), cmp.Compare(a.ID, b.ID)) })
	expired = expired[:min(len(expired), limitOr100(p.Limit))]
	out := make([]*store.Task, len(expired))
	for i, t := range expired {
		out[i] = t.out()
	}
	return out, nil
}

// TaskListWaiting returns the tasks ready for at least p.ReadyFor that no
// one holds, oldest ready first, of one run or of all.
func (s *Store) TaskListWaiting(ctx context.Context, p *store.TaskListWaitingParams) ([]store.WaitingTask, error) {
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("list waiting tasks: %w", err)
	}
	defer s.mu.Unlock()
	since := now.Add(-max(p.ReadyFor, 0))
	waiting := s.tasksWhere(func(t *task) bool { return (p.RunID == "" || t.RunID == p.RunID) && t.ready(since) }, byReady)
	waiting = waiting[:min(len(waiting), limitOr100(p.Limit))]
	out := make([]store.WaitingTask, len(waiting))
	for i, t := range waiting {
		out[i] = store.WaitingTask{TaskID: t.ID, RunID: t.RunID, Position: t.Position, Step: t.Step, ReadyAt: t.readyAt}
	}
	return out, nil
}

// limitOr100 is a list's limit: zero or less means 100.
func limitOr100(limit int) int {
	if limit <= 0 {
		return 100
	}
	return limit
}
