package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"reprise"
	"reprise/httpstep"
	"reprise/store"
)

// A Client calls a reprise server's API. Its errors for answers other than
// 2xx are *Problem, which match reprise.ErrNotFound, ErrLeaseLost and
// ErrRunFinished with errors.Is. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	// HTTP sends the requests. Default: a client of its own with pooled
	// connections and no overall timeout (long-polls set their own).
	HTTP *http.Client
}

// NewClient returns a client of the server at baseURL
// ("http://127.0.0.1:7420"), sending token as a bearer token when it is
// not empty.
func NewClient(baseURL, token string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("server url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server url %q: want http://HOST:PORT or https://HOST:PORT", baseURL)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &Client{base: strings.TrimSuffix(u.String(), "/"), token: token, HTTP: &http.Client{Transport: t}}, nil
}

// Close closes the client's idle connections.
func (c *Client) Close() error {
	c.HTTP.CloseIdleConnections()
	return nil
}

// do sends a request with body in (nil for none) and decodes a 2xx answer
// into out (nil to discard it); it returns the status.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	contentType := "application/json"
	switch in := in.(type) {
	case nil:
	case rawBody:
		body, contentType = bytes.NewReader(in.data), in.contentType
	default:
		b, err := json.Marshal(in)
		if err != nil {
			return 0, fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s: %w", method, path, readProblem(resp))
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// rawBody is a request body sent as it is.
type rawBody struct {
	data        []byte
	contentType string
}

// readProblem reads an error answer: a problem document, or whatever
// a proxy in between said.
func readProblem(resp *http.Response) *Problem {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var p Problem
	if json.Unmarshal(b, &p) == nil && p.Status != 0 && p.Type != "" {
		return &p
	}
	return &Problem{Type: "about:blank", Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode,
		Detail: strings.TrimSpace(string(b[:min(len(b), 512)]))}
}

// A StartOption sets how StartRun, StartStep and StartFlow start a run.
type StartOption func(*startRequest)

// WithTraceParent starts the run in the caller's trace, as
// reprise.WithTraceParent does: tp is a W3C traceparent, the caller's
// span, kept with the run (Run.TraceParent).
func WithTraceParent(tp string) StartOption {
	return func(r *startRequest) { r.TraceParent = tp }
}

// StartRun starts a run of workflow with input (nil for null) and id
// (empty for one the server picks). created is false when a run with that
// id existed; it is returned and nothing new starts.
func (c *Client) StartRun(ctx context.Context, workflow string, input json.RawMessage, id string, opts ...StartOption) (run *store.Run, created bool, err error) {
	return c.start(ctx, startRequest{Workflow: workflow, Input: input, ID: id}, opts)
}

// StartStep starts a one-step run of the registered step.
func (c *Client) StartStep(ctx context.Context, step string, input json.RawMessage, id string, opts ...StartOption) (run *store.Run, created bool, err error) {
	return c.start(ctx, startRequest{Step: step, Input: input, ID: id}, opts)
}

func (c *Client) start(ctx context.Context, req startRequest, opts []StartOption) (*store.Run, bool, error) {
	for _, o := range opts {
		o(&req)
	}
	if req.TraceParent != "" {
		if err := reprise.ValidateTraceParent(req.TraceParent); err != nil {
			return nil, false, fmt.Errorf("start run: %w", err)
		}
	}
	var run store.Run
	status, err := c.do(ctx, "POST", "/v1/runs", req, &run)
	if err != nil {
		return nil, false, err
	}
	return fromWire(&run), status == http.StatusCreated, nil
}

// ListRuns lists one page of runs, newest first; p.Before is the cursor.
func (c *Client) ListRuns(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	runs, _, err := c.ListRunsPage(ctx, p)
	return runs, err
}

// ListRunsPage lists one page of runs and returns the cursor of the next
// (empty on the last page): pass it as p.Before.
func (c *Client) ListRunsPage(ctx context.Context, p *store.RunListParams) (runs []*store.Run, next string, err error) {
	q := url.Values{}
	if p != nil {
		if p.Status != "" {
			q.Set("status", string(p.Status))
		}
		if p.Retrying {
			q.Set("status", "retrying")
		}
		for name, v := range map[string]string{"workflow": p.Workflow, "step": p.Step, "error_type": p.ErrorType} {
			if v != "" {
				q.Set(name, v)
			}
		}
		if !p.CreatedSince.IsZero() {
			q.Set("since", p.CreatedSince.Format(time.RFC3339Nano))
		}
		if !p.CreatedUntil.IsZero() {
			q.Set("until", p.CreatedUntil.Format(time.RFC3339Nano))
		}
		if p.Before != "" {
			q.Set("cursor", p.Before)
		}
		if p.Limit > 0 {
			q.Set("limit", strconv.Itoa(p.Limit))
		}
	}
	var out struct {
		Runs       []*store.Run `json:"runs"`
		NextCursor string       `json:"next_cursor"`
	}
	if _, err := c.do(ctx, "GET", "/v1/runs"+query(q), nil, &out); err != nil {
		return nil, "", err
	}
	for _, r := range out.Runs {
		fromWire(r)
	}
	return out.Runs, out.NextCursor, nil
}

// fromWire undoes what runJSON adds: an output of null where there is none.
func fromWire(r *store.Run) *store.Run {
	if string(r.Output) == "null" {
		r.Output = nil
	}
	return r
}

func query(q url.Values) string {
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// runPath is the path of run id, its id escaped: a child run's slashes
// are sent as %2F, within the one segment of the {id}.
func runPath(id string) string { return "/v1/runs/" + url.PathEscape(id) }

// GetRun returns a run's current state.
func (c *Client) GetRun(ctx context.Context, id string) (*store.Run, error) {
	return c.WaitRun(ctx, id, 0)
}

// WaitRun returns run id as soon as it changes, or after wait (capped by
// the server, 60 s by default), whichever comes first; a finished run at
// once.
func (c *Client) WaitRun(ctx context.Context, id string, wait time.Duration) (*store.Run, error) {
	q := url.Values{}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var run store.Run
	if _, err := c.do(ctx, "GET", runPath(id)+query(q), nil, &run); err != nil {
		return nil, err
	}
	return fromWire(&run), nil
}

// History returns a run's history.
func (c *Client) History(ctx context.Context, id string) ([]store.Event, error) {
	return c.WaitHistory(ctx, id, 0, 0)
}

// WaitHistory returns the events of run id after sequence number after;
// with a wait, it waits up to that long for one when there is none yet.
func (c *Client) WaitHistory(ctx context.Context, id string, after int64, wait time.Duration) ([]store.Event, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if wait > 0 {
		q.Set("wait", wait.String())
	}
	var out historyJSON
	if _, err := c.do(ctx, "GET", runPath(id)+"/history"+query(q), nil, &out); err != nil {
		return nil, err
	}
	return out.Events, nil
}

// CancelRun cancels a run; a finished one gives reprise.ErrRunFinished.
func (c *Client) CancelRun(ctx context.Context, id, reason string) error {
	_, err := c.do(ctx, "POST", runPath(id)+"/cancel", cancelRequest{Reason: reason}, nil)
	return err
}

// RedriveRun gives a run that failed on a step a fresh attempt budget for
// it; by says who, for the history.
func (c *Client) RedriveRun(ctx context.Context, id, by string) error {
	_, err := c.do(ctx, "POST", runPath(id)+"/redrive", redriveRequest{By: by}, nil)
	return err
}

// SignalRun sends a signal with a JSON payload to a run.
func (c *Client) SignalRun(ctx context.Context, id, name string, payload json.RawMessage) error {
	_, err := c.do(ctx, "POST", runPath(id)+"/signals", signalRequest{Name: name, Payload: payload}, nil)
	return err
}

// RegisterStep registers a step, or a new version of it: KindHTTP with a
// URL, or KindPull; its Policy is in text form, or empty for the default.
func (c *Client) RegisterStep(ctx context.Context, s Step) error {
	req := stepRequest{Name: s.Name, Kind: s.Kind, URL: s.URL}
	if s.Policy != "" {
		b, _ := json.Marshal(s.Policy)
		req.Policy = b
	}
	_, err := c.do(ctx, "POST", "/v1/steps", req, nil)
	return err
}

// ListSteps lists the steps the server knows.
func (c *Client) ListSteps(ctx context.Context) ([]Step, error) {
	var out struct {
		Steps []Step `json:"steps"`
	}
	_, err := c.do(ctx, "GET", "/v1/steps", nil, &out)
	return out.Steps, err
}

// GetStep returns a step's current version, or with version > 0 that
// version.
func (c *Client) GetStep(ctx context.Context, name string, version int) (*Step, error) {
	path := "/v1/steps/" + url.PathEscape(name)
	if version > 0 {
		path += "?version=" + strconv.Itoa(version)
	}
	var s Step
	if _, err := c.do(ctx, "GET", path, nil, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// DeleteStep deletes a step registered through the API. While runs still
// need it the error matches reprise.ErrStepInUse, unless force.
func (c *Client) DeleteStep(ctx context.Context, name string, force bool) error {
	path := "/v1/steps/" + url.PathEscape(name)
	if force {
		path += "?force=true"
	}
	_, err := c.do(ctx, "DELETE", path, nil, nil)
	return err
}

// ClaimParams is what a pull worker asks for.
type ClaimParams struct {
	// Worker names the worker in the history. Default: the server names
	// it "pull@" and the address the connection comes from.
	Worker string
	Steps  []string
	// Max is how many tasks to take at most. Default: 1.
	Max int
	// Wait is how long the server waits for a task when none is ready.
	// Default: 0, answer at once.
	Wait time.Duration
}

// Claim leases tasks of pull steps to a worker.
func (c *Client) Claim(ctx context.Context, p ClaimParams) ([]Task, error) {
	req := claimRequest{Worker: p.Worker, Steps: p.Steps, Max: p.Max}
	if p.Wait > 0 {
		req.Wait = p.Wait.String()
	}
	var out claimList
	_, err := c.do(ctx, "POST", "/v1/tasks/claim", req, &out)
	return out.Tasks, err
}

func taskPath(id int64, verb string) string {
	return "/v1/tasks/" + strconv.FormatInt(id, 10) + "/" + verb
}

// Complete records a task's output. The same completion again (same
// token and output) succeeds again, so a call whose answer was lost may be
// repeated; a stale token gives reprise.ErrLeaseLost, a task the server
// never had reprise.ErrNotFound.
func (c *Client) Complete(ctx context.Context, id, token int64, output json.RawMessage) error {
	_, err := c.do(ctx, "POST", taskPath(id, "complete"), completeRequest{Token: token, Output: output}, nil)
	return err
}

// Fail records a task's failure, for its step's policy to decide on. The
// same failure again (same token, type and message) succeeds again; a
// stale token gives reprise.ErrLeaseLost, a task the server never had
// reprise.ErrNotFound.
func (c *Client) Fail(ctx context.Context, id, token int64, report httpstep.Report) error {
	_, err := c.do(ctx, "POST", taskPath(id, "fail"), failRequest{Token: token, Error: &report}, nil)
	return err
}

// Heartbeat extends a task's lease and returns when it now lapses.
func (c *Client) Heartbeat(ctx context.Context, id, token int64) (time.Time, error) {
	var out struct {
		LeaseUntil time.Time `json:"lease_until"`
	}
	_, err := c.do(ctx, "POST", taskPath(id, "heartbeat"), heartbeatRequest{Token: token}, &out)
	return out.LeaseUntil, err
}

// PushFlow sends a flow file, YAML or JSON, as contentType
// ("application/yaml", "application/json"). created is false when the
// latest version holds the same flow: that version is returned. A flow
// with faults gives a *Problem whose Errors place each in src.
func (c *Client) PushFlow(ctx context.Context, src []byte, contentType string) (f *Flow, created bool, err error) {
	f = new(Flow)
	status, err := c.do(ctx, "POST", "/v1/flows", rawBody{src, contentType}, f)
	if err != nil {
		return nil, false, err
	}
	return f, status == http.StatusCreated, nil
}

// ListFlows lists the latest version of every flow.
func (c *Client) ListFlows(ctx context.Context) ([]Flow, error) {
	var out struct {
		Flows []Flow `json:"flows"`
	}
	if _, err := c.do(ctx, "GET", "/v1/flows", nil, &out); err != nil {
		return nil, err
	}
	return out.Flows, nil
}

// GetFlow returns a version of a flow (0 for the latest), with the flow
// itself in canonical JSON.
func (c *Client) GetFlow(ctx context.Context, name string, version int) (*Flow, error) {
	path := "/v1/flows/" + url.PathEscape(name)
	if version != 0 {
		path += "?version=" + strconv.Itoa(version)
	}
	var f Flow
	if _, err := c.do(ctx, "GET", path, nil, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// StartFlow starts a run of the latest version of a flow with input (nil
// for null) and id (empty for one the server picks), as StartRun does.
func (c *Client) StartFlow(ctx context.Context, name string, input json.RawMessage, id string, opts ...StartOption) (run *store.Run, created bool, err error) {
	return c.start(ctx, startRequest{Flow: name, Input: input, ID: id}, opts)
}
