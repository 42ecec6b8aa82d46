package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Errors a Store returns. Match them with errors.Is.
var (
	// ErrNotFound: no run or task with that id.
	ErrNotFound = errors.New("not found")
	// ErrLeaseLost: the fencing token is stale, or the lease has lapsed.
	// The write changed nothing.
	ErrLeaseLost = errors.New("lease lost")
	// ErrRunFinished: the run is completed, failed or cancelled. The write
	// changed nothing.
	ErrRunFinished = errors.New("run finished")
	// ErrSchemaTooNew: the database was migrated by a newer reprise.
	ErrSchemaTooNew = errors.New("database schema is newer than this binary")
	// ErrNotRedrivable: the run did not fail because a step failed.
	ErrNotRedrivable = errors.New("run cannot be redriven")
	// ErrEngineLive: a live engine already runs under that worker id.
	ErrEngineLive = errors.New("a live engine already runs under this worker id")
)

// RunStatus is where a run is in its life.
type RunStatus string

const (
	// RunPending: created, and no engine has taken it up yet.
	RunPending RunStatus = "pending"
	// RunRunning: an engine has taken the run up (claimed it, or created
	// it leased to itself) and it has not finished. The status changes
	// with the lease that starts the workflow rather than with its first
	// step, so that the first advance leaves the run's indexed columns
	// as they are (see docs/postgres.md).
	RunRunning RunStatus = "running"
	// RunCompleted: the workflow returned a result.
	RunCompleted RunStatus = "completed"
	// RunFailed: the workflow returned an error, panicked or was
	// nondeterministic.
	RunFailed RunStatus = "failed"
	// RunCancelled: the run was cancelled.
	RunCancelled RunStatus = "cancelled"
)

// Final reports whether s is an end state.
func (s RunStatus) Final() bool {
	return s == RunCompleted || s == RunFailed || s == RunCancelled
}

// A Run is one execution of a workflow.
type Run struct {
	ID        string          `json:"id"`
	Workflow  string          `json:"workflow"`
	Status    RunStatus       `json:"status"`
	Input     json.RawMessage `json:"input"`
	Output    json.RawMessage `json:"output,omitempty"`
	Error     *ErrorInfo      `json:"error,omitempty"`
	Execution int             `json:"execution"`
	// ParentID is the run that started this one as a child, if any.
	ParentID  string    `json:"parent_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Waiting is the step the run waits for that no worker has claimed
	// for long, when the read looked (Engine.RunWaiting; GET
	// /v1/runs/{id} and reprise show do). Stores leave it nil.
	Waiting *Waiting `json:"waiting,omitempty"`
	// TraceParent is the run's trace context, a W3C traceparent kept
	// with the run so that every process that executes it continues one
	// trace (package otel says what it holds); empty for a run started
	// without one while no tracer was set.
	TraceParent string `json:"traceparent,omitempty"`
}

// A Task is a step's row in the durable queue: one per step, not per
// attempt. Claiming it starts an attempt under a lease.
type Task struct {
	ID        int64
	RunID     string
	Execution int
	Position  int
	Step      string
	Input     json.RawMessage
	// IdempotencyKey is fixed when the step is scheduled.
	IdempotencyKey string
	// Policy is the step's retry.Policy, JSON-encoded, as scheduled.
	Policy json.RawMessage
	// Timeout limits each attempt; zero means none.
	Timeout time.Duration
	// Attempt is the number of the attempt this claim started, from 1.
	Attempt int
	// Token fences this attempt: writes with another token are rejected.
	Token int64
	// Owner holds the lease: an engine's worker id, or a pull worker's
	// name; empty while the task is ready.
	Owner string
	// LeaseUntil is when the lease lapses unless renewed.
	LeaseUntil time.Time
	// StartedAt is when this attempt was claimed.
	StartedAt time.Time
	// FirstStartedAt is when the step's first attempt was claimed.
	FirstStartedAt time.Time
	// ReadyAt is when the attempt a claim started was due: when its step
	// was scheduled or redriven, or when its retry came due; StartedAt
	// for an attempt started at once (Start). Only the tasks that start
	// an attempt carry it (TaskClaim, RunAdvance's Tasks, Outcome.Next).
	ReadyAt time.Time
	// Base is the attempt number a redrive restarted the budget from: the
	// policy sees attempt Attempt-Base. Zero without a redrive.
	Base int
	// Lapses counts the leases in a row that lapsed without a result
	// (TaskFail with Expired); any other result resets it.
	Lapses int
	// StepVersion is StepSpec.StepVersion, as scheduled.
	StepVersion int
}

// Store is the durable state of the engine: runs, their histories, the task
// queue and the timers. Every method is one transaction: a transition and
// the history events it appends commit together or not at all.
//
// Times are the store's: it stamps events and computes ready and lease times
// from its own clock (an option of each driver), from the durations given.
// What a transition appends to the history, and the rows it makes or
// drops, is decided by the rules of this package (advance.go, attempt.go,
// child.go, redrive.go), which every store calls; a store persists what
// they decide. A store's behaviour is pinned by the storetest suite, which
// every driver must pass.
type Store interface {
	// RunCreate creates a run and appends RunStarted (Started); with an
	// Owner, the new run is leased to it (and running), and with First as
	// well, First is recorded as RunAdvance would record it, in the same
	// transaction (the lease's Advanced says what it did). If a run with
	// the id exists, it returns that run (Token 0) and created=false, and
	// changes nothing.
	RunCreate(ctx context.Context, p *RunCreateParams) (lease RunLease, created bool, err error)
	// RunGet returns a run, or ErrNotFound.
	RunGet(ctx context.Context, id string) (*Run, error)
	// RunList lists runs, newest first.
	RunList(ctx context.Context, p *RunListParams) ([]*Run, error)
	// StatsGet counts what waits in the queue, for metrics: a read of
	// the indexes RunList and TaskClaim use.
	StatsGet(ctx context.Context) (*Stats, error)
	// RunClaim leases active runs (pending or running) that no live owner
	// holds, so that the caller executes their workflow code; a pending run
	// is running from then on.
	RunClaim(ctx context.Context, p *RunClaimParams) ([]RunLease, error)
	// RunRenew sets the leases of all active runs the owner holds to lapse
	// LeaseTTL from now. A LeaseTTL of zero or less is refused (see
	// RunRenewParams' Check) and changes nothing: RunRelease releases.
	RunRenew(ctx context.Context, p *RunRenewParams) error
	// RunRelease releases the leases of all active runs the owner holds,
	// so that any engine may claim them at once: an engine shutting down,
	// or the caller of EngineStart for an engine that is gone.
	RunRelease(ctx context.Context, p *RunReleaseParams) error
	// RunAdvance records what the workflow did since its last advance (see
	// RunAdvanceParams: Plan, Stamp, CancelRequests, and RunFinish's
	// rules). It checks the run's lease token (ErrLeaseLost) and that the
	// run is active (ErrRunFinished).
	RunAdvance(ctx context.Context, p *RunAdvanceParams) (*Advanced, error)
	// RunCancel cancels an active run: appends RunCancelled (Cancelled),
	// drops its tasks and timers, so that results of running attempts are
	// rejected, cancels its active descendants (ParentEnded) and tells its
	// parent (ChildEnded). A finished run gives ErrRunFinished.
	RunCancel(ctx context.Context, p *RunCancelParams) (*Cancelled, error)
	// RunRedrive reopens a failed run as RunRedriveParams.Redrive decides:
	// the failed step's task is made ready again with a fresh attempt
	// budget (attempt numbers go on; Task.Base is set to the last attempt),
	// and the run is running again and unowned.
	RunRedrive(ctx context.Context, p *RunRedriveParams) (*Run, error)
	// SignalSend appends SignalReceived (Received) to an active run's
	// current execution. A finished run gives ErrRunFinished.
	SignalSend(ctx context.Context, p *SignalSendParams) (*Outcome, error)
	// HistoryList returns a run's events in order, ErrNotFound for no run.
	HistoryList(ctx context.Context, p *HistoryListParams) ([]Event, error)

	// TaskClaim leases up to the given number of ready tasks per step name
	// (Total), oldest ready time first, and starts an attempt of each
	// (Task.Start, AttemptStarted). A task is never leased to two claimers
	// at once.
	TaskClaim(ctx context.Context, p *TaskClaimParams) ([]*Task, error)
	// TaskGet returns a task as it stands (lease fields included), or
	// ErrNotFound once it is done or dropped.
	TaskGet(ctx context.Context, id int64) (*Task, error)
	// TaskAttemptList returns the attempts of a task that claims with Keep
	// started, by token, whether the task still stands or not; none for a
	// task no such claim took, or no task. They are kept as long as the
	// history is.
	TaskAttemptList(ctx context.Context, p *TaskAttemptListParams) ([]TaskAttempt, error)
	// TaskHeartbeat extends a lease, never past the attempt's timeout.
	TaskHeartbeat(ctx context.Context, p *TaskHeartbeatParams) (time.Time, error)
	// TaskComplete records an attempt's result: appends StepCompleted
	// (Completed) and removes the task. Stale token or lapsed lease:
	// ErrLeaseLost.
	TaskComplete(ctx context.Context, p *TaskCompleteParams) (*Outcome, error)
	// TaskFail records a failed attempt and the policy's decision (Failed):
	// makes the task ready again at the retry's time (counting its Lapses),
	// or moves it aside, as it was scheduled, for RunRedrive.
	TaskFail(ctx context.Context, p *TaskFailParams) (*Outcome, error)
	// TaskListExpired returns leased tasks whose lease has lapsed.
	TaskListExpired(ctx context.Context, p *TaskListExpiredParams) ([]*Task, error)
	// TaskListWaiting returns the tasks that wait for a worker: ready, no
	// one holding them, for at least p.ReadyFor, oldest ready first (ties
	// by id). A read, for reports; the claim path does not use it.
	TaskListWaiting(ctx context.Context, p *TaskListWaitingParams) ([]WaitingTask, error)
	// TaskRelease cuts the leases of the tasks leased to an engine that
	// is gone to lapse now, so that the reaper fails their attempts at
	// once (as lost, not timed out) rather than when they would lapse. It
	// returns how many it cut.
	TaskRelease(ctx context.Context, p *TaskReleaseParams) (int, error)

	// EngineStart records that an engine runs under p.ID from now on,
	// for as long as this store stays open or until EngineStop. If a
	// live engine holds that id already (in this process or, for a
	// shared database, in another), it gives ErrEngineLive and changes
	// nothing. An id recorded by an engine that is gone (it crashed) is
	// taken over: the caller then releases what that engine held.
	EngineStart(ctx context.Context, p *EngineStartParams) error
	// EngineStop forgets an engine: a clean stop, or one that EngineGone
	// listed once its work is released.
	EngineStop(ctx context.Context, id string) error
	// EngineGone lists the engines recorded by EngineStart that are no
	// longer live: their process died without EngineStop.
	EngineGone(ctx context.Context) ([]string, error)

	// TimerFire fires due timers: appends TimerFired for each.
	TimerFire(ctx context.Context, p *TimerFireParams) ([]*Outcome, error)
	// NextWake returns when something next becomes due: the earliest ready
	// time of a task of the given step names, lease expiry and timer.
	NextWake(ctx context.Context, p *NextWakeParams) (Wake, error)

	// StepDefStore keeps the steps defined as data (stepdef.go).
	StepDefStore
	// FlowStore keeps the declarative flows, versioned (flow.go).
	FlowStore

	Close() error
}

// RunCreateParams creates a run.
type RunCreateParams struct {
	// ParentID, ParentPosition and ParentExecution make the run a child:
	// its end is appended to the parent (ChildEnded, while ParentWaits)
	// and the parent's owner told by a notice; the parent's end cancels it
	// (ParentEnded). RunAdvance's Children set these; ParentID is in Run
	// too.
	ParentID        string
	ParentPosition  int
	ParentExecution int

	// ID is the run's id; the caller chooses it (the engine generates one
	// when the user does not).
	ID       string
	Workflow string
	Input    json.RawMessage
	// TraceParent is stored as Run.TraceParent.
	TraceParent string
	// Owner, when set, leases the new run to that engine for LeaseTTL.
	Owner    string
	LeaseTTL time.Duration
	// First is the workflow's first advance, for an engine that ran the
	// new run's code up to its first wait before creating it: one
	// transaction instead of two. It needs Owner; its RunID and Token are
	// ignored.
	First *RunAdvanceParams
}

// RunListParams filters and pages RunList.
type RunListParams struct {
	// Status and Workflow filter when set.
	Status   RunStatus
	Workflow string
	// Retrying lists only running runs with a step that waits for its
	// retry: an attempt of it failed, the policy retries it, and no
	// attempt holds a lease yet (its backoff runs, or it is due and
	// unclaimed).
	Retrying bool
	// Step and ErrorType, when set, list only runs with a failing step of
	// that name, whose last failed attempt had that error type: a step
	// that waits for its retry or runs it, or that failed for good and is
	// kept for a redrive. One step must match both, and Retrying too.
	Step      string
	ErrorType string
	// CreatedSince and CreatedUntil, when set, list only runs created at
	// or after CreatedSince and before CreatedUntil.
	CreatedSince time.Time
	CreatedUntil time.Time
	// Before, when set, lists only runs created before the run with this id
	// (a page cursor: pass the last id of the previous page).
	Before string
	// Limit caps the page; zero means 100.
	Limit int
}

// Stats is what StatsGet counts.
type Stats struct {
	// Retrying counts the runs RunList lists with Retrying.
	Retrying int
	// Ready counts the tasks that are ready now and that no one holds,
	// by step name; a step with none is absent.
	Ready map[string]int
}

// RunClaimParams leases runs for workflow execution.
type RunClaimParams struct {
	Owner string
	// Workflows limits the claim to runs of these workflows, the ones the
	// caller can execute; nil means any.
	Workflows []string
	Limit     int
	LeaseTTL  time.Duration
}

// A RunLease is a claimed run: the caller may advance it with Token.
type RunLease struct {
	Run   *Run
	Token int64
	// LastSeq is the seq of the run's newest event when RunClaim leased
	// it (zero from RunCreate). A run claimed with LastSeq 1 has only
	// RunStarted in its history: its engine reads none.
	LastSeq int64
	// Advanced is what RunCreateParams.First recorded; nil without one.
	Advanced *Advanced
}

// RunRenewParams renews an owner's run leases.
type RunRenewParams struct {
	// Owner is the worker id that holds the leases.
	Owner string
	// LeaseTTL is how long from now the leases last; it must be positive.
	LeaseTTL time.Duration
}

// RunReleaseParams releases an owner's run leases.
type RunReleaseParams struct {
	// Owner is the worker id that holds the leases.
	Owner string
}

// Advanced is what RunAdvance did.
type Advanced struct {
	// Events are the events appended to the run, with Seq and At.
	Events []Event
	// Tasks are the steps leased at once (StepSpec.Lease), each with its
	// first attempt started.
	Tasks []*Task
	// Parent is what the end of a child run appended to its parent, or nil.
	Parent *Outcome
	// Descendants are the active runs below the run that its end (or
	// continue-as-new) cancelled, as they are now.
	Descendants []*Run
}

// Cancelled is what RunCancel did.
type Cancelled struct {
	// Run is the run cancelled, as it is now.
	Run *Run
	// Descendants are the active runs below it, cancelled with it.
	Descendants []*Run
}

// RunAdvanceParams records a workflow's progress. Its events go in this
// order: the Completed results (StepCompleted), what the workflow
// scheduled in position order (Plan), its cancels (CancelRequests), and
// the run's end, if Finish is set (Ended, Continued).
type RunAdvanceParams struct {
	RunID string
	Token int64
	// Completed are results of this run's attempts that the engine handed
	// to the workflow before recording them: each is recorded as
	// TaskComplete would record it. If one's token is stale, its lease has
	// lapsed or its task is not this run's, the whole advance fails with
	// ErrLeaseLost and changes nothing.
	Completed []TaskCompleteParams
	// LeaseOwner and LeaseTTL lease the steps marked Lease at once, as
	// TaskClaim would: the engine that schedules a step it can run skips a
	// round trip through the queue.
	LeaseOwner string
	LeaseTTL   time.Duration
	// Steps become StepScheduled events and ready tasks, Timers
	// TimerScheduled events and pending timers, Markers VersionMarker
	// events, Children ChildStarted events and child runs (ChildRun).
	Steps    []StepSpec
	Timers   []TimerSpec
	Markers  []MarkerSpec
	Children []ChildSpec
	// Cancels lists positions of steps and timers the workflow no longer
	// waits for: their tasks and timers are dropped (CancelRequests).
	Cancels []int
	// Finish, when set, ends the run (Ended), or its execution, and drops
	// its remaining tasks and timers, and its failed steps unless it fails
	// (DropsFailedSteps); its active children are cancelled (ParentEnded).
	Finish *RunFinish
}

// MarkerSpec records a version decision.
type MarkerSpec struct {
	Position int
	// Name is the change id.
	Name    string
	Version int
}

// ChildSpec starts a child run.
type ChildSpec struct {
	Position int
	// ID is the child run's id.
	ID       string
	Workflow string
	Input    json.RawMessage
	// TraceParent is the child run's trace context, stored as its
	// Run.TraceParent: empty for none.
	TraceParent string
}

// StepSpec is a step the workflow scheduled.
type StepSpec struct {
	Position       int
	Name           string
	Input          json.RawMessage
	IdempotencyKey string
	// PolicyText is the canonical text form, for the history.
	PolicyText string
	// Policy is the JSON-encoded retry.Policy, for deciding on failures.
	Policy  json.RawMessage
	Timeout time.Duration
	// StepVersion is the version of the stored step definition the step
	// is scheduled under (StepDefStore), 0 for none. The task keeps it, a
	// redrive too, and StepScheduled records it as Version.
	StepVersion int
	// Lease leases the new task to RunAdvanceParams.LeaseOwner at once:
	// attempt 1 starts (Stamp).
	Lease bool
}

// TimerSpec is a timer the workflow started.
type TimerSpec struct {
	Position int
	Delay    time.Duration
}

// RunFinish ends a run, or its execution.
type RunFinish struct {
	// Status is RunCompleted, RunFailed or RunCancelled.
	Status RunStatus
	Output json.RawMessage
	Error  *ErrorInfo
	// ContinueAsNew, instead of ending the run, ends its execution
	// (Continued): Execution goes up by one and Input becomes the run's
	// input. The run stays running and leased to the same owner with the
	// same token.
	ContinueAsNew bool
	Input         json.RawMessage
}

// Apply makes run what f leaves it: ended with f's status, output and
// error, or, continued as new, in its next execution with f's input.
// Stores and the engine use it to return a run without reading it again.
func (f *RunFinish) Apply(run *Run) {
	if f.ContinueAsNew {
		run.Execution, run.Input = run.Execution+1, f.Input
		return
	}
	run.Status, run.Output, run.Error = f.Status, f.Output, f.Error
}

// RunRedriveParams redrives a failed run.
type RunRedriveParams struct {
	ID string
	// By says who redrove it, for the history.
	By string
}

// SignalSendParams sends a signal to a run.
type SignalSendParams struct {
	RunID   string
	Name    string
	Payload json.RawMessage
}

// RunCancelParams cancels a run.
type RunCancelParams struct {
	ID     string
	Reason string
}

// HistoryListParams selects events of a run.
type HistoryListParams struct {
	RunID string
	// AfterSeq lists only events with a larger Seq.
	AfterSeq int64
}

// TaskClaimParams leases ready tasks.
type TaskClaimParams struct {
	// Owner names the worker, for AttemptStarted and leases.
	Owner string
	// Steps says how many tasks of each step name to claim at most.
	Steps []StepQuota
	// Limit caps the total across Steps, oldest ready first; zero means
	// the sum of the quotas.
	Limit int
	// LeaseTTL is the lease's length; it is cut to the attempt's timeout.
	LeaseTTL time.Duration
	// Keep records each attempt the claim starts, for TaskAttemptList,
	// so that a remote worker's write that comes again after its task is
	// done can be told from a stale one. The engine's own claims do
	// without it.
	Keep bool
}

// TaskAttemptListParams lists the kept attempts of a task.
type TaskAttemptListParams struct {
	TaskID int64
}

// A TaskAttempt is an attempt that a claim with Keep started: which run's
// step it is, and its number, by its task's id and its token.
type TaskAttempt struct {
	TaskID    int64
	Token     int64
	RunID     string
	Execution int
	Position  int
	Attempt   int
}

// StepQuota caps a claim for one step name.
type StepQuota struct {
	Name  string
	Limit int
}

// TaskHeartbeatParams extends a lease.
type TaskHeartbeatParams struct {
	TaskID   int64
	Token    int64
	LeaseTTL time.Duration
}

// TaskCompleteParams records a successful attempt.
type TaskCompleteParams struct {
	TaskID int64
	Token  int64
	Output json.RawMessage
	// Attempt is the number of the attempt the token's holder ran, as the
	// store gave it (Task.Attempt). Writers name it: an attempt started
	// in place (TaskFailParams.Next) keeps the token of the one before,
	// and a store may know it only from the history and from this.
	Attempt int
}

// TaskFailParams records a failed attempt and the policy's decision.
type TaskFailParams struct {
	TaskID int64
	Token  int64
	Error  ErrorInfo
	// Retry makes the task ready again after Delay; otherwise the step
	// fails with Reason (Failed).
	Retry  bool
	Delay  time.Duration
	Rule   string
	Reason string
	// Expired is set by the lease reaper: the write then requires the lease
	// to have lapsed, where a worker's write requires it not to have.
	Expired bool
	// Attempt is as in TaskCompleteParams.
	Attempt int
	// LeaseNext, with Retry and a zero Delay (LeasesNext), starts the next
	// attempt at once in the same transaction, leased to LeaseOwner for
	// LeaseTTL as TaskFailParams.Next decides (AttemptStarted follows
	// AttemptFailed); the task is returned in Outcome.Next. A worker that
	// retries at once so skips a round trip through the queue.
	LeaseNext  bool
	LeaseOwner string
	LeaseTTL   time.Duration
}

// An Outcome is what a store call appended to a run's history, and who to
// tell: the engine that holds the run's lease.
type Outcome struct {
	RunID string
	// Owner holds the run's lease; empty when none does.
	Owner  string
	Events []Event
	// Next is the attempt TaskFail started at once (LeaseNext), or nil.
	Next *Task
}

// TaskListExpiredParams lists lapsed leases.
type TaskListExpiredParams struct {
	Limit int
}

// TaskListWaitingParams lists the tasks that wait for a worker.
type TaskListWaitingParams struct {
	// RunID, when set, lists only that run's tasks.
	RunID string
	// ReadyFor lists only tasks ready since at least this long ago, by the
	// store's clock; zero lists every task ready now.
	ReadyFor time.Duration
	// Limit caps the list; zero means 100.
	Limit int
}

// A WaitingTask is a ready task that no one holds.
type WaitingTask struct {
	TaskID   int64
	RunID    string
	Position int
	Step     string
	// ReadyAt is since when the task has been ready: when its step was
	// scheduled or redriven, or when its retry came due.
	ReadyAt time.Time
}

// TaskReleaseParams releases the task leases of an engine that is gone.
type TaskReleaseParams struct {
	// Owner is the gone engine's worker id.
	Owner string
}

// EngineStartParams records a live engine.
type EngineStartParams struct {
	// ID is the engine's worker id, the owner of its leases.
	ID string
}

// TimerFireParams fires due timers.
type TimerFireParams struct {
	Limit int
}

// Wake holds the next due times; a zero time means nothing of that kind is
// pending. Times already past are returned as they are.
type Wake struct {
	Task  time.Time
	Lease time.Time
	Timer time.Time
}

// NextWakeParams asks for the next due times.
type NextWakeParams struct {
	// Steps limits ready tasks to these step names: nil means every
	// step, an empty list none (Wake.Task is then zero).
	Steps []string
}
