package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"reprise"
	"reprise/httpstep"
	"reprise/store"
)

// The contract tests hold the server to openapi.json, the API's OpenAPI
// document: it is valid, with valid examples, and names every route; its
// examples, sent to a live server, get the answers it describes; and
// requests mutated from them get no 5xx, only answers it describes.

var contractSeed = flag.Uint64("contract-seed", 1, "seed of TestContractFuzz's requests")

// contractN is how many mutated requests TestContractFuzz sends to each
// operation, on each store; a HEAD, served by its GET's handler, gets a
// third as many.
const contractN = 36

const contractToken = "contract-token-0123456789"

// loadContract loads and validates openapi.json. strict closes every
// object schema of the components that does not say otherwise
// (additionalProperties: false), so that a field the server sends and the
// document does not name fails a test; the document itself leaves answers
// open to fields added later.
func loadContract(t testing.TB, strict bool) *openapi3.T {
	t.Helper()
	data := openAPI
	if strict {
		var raw map[string]any
		if err := json.Unmarshal(data, &raw); err != nil {
			t.Fatal(err)
		}
		for _, s := range raw["components"].(map[string]any)["schemas"].(map[string]any) {
			s := s.(map[string]any)
			_, props := s["properties"]
			_, addl := s["additionalProperties"]
			_, isRef := s["$ref"]
			if s["type"] == "object" && props && !addl && !isRef {
				s["additionalProperties"] = false
			}
		}
		var err error
		if data, err = json.Marshal(raw); err != nil {
			t.Fatal(err)
		}
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		t.Fatalf("load openapi.json: %v", err)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation(), openapi3.EnableSchemaFormatValidation()); err != nil {
		t.Fatalf("openapi.json (strict %v) is not valid: %v", strict, err)
	}
	return doc
}

// operation is one operation of the document.
type operation struct {
	method, path string
	item         *openapi3.PathItem
	op           *openapi3.Operation
}

func (o operation) String() string { return o.method + " " + o.path }

// operations lists the document's operations, by path and method.
func operations(doc *openapi3.T) []operation {
	var ops []operation
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			ops = append(ops, operation{method: method, path: path, item: item, op: op})
		}
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].String() < ops[j].String() })
	return ops
}

// params returns the operation's parameters, its path item's included.
func (o operation) params() []*openapi3.Parameter {
	var ps []*openapi3.Parameter
	for _, p := range append(slices.Clone(o.item.Parameters), o.op.Parameters...) {
		ps = append(ps, p.Value)
	}
	return ps
}

// A call is a request to one operation.
type call struct {
	o       operation
	name    string            // the request body example's, if any
	path    map[string]string // path parameters
	query   string            // raw, without "?"
	body    []byte            // nil for none
	ctype   string            // the body's Content-Type
	noToken bool
}

// exampleCalls returns the operation's requests made of its examples: one
// per example of its body (or one), with every parameter's example.
func exampleCalls(t testing.TB, o operation) []call {
	t.Helper()
	c := call{o: o, path: map[string]string{}}
	q := url.Values{}
	for _, p := range o.params() {
		if p.Example == nil {
			t.Fatalf("%s: parameter %s has no example", o, p.Name)
		}
		v := fmt.Sprint(p.Example)
		if f, ok := p.Example.(float64); ok {
			v = strconv.FormatFloat(f, 'f', -1, 64)
		}
		switch p.In {
		case "path":
			c.path[p.Name] = v
		case "query":
			q.Set(p.Name, v)
		}
	}
	c.query = q.Encode()
	if o.op.RequestBody == nil {
		return []call{c}
	}
	media := o.op.RequestBody.Value.Content.Get("application/json")
	if media == nil || len(media.Examples) == 0 {
		t.Fatalf("%s: its body has no examples", o)
	}
	var calls []call
	for _, name := range sortedKeys(media.Examples) {
		b, err := json.Marshal(media.Examples[name].Value.Value)
		if err != nil {
			t.Fatal(err)
		}
		cc := c
		cc.path = maps.Clone(c.path)
		cc.name, cc.body, cc.ctype = name, b, "application/json"
		calls = append(calls, cc)
	}
	return calls
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// url is the call's URL on the server at base.
func (c *call) url(base string) string {
	p := c.o.path
	for name, v := range c.path {
		p = strings.ReplaceAll(p, "{"+name+"}", url.PathEscape(v))
	}
	if c.query != "" {
		p += "?" + c.query
	}
	return base + p
}

func (c *call) String() string {
	s := c.o.method + " " + c.url("")
	if c.body != nil {
		b := c.body
		if len(b) > 200 {
			b = append(b[:200:200], "..."...)
		}
		s += " " + strconv.Quote(string(b))
	}
	return s
}

// answer is what the server answered a call.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// request is the call as a request to the server at base.
func (c *call) request(t testing.TB, base string) *http.Request {
	t.Helper()
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequest(c.o.method, c.url(base), body)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	if c.ctype != "" {
		req.Header.Set("Content-Type", c.ctype)
	}
	if !c.noToken {
		req.Header.Set("Authorization", "Bearer "+contractToken)
	}
	return req
}

// do sends the call to the server at base.
func (c *call) do(t testing.TB, base string) (*http.Request, answer) {
	t.Helper()
	req := c.request(t, base)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	// The request again, for the validator, which reads its body.
	if c.body != nil {
		req.Body = io.NopCloser(bytes.NewReader(c.body))
	}
	return req, answer{resp.StatusCode, resp.Header, b}
}

// input is the validator's view of the call.
func (c *call) input(doc *openapi3.T, req *http.Request) *openapi3filter.RequestValidationInput {
	return &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: c.path,
		Route:      &routers.Route{Spec: doc, Path: c.o.path, PathItem: c.o.item, Method: c.o.method, Operation: c.o.op},
		Options: &openapi3filter.Options{
			AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
}

// checkAnswer checks an answer against the document: its status is one
// the operation lists, and its headers and body are as that answer says
// (a HEAD's and one without content have no body).
func checkAnswer(doc *openapi3.T, c *call, req *http.Request, a answer) error {
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: c.input(doc, req), Status: a.status, Header: a.header, Options: &openapi3filter.Options{
			IncludeResponseStatus: true, MultiError: true,
		},
	}
	in.SetBodyBytes(a.body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return err
	}
	r := c.o.op.Responses.Status(a.status)
	if r == nil {
		return fmt.Errorf("status %d is not in the document", a.status)
	}
	if (c.o.method == "HEAD" || len(r.Value.Content) == 0) && len(a.body) > 0 {
		return fmt.Errorf("status %d: the document says no body, the server sent %q", a.status, a.body)
	}
	return nil
}

// contractServer is a live server for the contract: it needs a token,
// waits at most maxWait on a long-poll, runs the examples' workflow
// ("order", which waits for the signal "approve") and resolves every host
// name of an HTTP step to 127.0.0.1.
func contractServer(t *testing.T, kind string, maxWait time.Duration) *testServer {
	t.Helper()
	caller, err := httpstep.New(httpstep.Options{Resolver: loopbackResolver{}})
	if err != nil {
		t.Fatal(err)
	}
	order := reprise.NewWorkflow("order", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		return reprise.WaitSignal[json.RawMessage](ctx, "approve").Get(ctx)
	})
	return newTestServerOn(t, kind, Options{Token: contractToken, MaxWait: maxWait, Caller: caller}, order)
}

type loopbackResolver struct{}

func (loopbackResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// TestContractDocument checks the document itself: it loads and validates
// with its examples; it names every route the handler serves, and their
// methods and query parameters, and every problem type; the server serves
// it, without a token.
func TestContractDocument(t *testing.T) {
	t.Parallel()
	doc := loadContract(t, false)
	loadContract(t, true)

	// The routes of NewHandler, read from its source: the document has
	// each path with its methods (and HEAD beside GET), and no other.
	src, err := os.ReadFile("httpapi.go")
	if err != nil {
		t.Fatal(err)
	}
	routeRE := regexp.MustCompile(`route\("([^"]+)", map\[string\]http\.HandlerFunc\{([^}]*)\}\)`)
	methodRE := regexp.MustCompile(`"([A-Z]+)":`)
	served := map[string][]string{}
	for _, m := range routeRE.FindAllStringSubmatch(string(src), -1) {
		for _, mm := range methodRE.FindAllStringSubmatch(m[2], -1) {
			served[m[1]] = append(served[m[1]], mm[1])
			if mm[1] == "GET" {
				served[m[1]] = append(served[m[1]], "HEAD")
			}
		}
	}
	if len(served) < 10 {
		t.Fatalf("read %d routes from httpapi.go; has the route table changed shape?", len(served))
	}
	documented := map[string][]string{}
	for _, o := range operations(doc) {
		documented[o.path] = append(documented[o.path], o.method)
	}
	for path, methods := range served {
		slices.Sort(methods)
		if d := documented[path]; !slices.Equal(methods, d) {
			t.Errorf("%s: served %v, documented %v", path, methods, d)
		}
	}
	for path := range documented {
		if served[path] == nil {
			t.Errorf("%s: documented, not served", path)
		}
	}

	// Query parameters: as the handler takes them.
	for _, o := range operations(doc) {
		var query []string
		for _, p := range o.params() {
			if p.In == "query" {
				query = append(query, p.Name)
			}
		}
		method := o.method
		if method == "HEAD" {
			method = "GET"
		}
		want := slices.Clone(queryParams[method+" "+o.path])
		slices.Sort(query)
		slices.Sort(want)
		if !slices.Equal(query, want) {
			t.Errorf("%s: documents query parameters %v; the handler takes %v", o, query, want)
		}
		if o.op.OperationID == "" || o.op.Summary == "" {
			t.Errorf("%s: no operationId or summary", o)
		}
	}

	// Every problem type of problem.go is in the document.
	psrc, err := os.ReadFile("problem.go")
	if err != nil {
		t.Fatal(err)
	}
	types := regexp.MustCompile(`"(urn:reprise:problem:[a-z-]+)"`).FindAllStringSubmatch(string(psrc), -1)
	if len(types) < 10 {
		t.Fatalf("read %d problem types from problem.go", len(types))
	}
	for _, m := range types {
		short := strings.TrimPrefix(m[1], "urn:reprise:problem:")
		if !bytes.Contains(openAPI, []byte(`"`+m[1]+`"`)) && !bytes.Contains(openAPI, []byte("`"+short+"`")) {
			t.Errorf("problem type %s is not in the document", m[1])
		}
	}

	// Served as it is, without a token; other methods are 405 with Allow.
	s := contractServer(t, "sqlite", time.Millisecond)
	c := call{o: operation{method: "GET", path: "/v1/openapi.json"}, noToken: true}
	_, a := c.do(t, s.url)
	if a.status != 200 || !bytes.Equal(a.body, openAPI) || a.header.Get("Content-Type") != "application/json" {
		t.Errorf("GET /v1/openapi.json without a token: %d %s, %d bytes", a.status, a.header.Get("Content-Type"), len(a.body))
	}
	problem := doc.Components.Schemas["Problem"].Value
	for path, methods := range documented {
		for _, m := range []string{"PUT", "PATCH", "DELETE", "POST"} {
			if slices.Contains(methods, m) {
				continue
			}
			c := call{o: operation{method: m, path: path}, path: map[string]string{"id": "1", "name": "x"}}
			_, a := c.do(t, s.url)
			allow := strings.Split(a.header.Get("Allow"), ", ")
			slices.Sort(allow)
			var v any
			err := json.Unmarshal(a.body, &v)
			if err == nil {
				err = problem.VisitJSON(v)
			}
			if a.status != 405 || !slices.Equal(allow, methods) || err != nil {
				t.Errorf("%s %s: %d, Allow %v (documented %v), %s: %v", m, path, a.status, allow, methods, a.body, err)
			}
			break
		}
	}
}

// TestContractExamples sends every operation its examples, in an order
// that makes each one meaningful (a run to cancel, a task to complete),
// and checks each answer against the document: the example's request is
// valid by the document, its answer a success the document describes.
// Each operation that needs a token is also sent without one: 401.
func TestContractExamples(t *testing.T) {
	t.Parallel()
	for _, kind := range testStores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testContractExamples(t, kind)
		})
	}
}

func testContractExamples(t *testing.T, kind string) {
	doc := loadContract(t, true)
	s := contractServer(t, kind, 100*time.Millisecond)
	ctx := t.Context()
	byID := map[string]operation{}
	for _, o := range operations(doc) {
		byID[o.op.OperationID] = o
	}

	// claimed starts a one-step run of resize and claims its task.
	claimed := func() Task {
		t.Helper()
		run, _, err := s.c.StartStep(ctx, "resize", json.RawMessage(`{"w":1}`), "")
		if err != nil {
			t.Fatal(err)
		}
		for {
			tasks, err := s.c.Claim(ctx, ClaimParams{Steps: []string{"resize"}, Max: 100, Wait: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range tasks {
				if task.RunID == run.ID {
					return task
				}
				if err := s.c.Complete(ctx, task.ID, task.Token, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// withTask makes a task write about a task just claimed.
	withTask := func(c *call) {
		task := claimed()
		c.path["id"] = strconv.FormatInt(task.ID, 10)
		var body map[string]any
		if err := json.Unmarshal(c.body, &body); err != nil {
			t.Fatal(err)
		}
		body["token"] = task.Token
		c.body, _ = json.Marshal(body)
	}
	setups := map[string]func(c *call){
		"cancelRun": func(c *call) {
			if _, _, err := s.c.StartRun(ctx, "order", nil, c.path["id"]); err != nil {
				t.Fatal(err)
			}
		},
		// The run the startRun example started fails on its step.
		"redriveRun": func(c *call) {
			for {
				tasks, err := s.c.Claim(ctx, ClaimParams{Steps: []string{"resize"}, Max: 100, Wait: time.Second})
				if err != nil {
					t.Fatal(err)
				}
				for _, task := range tasks {
					if task.RunID == c.path["id"] {
						if err := s.c.Fail(ctx, task.ID, task.Token, httpstep.Report{Type: "Invalid", Message: "not an image"}); err != nil {
							t.Fatal(err)
						}
						if run := s.waitRun(t, c.path["id"]); run.Status != store.RunFailed {
							t.Fatalf("run %s: %+v", c.path["id"], run)
						}
						return
					}
					if err := s.c.Complete(ctx, task.ID, task.Token, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
		},
		"completeTask":  withTask,
		"failTask":      withTask,
		"heartbeatTask": withTask,
	}
	order := []string{
		"getHealth", "getOpenAPI", "getMetrics",
		"registerStep", "listSteps", "getStep",
		"pushFlow", "listFlows", "getFlow",
		"startRun", "listRuns", "getRun", "getRunHistory", "signalRun", "cancelRun", "redriveRun",
		"claimTasks", "completeTask", "failTask", "heartbeatTask",
		"deleteStep",
	}
	sent := map[string]bool{}
	for _, id := range order {
		o, ok := byID[id]
		if !ok {
			t.Fatalf("no operation %s", id)
		}
		for _, c := range exampleCalls(t, o) {
			if setup := setups[id]; setup != nil {
				setup(&c)
			}
			if err := openapi3filter.ValidateRequest(ctx, c.input(doc, c.request(t, s.url))); err != nil {
				t.Errorf("%s: the example is not a valid request: %v", &c, err)
			}
			req, a := c.do(t, s.url)
			if a.status/100 != 2 {
				t.Errorf("%s: %d %s, want a success", &c, a.status, a.body)
			}
			if err := checkAnswer(doc, &c, req, a); err != nil {
				t.Errorf("%s: %d %s: %v", &c, a.status, a.body, err)
			}
			if c.o.op.Security == nil || len(*c.o.op.Security) > 0 {
				c.noToken = true
				req, a := c.do(t, s.url)
				if err := checkAnswer(doc, &c, req, a); a.status != 401 || err != nil {
					t.Errorf("%s without a token: %d %s: %v", &c, a.status, a.body, err)
				}
			}
		}
		sent[o.String()] = true
		// HEAD beside GET: the same status, no body.
		if o.method == "GET" {
			h := byID[id+"Head"]
			for _, c := range exampleCalls(t, h) {
				req, a := c.do(t, s.url)
				if err := checkAnswer(doc, &c, req, a); a.status != 200 || err != nil {
					t.Errorf("%s: %d %q: %v", &c, a.status, a.body, err)
				}
			}
			sent[h.String()] = true
		}
	}
	for _, o := range operations(doc) {
		if !sent[o.String()] {
			t.Errorf("%s: no example sent", o)
		}
	}
	if run := s.waitRun(t, "order-A-1"); run.Status != store.RunCompleted || string(run.Output) != `{"by":"alice"}` {
		t.Errorf("order-A-1, signalled: %+v", run)
	}
}

// TestContractFuzz sends each operation requests mutated from its
// examples, seeded (-contract-seed) and bounded: fields dropped, added or
// of another type; long strings, unicode, NUL, invalid UTF-8; bodies that
// are not objects or not JSON; odd path and query parameters; no token.
// No answer may be a 5xx, and each must be one the document describes.
func TestContractFuzz(t *testing.T) {
	t.Parallel()
	for _, kind := range testStores() {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			testContractFuzz(t, kind)
		})
	}
}

func testContractFuzz(t *testing.T, kind string) {
	doc := loadContract(t, true)
	// Long-polls that wait (most of those to a run that goes on) are cut
	// short: what is tested is the answer.
	s := contractServer(t, kind, 5*time.Millisecond)
	ctx := t.Context()
	// Something to act on: steps, runs and a task of the examples' names.
	if err := s.c.RegisterStep(ctx, Step{Name: "resize", Kind: KindPull}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"order-A-1", "order-A-2"} {
		if _, _, err := s.c.StartRun(ctx, "order", nil, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.c.StartStep(ctx, "resize", nil, "resize-B-7"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(*contractSeed, 0x5eed))
	failures := 0
	statuses := map[int]int{}
	for _, o := range operations(doc) {
		examples := exampleCalls(t, o)
		n := contractN
		if o.method == "HEAD" {
			n /= 3
		}
		for i := range n {
			c := examples[rng.IntN(len(examples))]
			c.path = maps.Clone(c.path)
			mutateCall(rng, &c, i)
			req, a := c.do(t, s.url)
			statuses[a.status]++
			err := checkAnswer(doc, &c, req, a)
			if a.status >= 500 || err != nil {
				failures++
				t.Errorf("%s (seed %d): %d %s: %v", &c, *contractSeed, a.status, a.body, err)
				if failures > 20 {
					t.FailNow()
				}
			}
		}
	}
	t.Logf("answers by status: %v", statuses)
}

// mutateCall changes a call in one to three ways, drawn from rng; the
// i-th call of an operation gets at least its i-th way among the first
// few, so that every operation gets each.
func mutateCall(rng *rand.Rand, c *call, i int) {
	n := 1 + rng.IntN(3)
	for k := range n {
		way := rng.IntN(12)
		if k == 0 && i < 12 {
			way = i
		}
		switch way {
		case 0, 1, 2, 3:
			if c.body != nil {
				c.body = mutateBody(rng, c.body)
			} else {
				c.query = mutateQuery(rng, c)
			}
		case 4, 5:
			c.query = mutateQuery(rng, c)
		case 6, 7:
			if len(c.path) > 0 {
				for name := range c.path {
					c.path[name] = oddSegment(rng)
				}
			} else {
				c.query = mutateQuery(rng, c)
			}
		case 8:
			c.body = wholeBody(rng)
			if c.ctype == "" {
				c.ctype = "application/json"
			}
		case 9:
			if c.body != nil || rng.IntN(2) == 0 {
				c.ctype = pick(rng, []string{"text/plain", "application/xml", "application/json; charset=utf-8", "multipart/form-data"})
				if c.body == nil {
					c.body = []byte(`{}`)
				}
			}
		case 10:
			c.noToken = true
		case 11:
			if c.body != nil {
				c.body = mutateBody(rng, mutateBody(rng, c.body))
			}
		}
	}
}

// mutateBody changes one field of a JSON object body, at the top or one
// level down: drops it, adds one, or gives it another value.
func mutateBody(rng *rand.Rand, body []byte) []byte {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil || m == nil {
		return wholeBody(rng)
	}
	target := m
	keys := sortedKeys(m)
	if len(keys) > 0 && rng.IntN(3) == 0 {
		if inner, ok := m[keys[rng.IntN(len(keys))]].(map[string]any); ok {
			target, keys = inner, sortedKeys(inner)
		}
	}
	switch {
	case len(keys) > 0 && rng.IntN(3) == 0:
		delete(target, keys[rng.IntN(len(keys))])
	case len(keys) > 0 && rng.IntN(2) == 0:
		target[keys[rng.IntN(len(keys))]] = oddValue(rng, 0)
	default:
		name := pick(rng, []string{"ID", "Workflow", "extra", "", "name\u0000", "émoji😀", strings.Repeat("k", 300)})
		target[name] = oddValue(rng, 0)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return body
	}
	if rng.IntN(10) == 0 && len(keys) > 0 {
		// A name given twice.
		b = append([]byte(fmt.Sprintf(`{%q:1,`, keys[0])), b[1:]...)
	}
	return b
}

// wholeBody is a body that is not an object, or not JSON, or too large.
func wholeBody(rng *rand.Rand) []byte {
	return []byte(pick(rng, oddBodies()))
}

var oddBodies = sync.OnceValue(func() []string {
	return []string{
		``, `null`, `[]`, `"x"`, `42`, `{`, `{"a":1}{"b":2}`, `{"a":1,}`, "{\"a\":\"\xff\xfe\"}", `{"a":"\ud800"}`,
		`{"a":1e999}`, strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
		`{"input":` + strings.Repeat(`{"a":`, 500) + `1` + strings.Repeat(`}`, 500) + `}`,
		"\xef\xbb\xbf{}", `{"token":1,"token":2}`, strings.Repeat(" ", 100) + `{}`,
		`{"input":"` + strings.Repeat("a", 1<<20) + `"}`,
	}
})

// pick returns one of xs, drawn from rng.
func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// oddValue is a JSON value of any kind, some of them awkward.
func oddValue(rng *rand.Rand, depth int) any {
	switch rng.IntN(12) {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2:
		return pick(rng, []float64{0, -1, 1, 1.5, 1e300, -9.3e18, 9.3e18, 4294967296})
	case 3:
		return json.Number(pick(rng, []string{"100000000000000000000000", "-0", "1e3", "1E-7", "123456789012345678901"}))
	case 4, 5, 6:
		return oddString(rng)
	case 7:
		if depth < 3 {
			return []any{oddValue(rng, depth+1), oddValue(rng, depth+1)}
		}
		return []any{}
	case 8:
		if depth < 3 {
			return map[string]any{"a": oddValue(rng, depth+1)}
		}
		return map[string]any{}
	default:
		return pick(rng, []any{"resize", "order", "work"})
	}
}

// oddString is a string some part of the server could trip on.
func oddString(rng *rand.Rand) string {
	return pick(rng, []string{
		"", " ", "x", "resize", "order-A-1", "0", "-1", "9223372036854775808", "1.5",
		strings.Repeat("a", 201), strings.Repeat("é", 5000), "😀👍🏽", "ｆｕｌｌ", "\u202egnp.exe", "e\u0301",
		"a\u0000b", "\ufffd", "%00", "%2F", "a/b", "a?b", "a#b", "../x", "<script>", "' OR 1=1 --", "1s", "5m", "-5s",
		"true", "null", "[retry: 3]", "http://127.0.0.1:1/x", "ftp://x/y",
	})
}

// oddSegment is an odd string that stays one segment of a path: not
// empty, and no dot segment, which the server's router redirects to the
// cleaned path.
func oddSegment(rng *rand.Rand) string {
	for {
		s := oddString(rng)
		if s != "" && !strings.Contains(s, "..") {
			return s
		}
	}
}

// mutateQuery changes the query: a parameter of another value, an
// unknown one, one given twice, or a malformed query string.
func mutateQuery(rng *rand.Rand, c *call) string {
	q, err := url.ParseQuery(c.query)
	if err != nil {
		q = url.Values{}
	}
	names := sortedKeys(q)
	switch rng.IntN(6) {
	case 0, 1:
		if len(names) > 0 {
			q.Set(names[rng.IntN(len(names))], oddString(rng))
			break
		}
		fallthrough
	case 2:
		q.Set(pick(rng, []string{"stauts", "ID", "wait", "limit", "x", "é", ""}), oddString(rng))
	case 3:
		if len(names) > 0 {
			q.Add(names[0], oddString(rng))
		}
	case 4:
		return c.query + pick(rng, []string{"&%zz", "&a=%", "&=", "&&&", ";", "&wait=%00"})
	case 5:
		if len(names) > 0 {
			q.Del(names[rng.IntN(len(names))])
		}
	}
	return q.Encode()
}
