package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"reprise"
)

// Problem is an error answer of the API, served as application/problem+json
// (RFC 9457). A Client returns it as the error of a call that got one.
type Problem struct {
	// Type names the kind of problem: one of the Problem* constants.
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Field is the request field at fault, as a dotted path ("steps.0"),
	// "body" for a body that is not JSON at all, or empty.
	Field string `json:"field,omitempty"`
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
	ProblemTooLarge      = "urn:reprise:problem:too-large"      // 413
	ProblemInternal      = "urn:reprise:problem:internal"       // 500
	ProblemUnavailable   = "urn:reprise:problem:unavailable"    // 503: shutting down
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
// reprise.ErrNotFound), reprise.ErrLeaseLost, reprise.ErrRunFinished.
func (p *Problem) Unwrap() error {
	switch p.Type {
	case ProblemNotFound:
		return reprise.ErrNotFound
	case ProblemLeaseLost:
		return reprise.ErrLeaseLost
	case ProblemRunFinished:
		return reprise.ErrRunFinished
	case ProblemNotRedrivable:
		return reprise.ErrNotRedrivable
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

// writeProblem answers p.
func writeProblem(w http.ResponseWriter, p *Problem) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	json.NewEncoder(w).Encode(p)
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// decode reads the request's JSON body into v: one object, no unknown
// fields, at most limit bytes. Its problem names the field at fault.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) *Problem {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return &Problem{Type: ProblemUnsupported, Title: "Unsupported Media Type", Status: http.StatusUnsupportedMediaType,
			Detail: fmt.Sprintf("Content-Type %q: send application/json", ct)}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeProblem(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return decodeProblem(err, limit)
		}
		return invalid("body", "the body holds more than one JSON value")
	}
	return nil
}

// decodeProblem explains a decoding error.
func decodeProblem(err error, limit int64) *Problem {
	var (
		mbe *http.MaxBytesError
		se  *json.SyntaxError
		te  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &mbe):
		return &Problem{Type: ProblemTooLarge, Title: "Content Too Large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("the body is over the limit of %d bytes", limit)}
	case errors.Is(err, io.EOF):
		return invalid("body", "the body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("body", "the body ends in the middle of a JSON value")
	case errors.As(err, &se):
		return invalid("body", "the body is not JSON: %v at offset %d", se, se.Offset)
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("body", "the body is a JSON %s; send an object", te.Value)
		}
		return invalid(te.Field, "%s is a JSON %s; want %s", te.Field, te.Value, jsonKind(te.Type.Kind().String()))
	}
	// encoding/json has no type for an unknown field; its message is the
	// only place the name is.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		field := name
		if field == "" {
			field = "body"
		}
		return invalid(field, "unknown field %q", name)
	}
	return invalid("body", "%v", err)
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "bool":
		return "a boolean"
	}
	return "a number"
}
