package retry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

type rateLimited struct{ err error }

func (e *rateLimited) Error() string     { return "rate limited" }
func (e *rateLimited) ErrorType() string { return "RateLimitError" }
func (e *rateLimited) Unwrap() error     { return e.err }

type valueErr struct{}

func (valueErr) Error() string { return "value" }

type multi struct{ errs []error }

func (m multi) Error() string   { return "multi" }
func (m multi) Unwrap() []error { return m.errs }

func TestTypeChain(t *testing.T) {
	t.Parallel()
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"nil", nil, nil},
		{"errors.New", errors.New("x"), []string{"errorString"}},
		{"ErrorType method", NewError("NetworkError", "down"), []string{"NetworkError"}},
		{"*net.OpError is OpError", opErr, []string{"OpError", "DeadlineExceededError"}},
		{"value receiver", valueErr{}, []string{"valueErr"}},
		{"fmt.Errorf %w is skipped", fmt.Errorf("call: %w", valueErr{}), []string{"valueErr"}},
		{"fmt.Errorf with two %w is skipped", fmt.Errorf("a: %w, b: %w", valueErr{}, NewError("B", "")), []string{"valueErr", "B"}},
		{"fmt.Errorf without %w", fmt.Errorf("plain %v", 1), []string{"errorString"}},
		{"errors.Join is skipped", errors.Join(NewError("A", ""), NewError("B", "")), []string{"A", "B"}},
		{"Unwrap() []error, depth first", multi{[]error{fmt.Errorf("x: %w", &rateLimited{NewError("Inner", "")}), NewError("B", "")}}, []string{"multi", "RateLimitError", "Inner", "B"}},
		{"ErrorType then its wrapped error", &rateLimited{opErr}, []string{"RateLimitError", "OpError", "DeadlineExceededError"}},
		{"Permanent and RetryAfter are skipped", Permanent(RetryAfter(time.Second, NewError("A", ""))), []string{"A"}},
		{"duplicates once", errors.Join(NewError("A", ""), NewError("A", ""), NewError("B", "")), []string{"A", "B"}},
		{"context.DeadlineExceeded", fmt.Errorf("step: %w", context.DeadlineExceeded), []string{"deadlineExceededError"}},
		{"*fs.PathError", &fs.PathError{Op: "open", Path: "/x", Err: fs.ErrNotExist}, []string{"PathError", "errorString"}},
		{"an unnamed type has no name", struct{ error }{errors.New("x")}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := TypeChain(tt.err); !slices.Equal(got, tt.want) {
				t.Errorf("TypeChain = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAppendTypeChain(t *testing.T) {
	t.Parallel()
	got := AppendTypeChain([]string{"Panic"}, fmt.Errorf("x: %w", NewError("Panic", "")))
	if !slices.Equal(got, []string{"Panic"}) {
		t.Errorf("AppendTypeChain = %q, want the name once", got)
	}
}

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("x"), false},
		{Permanent(errors.New("x")), true},
		{fmt.Errorf("wrapped: %w", Permanent(errors.New("x"))), true},
		{errors.Join(errors.New("a"), Permanent(errors.New("b"))), true},
		{NewError("A", ""), false},
		{&Error{Type: "A", Retryable: false}, true},
		{RetryAfter(time.Second, errors.New("x")), false},
	}
	for _, tt := range tests {
		if got := IsPermanent(tt.err); got != tt.want {
			t.Errorf("IsPermanent(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
	if Permanent(nil) != nil || RetryAfter(time.Second, nil) != nil {
		t.Error("Permanent(nil) or RetryAfter(d, nil) is not nil")
	}
}

func TestRetryAfterOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want time.Duration
	}{
		{nil, 0},
		{errors.New("x"), 0},
		{RetryAfter(2*time.Second, errors.New("x")), 2 * time.Second},
		{fmt.Errorf("w: %w", RetryAfter(time.Second, RetryAfter(3*time.Second, errors.New("x")))), 3 * time.Second},
		{&Error{Type: "HTTPError", Retryable: true, RetryAfter: time.Minute}, time.Minute},
		{errors.Join(RetryAfter(time.Second, errors.New("a")), RetryAfter(5*time.Second, errors.New("b"))), 5 * time.Second},
	}
	for _, tt := range tests {
		if got := RetryAfterOf(tt.err); got != tt.want {
			t.Errorf("RetryAfterOf(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	if got := NewError("Timeout", "").Error(); got != "Timeout" {
		t.Errorf("Error() = %q", got)
	}
	if got := NewError("Timeout", "after 5s").Error(); got != "Timeout: after 5s" {
		t.Errorf("Error() = %q", got)
	}
}

// A failure built from an error the way the engine builds it.
func TestDecideFromError(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "[retry: 3, backoff: 1s] [OpError -> retry: 9, backoff: 100ms] [non_retryable: (ValidationError)]")
	tests := []struct {
		name   string
		err    error
		retry  bool
		rule   int
		delay  time.Duration
		reason Reason
	}{
		{"a wrapped OpError takes its rule", fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("refused")}), true, 1, 100 * time.Millisecond, ""},
		{"retry-after raises the delay", RetryAfter(7*time.Second, errors.New("busy")), true, 0, 7 * time.Second, ""},
		{"permanent stops", fmt.Errorf("x: %w", Permanent(errors.New("bad"))), false, -1, 0, ReasonPermanent},
		{"non_retryable stops", fmt.Errorf("x: %w", NewError("ValidationError", "")), false, -1, 0, ReasonPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := p.Decide(&Failure{Attempt: 1, Types: TypeChain(tt.err), Permanent: IsPermanent(tt.err), RetryAfter: RetryAfterOf(tt.err)})
			want := Decision{Retry: tt.retry, Delay: tt.delay, Rule: tt.rule, Reason: tt.reason}
			if d != want {
				t.Errorf("Decide = %+v, want %+v", d, want)
			}
		})
	}
}
