package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"reprise"
	"reprise/internal/redact"
	"reprise/internal/strictjson"
	"reprise/store"
)

// Problem is an error answer of the API, served as application/problem+json
// (RFC 9457). A Client returns it as the error of a call that got one.
//
//nolint:errname // RFC 9457's name for it, and the API's: clients match *httpapi.Problem
type Problem struct {
	// Type names the kind of problem: one of the Problem* constants.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field is the request field at fault, as a dotted path ("steps.0"),
	// "body" for a body that is not JSON at all, "query" for a query
	// string that cannot be parsed, or empty.
	Field string `json:"field,omitempty"`
	// ErrorID names an internal error (500) in the server's log, which
	// has the error itself; the answer has nothing more of it.
	ErrorID string `json:"error_id,omitempty"`
	// Errors are the faults of a flow file that POST /v1/flows found,
	// each with its place in the body.
	Errors []FlowError `json:"errors,omitempty"`
}

// A FlowError is one fault of a flow file: where (line and column from
// 1, 0 when unknown) and what.
type FlowError struct {
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Message string `json:"message"`
}

// The types of Problem. More may be added.
const (
	ProblemInvalid       = "urn:reprise:problem:invalid"        // 400: a field or the body is wrong
	ProblemUnauthorized  = "urn:reprise:problem:unauthorized"   // 401
	ProblemNotFound      = "urn:reprise:problem:not-found"      // 404
	ProblemMethod        = "urn:reprise:problem:method"         // 405
	ProblemRunFinished   = "urn:reprise:problem:run-finished"   // 409: the run has finished
	ProblemLeaseLost     = "urn:reprise:problem:lease-lost"     // 409: stale token or lapsed lease
	ProblemNotRedrivable = "urn:reprise:problem:not-redrivable" // 409: the run did not fail on a step
	ProblemStepInUse     = "urn:reprise:problem:step-in-use"    // 409: runs still need the step
	ProblemStepConflict  = "urn:reprise:problem:step-conflict"  // 409: a Go step's name, or a change of kind
	ProblemTooLarge      = "urn:reprise:problem:too-large"      // 413
	ProblemInternal      = "urn:reprise:problem:internal"       // 500
	ProblemUnavailable   = "urn:reprise:problem:unavailable"    // 503: shutting down
	ProblemBusy          = "urn:reprise:problem:busy"           // 429: too many runs wait to start; see Retry-After
	ProblemUnsupported   = "urn:reprise:problem:unsupported"    // 415
)

func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", p.Status, p.Title)
	if p.Field != "" {
		fmt.Fprintf(&b, " (field %s)", p.Field)
	}
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	}
	return b.String()
}

// Unwrap maps the problem to the engine's sentinel errors, so that callers
// match a Client's errors as they match the engine's: errors.Is(err,
// reprise.ErrNotFound), reprise.ErrLeaseLost, reprise.ErrRunFinished,
// reprise.ErrBusy.
func (p *Problem) Unwrap() error {
	switch p.Type {
	case ProblemNotFound:
		return store.ErrNotFound
	case ProblemLeaseLost:
		return store.ErrLeaseLost
	case ProblemRunFinished:
		return store.ErrRunFinished
	case ProblemNotRedrivable:
		return store.ErrNotRedrivable
	case ProblemStepInUse:
		return store.ErrStepInUse
	case ProblemBusy:
		return reprise.ErrBusy
	}
	return nil
}

func invalid(field, format string, args ...any) *Problem {
	return &Problem{Type: ProblemInvalid, Title: "Bad Request", Status: http.StatusBadRequest,
		Detail: fmt.Sprintf(format, args...), Field: field}
}

func notFound(format string, args ...any) *Problem {
	return &Problem{Type: ProblemNotFound, Title: "Not Found", Status: http.StatusNotFound, Detail: fmt.Sprintf(format, args...)}
}

// writeProblem answers p, its detail and its faults' messages as
// redact.String shows them: they may quote a URL of the request.
func writeProblem(w http.ResponseWriter, p *Problem) {
	shown := *p
	shown.Detail = redact.String(p.Detail)
	shown.Errors = make([]FlowError, len(p.Errors))
	for i, e := range p.Errors {
		e.Message = redact.String(e.Message)
		shown.Errors[i] = e
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	// A write that fails is a client gone, with no one left to tell.
	_ = json.NewEncoder(w).Encode(&shown)
}

// writeJSON answers v with status. v is the server's own answer, which
// encodes (the JSON in it was checked when it came in); a write that
// fails is a client gone, with no one left to tell.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads the request's JSON body into v, strictly: one object of at
// most limit bytes; field names exactly as v names them (case counts), each
// once, none that v lacks; strings of valid UTF-8 without NUL, anywhere in
// the body; integers where v has integers. Its problem names the field at
// fault.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) *Problem {
	if p := checkMediaType(r.Header.Get("Content-Type"), "send application/json", "application/json"); p != nil {
		return p
	}
	body, p := readBody(w, r, limit)
	if p != nil {
		return p
	}
	if p := checkJSON(body); p != nil {
		return p
	}
	if err := jsonv2.Unmarshal(body, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return unmarshalProblem(err)
	}
	return nil
}

// checkMediaType accepts a body whose Content-Type is absent or one of
// types, without a charset other than UTF-8; its 415 says what to send.
func checkMediaType(ct, send string, types ...string) *Problem {
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	switch {
	case err != nil, !slices.Contains(types, mt):
	case params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8"):
		send = "send UTF-8"
	default:
		return nil
	}
	return &Problem{Type: ProblemUnsupported, Title: "Unsupported Media Type", Status: http.StatusUnsupportedMediaType,
		Detail: fmt.Sprintf("Content-Type %q: %s", ct, send)}
}

// readBody reads the request's body, of at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *Problem) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &Problem{Type: ProblemTooLarge, Title: "Content Too Large", Status: http.StatusRequestEntityTooLarge,
				Detail: fmt.Sprintf("the body is over the limit of %d bytes", limit)}
		}
		return nil, invalid("body", "reading the body: %v", err)
	}
	return body, nil
}

// checkJSON checks that body is one JSON object, with no name twice in an
// object and no string that is not valid UTF-8 or holds a NUL (which
// PostgreSQL cannot store in text), at any depth (strictjson.Check).
func checkJSON(body []byte) *Problem {
	err := strictjson.Check(body)
	var ne *strictjson.NULError
	switch {
	case errors.Is(err, strictjson.ErrEmpty):
		return invalid("body", "the body is empty; send a JSON object")
	case errors.Is(err, strictjson.ErrTrailing):
		return invalid("body", "the body holds more than one JSON value")
	case errors.As(err, &ne) && ne.Name:
		// A member's name: the pointer ends with it.
		field := fieldPath(ne.Pointer.Parent())
		return invalid(field, "a field name in %s holds a NUL character (\\u0000), which no string may", field)
	case errors.As(err, &ne):
		field := fieldPath(ne.Pointer)
		return invalid(field, "%s holds a NUL character (\\u0000), which no string may", field)
	case err != nil:
		return syntaxProblem(err)
	}
	if k := jsontext.Value(body).Kind(); k != '{' {
		return invalid("body", "the body is a JSON %s; send an object", kindName(k))
	}
	return nil
}

// syntaxProblem explains a body that is not JSON, or names a field twice.
func syntaxProblem(err error) *Problem {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return invalid("body", "the body is not JSON: %v", err)
	}
	field := fieldPath(se.JSONPointer)
	switch {
	case errors.Is(se.Err, io.ErrUnexpectedEOF):
		return invalid("body", "the body ends in the middle of a JSON value")
	case errors.Is(se.Err, jsontext.ErrDuplicateName):
		return invalid(field, "%s is given more than once", field)
	}
	return invalid(field, "the body is not JSON: %v at offset %d", se.Err, se.ByteOffset)
}

// unmarshalProblem explains a field of the wrong type or an unknown one.
func unmarshalProblem(err error) *Problem {
	var se *jsonv2.SemanticError
	if !errors.As(err, &se) {
		return invalid("body", "%v", err)
	}
	field := fieldPath(se.JSONPointer)
	if errors.Is(se.Err, jsonv2.ErrUnknownName) {
		name := se.JSONPointer.LastToken()
		return invalid(field, "unknown field %q%s", name, spellingHint(se.GoType, name))
	}
	t := se.GoType
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	want := "another type"
	if t != nil {
		want = wantKind(t.Kind())
	}
	if se.JSONKind == '0' && want == "an integer" {
		if errors.Is(se.Err, strconv.ErrRange) {
			return invalid(field, "%s %s is out of range", field, se.JSONValue)
		}
		return invalid(field, "%s %s is not an integer", field, se.JSONValue)
	}
	switch {
	case se.Err != nil: // a value's own UnmarshalJSON refused it
		return invalid(field, "%s: %v", field, se.Err)
	case se.JSONKind == 0:
		return invalid(field, "%s: %v", field, err)
	}
	return invalid(field, "%s is a JSON %s; want %s", field, kindName(se.JSONKind), want)
}

// spellingHint names the field of struct type t that name matches but for
// case, if there is one.
func spellingHint(t reflect.Type, name string) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	for f := range t.Fields() {
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.IsExported() && tag != "" && tag != "-" && strings.EqualFold(tag, name) {
			return fmt.Sprintf(" (names are case-sensitive: %q)", tag)
		}
	}
	return ""
}

// fieldPath is a JSON pointer as a dotted path ("steps.1"), or "body" for
// the whole body (and for a member of the body named ""). It ends before a
// name that is not valid UTF-8 or holds a NUL.
func fieldPath(p jsontext.Pointer) string {
	var parts []string
	for tok := range p.Tokens() {
		if !cleanString(tok) {
			break
		}
		parts = append(parts, tok)
	}
	if path := strings.Join(parts, "."); path != "" {
		return path
	}
	return "body"
}

func kindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	}
	return "value"
}

func wantKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}
