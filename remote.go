package reprise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"reprise/retry"
	"reprise/store"
)

// Remote steps run outside this engine: pull workers in any language claim
// their attempts through the engine (the HTTP API's /v1/tasks endpoints),
// under the same leases, tokens and policies as local steps.

// RegisterRemoteStep declares a step that remote workers run, with its
// default policy (nil for the engine's defaults). Registering a name again
// replaces its policy for steps scheduled afterwards.
func (e *Engine) RegisterRemoteStep(name string, policy *retry.Policy) error {
	if name == "" {
		return errors.New("register remote step: name is empty")
	}
	var cp *compiledPolicy
	if policy != nil {
		var err error
		if cp, err = compilePolicy(*policy); err != nil {
			return fmt.Errorf("register remote step %s: %w", name, err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.steps, name)
	e.remote[name] = &stepEntry{name: name, cfg: stepConfig{policy: cp}}
	return nil
}

// ClaimTasks leases up to limit ready tasks of the named steps to worker,
// starting an attempt of each. The store keeps each attempt
// (TaskAttemptList), so that a result the worker sends again after its
// task is done can be told from a stale one.
func (e *Engine) ClaimTasks(ctx context.Context, worker string, steps []string, limit int) ([]*store.Task, error) {
	if worker == "" || len(steps) == 0 || limit <= 0 {
		return nil, errors.New("claim tasks: need a worker, step names and a positive limit")
	}
	quotas := make([]store.StepQuota, len(steps))
	for i, s := range steps {
		quotas[i] = store.StepQuota{Name: s, Limit: limit}
	}
	tasks, err := e.store.TaskClaim(ctx, &store.TaskClaimParams{Owner: worker, Steps: quotas, Limit: limit, LeaseTTL: e.cfg.LeaseTTL,
		Keep: true})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	if e.cfg.Observer != nil {
		for _, t := range tasks {
			e.cfg.Observer.AttemptStarted(e.attemptInfo(t))
		}
	}
	e.mu.Lock()
	for _, t := range tasks {
		e.startedLocked(t.RunID)
	}
	e.mu.Unlock()
	if len(tasks) > 0 {
		e.kick() // the dispatcher watches the new leases
	}
	return tasks, nil
}

// CompleteTask records a remote attempt's result. A stale token or lapsed
// lease gives ErrLeaseLost and changes nothing.
func (e *Engine) CompleteTask(ctx context.Context, taskID, token int64, output json.RawMessage) error {
	if len(output) == 0 {
		output = json.RawMessage("null")
	}
	var t *store.Task
	if e.cfg.Observer != nil {
		// The observer needs the step and the attempt's start; a task
		// already gone is reported by the write below.
		t, _ = e.store.TaskGet(ctx, taskID)
	}
	o, err := e.store.TaskComplete(ctx, &store.TaskCompleteParams{TaskID: taskID, Token: token, Output: output})
	if err != nil {
		if t != nil && errors.Is(err, ErrLeaseLost) {
			e.observeStale(t)
		}
		return fmt.Errorf("complete task %d: %w", taskID, err)
	}
	if t != nil {
		e.observeOK(t)
	}
	e.deliver(o)
	return nil
}

// FailTask records a remote attempt's failure and applies the step's
// policy to it. err is typically a *retry.Error built from the worker's
// report. A stale token or lapsed lease gives ErrLeaseLost.
func (e *Engine) FailTask(ctx context.Context, taskID, token int64, err error) error {
	t, gerr := e.leasedTask(ctx, taskID, token)
	if gerr != nil {
		if e.cfg.Observer != nil && errors.Is(gerr, ErrLeaseLost) {
			e.cfg.Observer.StaleResultRefused(AttemptInfo{})
		}
		return gerr
	}
	pol, perr := e.decodePolicy(t.Policy)
	if perr != nil {
		err = retry.Permanent(perr)
	}
	p := e.decide(t, err, pol, false)
	o, serr := e.store.TaskFail(ctx, p)
	if serr != nil {
		if errors.Is(serr, ErrLeaseLost) {
			e.observeStale(t)
		}
		return fmt.Errorf("fail task %d: %w", taskID, serr)
	}
	if e.cfg.Observer != nil {
		e.observeFail(t, err, p)
	}
	e.deliver(o)
	return nil
}

// HeartbeatTask extends a remote attempt's lease.
func (e *Engine) HeartbeatTask(ctx context.Context, taskID, token int64) (store.Task, error) {
	until, err := e.store.TaskHeartbeat(ctx, &store.TaskHeartbeatParams{TaskID: taskID, Token: token, LeaseTTL: e.cfg.LeaseTTL})
	if err != nil {
		return store.Task{}, fmt.Errorf("heartbeat task %d: %w", taskID, err)
	}
	return store.Task{ID: taskID, Token: token, LeaseUntil: until}, nil
}

// leasedTask returns the task a remote worker holds; the decision needs its
// attempt, start times and policy.
func (e *Engine) leasedTask(ctx context.Context, taskID, token int64) (*store.Task, error) {
	t, err := e.store.TaskGet(ctx, taskID)
	if errors.Is(err, ErrNotFound) || (err == nil && t.Token != token) {
		return nil, fmt.Errorf("task %d: %w", taskID, ErrLeaseLost)
	}
	if err != nil {
		return nil, fmt.Errorf("task %d: %w", taskID, err)
	}
	return t, nil
}
