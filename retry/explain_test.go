package retry_test

import (
	"fmt"
	"testing"
	"time"

	"reprise/retry"
)

func TestExplain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy string
		f      retry.Failure
		limit  int
		want   string
	}{
		{"[retry: 3, backoff: 100ms]", retry.Failure{Attempt: 1}, 0,
			"1 retry 100ms at 100ms; 2 retry 200ms at 300ms; 3 retry 400ms at 700ms; 4 stop exhausted at 700ms"},
		// From the attempt a step is at, with the time it has spent.
		{"[retry: 3, backoff: 100ms]", retry.Failure{Attempt: 3, Elapsed: time.Second}, 0,
			"3 retry 400ms at 1.4s; 4 stop exhausted at 1.4s"},
		{"[retry: 3, backoff: 100ms]", retry.Failure{Attempt: 9}, 0, "9 stop exhausted at 0s"},
		{"[retry: unlimited, backoff: 1s, backoff_kind: fixed] [deadline: 2500ms]", retry.Failure{Attempt: 1}, 0,
			"1 retry 1s at 1s; 2 retry 1s at 2s; 3 stop deadline at 2s"},
		{"[retry: unlimited, backoff_kind: none]", retry.Failure{Attempt: 4}, 2, "4 retry 0s at 0s; 5 retry 0s at 0s; more"},
		{"[NetworkError -> retry: 5]", retry.Failure{Attempt: 1, Types: []string{"Timeout"}}, 0, "1 stop not_covered at 0s"},
		{"[retry: 3] [non_retryable: (Bad)]", retry.Failure{Attempt: 2, Types: []string{"Bad"}}, 0, "2 stop permanent at 0s"},
	}
	for _, tt := range tests {
		p, err := retry.Parse(tt.policy)
		if err != nil {
			t.Fatal(err)
		}
		decisions, more := p.Explain(tt.f, tt.limit)
		got := ""
		for i, d := range decisions {
			if i > 0 {
				got += "; "
			}
			if d.Retry {
				got += fmt.Sprintf("%d retry %v at %v", d.Attempt, d.Delay, d.At)
			} else {
				got += fmt.Sprintf("%d stop %s at %v", d.Attempt, d.Reason, d.At)
			}
		}
		if more {
			got += "; more"
		}
		if got != tt.want {
			t.Errorf("%s from %+v: %s\nwant %s", tt.policy, tt.f, got, tt.want)
		}
	}
}

func ExamplePolicy_Explain() {
	p, _ := retry.Parse("[retry: 4, backoff: 1s] [deadline: 10s]")
	// Attempt 2 of a step that started 1.5 s ago has just failed.
	decisions, _ := p.Explain(retry.Failure{Attempt: 2, Types: []string{"NetworkError"}, Elapsed: 1500 * time.Millisecond}, 0)
	for _, d := range decisions {
		if d.Retry {
			fmt.Printf("attempt %d fails: retry after %v, at %v\n", d.Attempt, d.Delay, d.At)
		} else {
			fmt.Printf("attempt %d fails: stop (%s)\n", d.Attempt, d.Reason)
		}
	}
	// Output:
	// attempt 2 fails: retry after 2s, at 3.5s
	// attempt 3 fails: retry after 4s, at 7.5s
	// attempt 4 fails: stop (deadline)
}
