package retry

import (
	"reflect"
	"time"
)

// An Error is an error that names its own type: how the engine reports
// timeouts and panics, and how remote workers and HTTP steps report theirs.
type Error struct {
	Type    string
	Message string
	// Retryable, when false, makes the error permanent.
	Retryable bool
	// RetryAfter is a minimum delay before the next attempt, or zero.
	RetryAfter time.Duration
}

// NewError returns a retryable error of type typ.
func NewError(typ, message string) *Error {
	return &Error{Type: typ, Message: message, Retryable: true}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Type
	}
	return e.Type + ": " + e.Message
}

// ErrorType names the error's type for policies.
func (e *Error) ErrorType() string { return e.Type }

// Permanent reports whether the error must not be retried.
func (e *Error) Permanent() bool { return !e.Retryable }

// RetryAfterHint returns the error's minimum delay.
func (e *Error) RetryAfterHint() time.Duration { return e.RetryAfter }

// Permanent wraps err so that it is never retried. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() error   { return e.err }
func (e *permanentError) Permanent() bool { return true }

// RetryAfter wraps err with a hint that the next attempt should wait at least
// d. RetryAfter(d, nil) is nil.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{d: d, err: err}
}

type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string                 { return e.err.Error() }
func (e *retryAfterError) Unwrap() error                 { return e.err }
func (e *retryAfterError) RetryAfterHint() time.Duration { return e.d }

// IsPermanent reports whether any error in err's chain says it is permanent,
// by a method Permanent() bool.
func IsPermanent(err error) bool {
	found := false
	walk(err, func(e error) bool {
		if p, ok := e.(interface{ Permanent() bool }); ok && p.Permanent() {
			found = true
		}
		return !found
	})
	return found
}

// RetryAfterOf returns the largest retry-after hint in err's chain, given by
// a method RetryAfterHint() time.Duration, or zero.
func RetryAfterOf(err error) time.Duration {
	var d time.Duration
	walk(err, func(e error) bool {
		if h, ok := e.(interface{ RetryAfterHint() time.Duration }); ok {
			d = max(d, h.RetryAfterHint())
		}
		return true
	})
	return d
}

// TypeChain returns the type names of every error reachable from err by
// Unwrap() error and Unwrap() []error, depth first, outermost first, without
// duplicates. An error's name is its ErrorType() string if it has one, else
// its Go type name without package or pointer (*net.OpError → OpError).
//
// The wrappers that only add context or flags are left out: those of
// fmt.Errorf and errors.Join, and this package's Permanent and RetryAfter.
func TypeChain(err error) []string {
	return AppendTypeChain(nil, err)
}

// AppendTypeChain appends err's type chain to dst.
func AppendTypeChain(dst []string, err error) []string {
	walk(err, func(e error) bool {
		name, ok := TypeName(e)
		if ok && !contains(dst, name) {
			dst = append(dst, name)
		}
		return true
	})
	return dst
}

// TypeName returns the name of err's own type, and false for the wrappers
// that TypeChain leaves out.
func TypeName(err error) (string, bool) {
	if t, ok := err.(interface{ ErrorType() string }); ok {
		return t.ErrorType(), true
	}
	switch err.(type) {
	case *permanentError, *retryAfterError:
		return "", false
	}
	t := reflect.TypeOf(err)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.PkgPath() + "." + t.Name() {
	case "fmt.wrapError", "fmt.wrapErrors", "errors.joinError", ".":
		// The last is an unnamed type, such as struct{ error }: no name
		// that a policy could write.
		return "", false
	}
	return t.Name(), true
}

// walk calls fn on err and every error it wraps, depth first, until fn
// returns false.
func walk(err error, fn func(error) bool) bool {
	for err != nil {
		if !fn(err) {
			return false
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if !walk(e, fn) {
					return false
				}
			}
			return true
		default:
			return true
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
