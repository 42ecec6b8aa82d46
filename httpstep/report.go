package httpstep

import (
	"errors"
	"fmt"
	"time"

	"reprise/retry"
)

// A Report is a failure as an endpoint or a remote pull worker describes it
// on the wire: {"type", "message", "retryable", "retry_after_ms"}.
type Report struct {
	// Type names the error for policies. Required.
	Type    string `json:"type"`
	Message string `json:"message,omitempty"`
	// Retryable says whether another attempt may help; absent means no.
	Retryable *bool `json:"retryable,omitempty"`
	// RetryAfterMS is a minimum delay before the next attempt, in
	// milliseconds; zero means none. Over MaxRetryAfter counts as MaxRetryAfter.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// ErrorFromReport returns the attempt error r describes, or what is wrong
// with r: an empty type or a negative retry_after_ms.
func ErrorFromReport(r Report) (*retry.Error, error) {
	var errs []error
	if r.Type == "" {
		errs = append(errs, errors.New("type is empty"))
	}
	if r.RetryAfterMS < 0 {
		errs = append(errs, fmt.Errorf("retry_after_ms %d is negative", r.RetryAfterMS))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("error report: %w", err)
	}
	return r.retryError(), nil
}

// retryError converts r without checking it.
func (r *Report) retryError() *retry.Error {
	return &retry.Error{
		Type:       r.Type,
		Message:    r.Message,
		Retryable:  r.Retryable != nil && *r.Retryable,
		RetryAfter: time.Duration(min(r.RetryAfterMS, MaxRetryAfter.Milliseconds())) * time.Millisecond,
	}
}
