package httpstep_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"reprise/httpstep"
	"reprise/retry"
)

func ExampleCaller_Call() {
	// An endpoint that declines the first attempt and succeeds on the second.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Reprise-Attempt") == "1" {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"success": true, "output": {"charge": "ch_1"}}`)
	}))
	defer srv.Close()

	c, err := httpstep.New(httpstep.Options{})
	if err != nil {
		panic(err)
	}
	req := &httpstep.Request{RunID: "run-1", Step: "charge", IdempotencyKey: "k1", Input: json.RawMessage(`{"amount": 42}`)}
	for attempt := 1; attempt <= 2; attempt++ {
		req.Attempt = attempt
		out, err := c.Call(context.Background(), srv.URL, req)
		var re *retry.Error
		if errors.As(err, &re) {
			fmt.Printf("attempt %d: %s, retryable %v, retry after %v\n", attempt, re.Type, re.Retryable, re.RetryAfter)
			continue
		}
		fmt.Printf("attempt %d: output %s\n", attempt, out)
	}
	// Output:
	// attempt 1: HTTP5xx, retryable true, retry after 2s
	// attempt 2: output {"charge": "ch_1"}
}
