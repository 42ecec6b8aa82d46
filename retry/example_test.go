package retry_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"reprise/retry"
)

func ExampleParse() {
	p, err := retry.Parse("[retry: 3, backoff: 60] [Timeout -> retry: 0] [timeout: 2m]")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p)
	fmt.Println(p.Rules[0].MaxAttempts, p.Rules[0].Backoff.Base, p.Timeout)
	// Output:
	// [retry: 3, backoff: 1m] [Timeout -> retry: 0] [timeout: 2m]
	// 4 1m0s 2m0s
}

func ExampleParse_error() {
	_, err := retry.Parse("[retry: 3, backof: 1s]")
	var se *retry.SyntaxError
	if errors.As(err, &se) {
		fmt.Println(se.Line, se.Column)
	}
	fmt.Println(err)
	// Output:
	// 1 12
	// line 1, column 12: unknown key "backof" (did you mean backoff?)
}

func ExamplePolicy_String() {
	p := retry.Attempts(5, retry.Exponential(100*time.Millisecond, 2, 30*time.Second)).
		WithRule(retry.Rule{On: []string{"ValidationError"}, MaxAttempts: 1}).
		WithTimeout(10 * time.Second)
	fmt.Println(p)
	fmt.Println(retry.Default)
	fmt.Println(retry.Never)
	// Output:
	// [retry: 4, backoff: 100ms, max_backoff: 30s] [ValidationError -> retry: 0] [timeout: 10s]
	// [retry: 2]
	// [retry: 0]
}

func ExamplePolicy_Decide() {
	p, _ := retry.Parse("[retry: 3, backoff: 1s] [NetworkError -> retry: 5, backoff: 100ms]")
	err := fmt.Errorf("charge card: %w", retry.NewError("NetworkError", "connection reset"))
	for n := 1; ; n++ {
		d := p.Decide(&retry.Failure{Attempt: n, Types: retry.TypeChain(err)})
		if !d.Retry {
			fmt.Printf("attempt %d: stop (%s)\n", n, d.Reason)
			break
		}
		fmt.Printf("attempt %d: retry in %v (rule %d)\n", n, d.Delay, d.Rule)
	}
	// Output:
	// attempt 1: retry in 100ms (rule 1)
	// attempt 2: retry in 200ms (rule 1)
	// attempt 3: retry in 400ms (rule 1)
	// attempt 4: retry in 800ms (rule 1)
	// attempt 5: retry in 1.6s (rule 1)
	// attempt 6: stop (exhausted)
}

func ExampleParseAny() {
	for _, s := range []string{
		`[retry: 4, backoff: 1s, backoff_kind: linear]`,
		`{"max_retries": 3, "backoff": 500, "backoff_type": "fixed"}`,
		`{"initial_interval": "1s", "backoff_coefficient": 2, "maximum_interval": "30s", "maximum_attempts": 5}`,
		`{"rules": [{"on": ["Timeout"], "max_attempts": 1}]}`,
	} {
		p, err := retry.ParseAny(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(p)
	}
	// Output:
	// [retry: 4, backoff: 1s, backoff_kind: linear]
	// [retry: 3, backoff: 500ms, backoff_kind: fixed]
	// [retry: 4, backoff: 1s, max_backoff: 30s]
	// [Timeout -> retry: 0]
}

func ExampleParseWorkConfig() {
	p, _ := retry.ParseWorkConfig([]byte(`{"max_retries": -1, "backoff": 200, "max_backoff": 10000}`))
	fmt.Println(p)
	// Output: [retry: unlimited, backoff: 200ms, max_backoff: 10s]
}

func ExampleParseTemporal() {
	p, _ := retry.ParseTemporal([]byte(`{"maximum_attempts": 3, "non_retryable_error_types": ["InvalidInput"]}`))
	fmt.Println(p)
	// Output: [retry: 2, backoff: 1s, max_backoff: 100s] [non_retryable: (InvalidInput)]
}

func ExamplePolicy_MarshalJSON() {
	p, _ := retry.Parse("[NetworkError -> retry: 2, backoff: 1s, jitter: full] [deadline: 1h]")
	data, _ := json.Marshal(p)
	fmt.Println(string(data))
	// Output:
	// {"rules":[{"on":["NetworkError"],"max_attempts":3,"backoff":{"kind":"exponential","base":"1s","multiplier":2,"jitter":"full"}}],"deadline":"1h"}
}

func ExampleTypeChain() {
	err := fmt.Errorf("fetch: %w", &net.OpError{Op: "dial", Err: retry.NewError("NetworkError", "refused")})
	fmt.Println(retry.TypeChain(err))
	// Output: [OpError NetworkError]
}

func ExamplePolicy_Normalize() {
	p := retry.Policy{Rules: []retry.Rule{{On: []string{"A", "A"}, MaxAttempts: 0, Backoff: retry.Fixed(time.Second)}}}
	n := p.Normalize()
	fmt.Println(n.Rules[0].On, n.Rules[0].MaxAttempts, n.Rules[0].Backoff == retry.None)
	// Output: [A] 1 true
}
