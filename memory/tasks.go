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
	// failing says that an attempt of the step failed, of errorType: the
	// last one, or the one that failed the step for good.
	failing   bool
	errorType string
}

// matches reports whether the task is a failing step that p's Step and
// ErrorType select.
func (t *task) matches(p *store.RunListParams) bool {
	return t.failing && (p.Step == "" || t.Step == p.Step) && (p.ErrorType == "" || t.errorType == p.ErrorType)
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

// addTask keeps a copy of t as a new task, under the next id: ready from
// now on, or leased if t is.
func (s *Store) addTask(t *store.Task, now time.Time) *task {
	s.lastTaskID++
	kept := &task{Task: *t, readyAt: now}
	kept.ID, kept.Input, kept.Policy = s.lastTaskID, cloneJSON(t.Input), cloneJSON(t.Policy)
	s.tasks[kept.ID] = kept
	return kept
}

// leased returns the task whose attempt a write is about: its token must
// match, and its lease hold at now, or, for the reaper's write (lapsed),
// have lapsed; and it must not have ended (store.Ended). Anything else is
// stale: ErrLeaseLost.
func (s *Store) leased(id, token int64, attempt int, lapsed bool, now time.Time) (*task, error) {
	t := s.tasks[id]
	if t == nil || t.Token != token || t.LeaseUntil.IsZero() || t.LeaseUntil.After(now) == lapsed ||
		store.Ended(attempt, t.Attempt) {
		return nil, store.ErrLeaseLost
	}
	return t, nil
}

// report appends events about the task's attempt to its run, and returns
// them with the run's owner to tell.
func (s *Store) report(t *task, now time.Time, events ...store.Event) *store.Outcome {
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
	total := p.Total()
	if total == 0 {
		return nil, nil
	}
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	defer s.mu.Unlock()
	quota := make(map[string]int) // by step name
	for _, q := range p.Steps {
		if q.Limit > 0 {
			quota[q.Name] = max(quota[q.Name], q.Limit)
		}
	}
	var picked []*task
	for name, limit := range quota {
		ready := s.tasksWhere(func(t *task) bool { return t.Step == name && t.ready(now) }, byReady)
		picked = append(picked, ready[:min(len(ready), limit)]...)
	}
	slices.SortFunc(picked, byReady)
	picked = picked[:min(len(picked), total)]
	tasks := make([]*store.Task, len(picked))
	for i, t := range picked {
		t.ReadyAt = t.readyAt
		t.Start(p.Owner, p.LeaseTTL, store.Now{At: now})
		s.runs[t.RunID].appendEvents(now, t.AttemptStarted())
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
	t, err := s.leased(p.TaskID, p.Token, 0, false, now)
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
// removes the task.
func (s *Store) TaskComplete(ctx context.Context, p *store.TaskCompleteParams) (*store.Outcome, error) {
	if err := checkJSON("output", p.Output); err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	defer s.mu.Unlock()
	t, err := s.leased(p.TaskID, p.Token, p.Attempt, false, now)
	if err != nil {
		return nil, fmt.Errorf("complete task %d: %w", p.TaskID, err)
	}
	delete(s.tasks, t.ID)
	return s.report(t, now, p.Completed(&t.Task)), nil
}

// TaskFail records a failed attempt and the policy's decision, as
// TaskFailParams decides: the task is ready again at the retry time, or
// the step fails and the task is moved aside, for RunRedrive.
//
// With LeasesNext, the next attempt starts at once, as p decides (Next).
func (s *Store) TaskFail(ctx context.Context, p *store.TaskFailParams) (*store.Outcome, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	now, err := s.begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	defer s.mu.Unlock()
	t, err := s.leased(p.TaskID, p.Token, p.Attempt, p.Expired, now)
	if err != nil {
		return nil, fmt.Errorf("fail task %d: %w", p.TaskID, err)
	}
	events := p.Failed(nil, &t.Task, store.Now{At: now})
	t.failing, t.errorType = true, p.Error.Type
	switch {
	case !p.Retry: // the step is kept as it failed, for a redrive
		delete(s.tasks, t.ID)
		s.failed[t.at()] = t
		return s.report(t, now, events...), nil
	case p.LeasesNext():
		t.Task, _ = p.Next(&t.Task, store.Now{At: now})
		t.readyAt = now
		out := s.report(t, now, append(events, t.AttemptStarted())...)
		out.Next = t.out()
		return out, nil
	default:
		t.Lapses = p.Lapses(t.Lapses)
		t.Owner, t.LeaseUntil, t.readyAt = "", time.Time{}, events[0].RetryAt
		return s.report(t, now, events...), nil
	}
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
