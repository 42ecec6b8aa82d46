package retry

import (
	"math"
	"testing"
	"time"
)

// attemptsAllowed counts the attempts p gives a step whose every attempt
// fails with types, up to limit.
func attemptsAllowed(p *Policy, types []string, limit int) (int, Decision) {
	for n := 1; ; n++ {
		d := p.Decide(&Failure{Attempt: n, Types: types})
		if !d.Retry || n == limit {
			return n, d
		}
	}
}

// The cases of how a rule is chosen (docs/policies.md), one by one.
func TestDecideChoosing(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		policy   string
		types    []string
		attempts int // attempts in all before the step stops
		rule     int
		reason   Reason
	}{
		{"spec: a timeout never retries", "[retry: 5] [Timeout -> retry: 0]", []string{"Timeout"}, 1, 1, ReasonExhausted},
		{"spec: other errors use the catch-all", "[retry: 5] [Timeout -> retry: 0]", []string{"IOError"}, 6, 0, ReasonExhausted},
		{"spec: a NetworkError gets 6 attempts", "[retry: 3] [NetworkError -> retry: 5]", []string{"NetworkError"}, 6, 1, ReasonExhausted},
		{"spec: other errors get 4", "[retry: 3] [NetworkError -> retry: 5]", []string{"Error"}, 4, 0, ReasonExhausted},
		{"a typed rule wins even when it allows fewer", "[retry: 9] [A -> retry: 1]", []string{"A"}, 2, 1, ReasonExhausted},
		{"typed rules: the most attempts", "[A -> retry: 1] [B -> retry: 4] [A -> retry: 2]", []string{"A", "B"}, 5, 1, ReasonExhausted},
		{"typed ties go to the first written", "[A -> retry: 2] [B -> retry: 2]", []string{"B", "A"}, 3, 0, ReasonExhausted},
		{"catch-alls: the most attempts", "[retry: 1] [retry: 3] [retry: 2]", []string{"E"}, 4, 1, ReasonExhausted},
		{"catch-all ties go to the first", "[retry: 2] [retry: 2, backoff: 5s]", []string{"E"}, 3, 0, ReasonExhausted},
		{"a filter matches any type of the chain", "[(X, NetworkError) -> retry: 2]", []string{"OpError", "NetworkError"}, 3, 0, ReasonExhausted},
		{"not covered: no rule matches", "[NetworkError -> retry: 5]", []string{"Timeout"}, 1, -1, ReasonNotCovered},
		{"not covered: no rules at all", "[timeout: 5s]", []string{"E"}, 1, -1, ReasonNotCovered},
		{"not covered: no types at all", "[A -> retry: 5]", nil, 1, -1, ReasonNotCovered},
		{"non_retryable beats every rule", "[A -> retry: 5] [non_retryable: (B)]", []string{"A", "B"}, 1, -1, ReasonPermanent},
		{"unlimited keeps going", "[retry: unlimited, backoff: 1ms]", []string{"E"}, 1000, 0, ""},
		{"retry: 0 is one attempt", "[retry: 0]", []string{"E"}, 1, 0, ReasonExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := mustParse(t, tt.policy)
			n, last := attemptsAllowed(&p, tt.types, 1000)
			if n != tt.attempts || last.Rule != tt.rule || last.Reason != tt.reason {
				t.Errorf("%s with %v: %d attempts, last decision %+v; want %d attempts, rule %d, reason %q",
					tt.policy, tt.types, n, last, tt.attempts, tt.rule, tt.reason)
			}
		})
	}
}

func TestDecidePermanent(t *testing.T) {
	t.Parallel()
	p := Attempts(5, Fixed(time.Second))
	d := p.Decide(&Failure{Attempt: 1, Types: []string{"E"}, Permanent: true})
	if d.Retry || d.Reason != ReasonPermanent || d.Rule != -1 {
		t.Errorf("permanent error: %+v, want a stop with reason permanent and rule -1", d)
	}
}

func TestDecideZeroPolicy(t *testing.T) {
	t.Parallel()
	var p Policy
	if d := p.Decide(&Failure{Attempt: 1, Types: []string{"E"}}); d.Retry || d.Reason != ReasonNotCovered {
		t.Errorf("zero policy: %+v, want not_covered", d)
	}
}

func TestDecideDelays(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "[retry: 5, backoff: 100ms, max_backoff: 1s]")
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second}
	for i, w := range want {
		d := p.Decide(&Failure{Attempt: i + 1, Types: []string{"E"}})
		if !d.Retry || d.Delay != w {
			t.Errorf("attempt %d: %+v, want retry after %v", i+1, d, w)
		}
	}
}

func TestDecideRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		policy     string
		retryAfter time.Duration
		want       time.Duration
		atLeast    bool // jittered: want is a lower bound
	}{
		{"a hint above the backoff raises it", "[retry: 3, backoff: 1s]", 5 * time.Second, 5 * time.Second, false},
		{"a hint below the backoff changes nothing", "[retry: 3, backoff: 10s]", 5 * time.Second, 10 * time.Second, false},
		{"a hint raises past max_backoff", "[retry: 3, backoff: 1s, max_backoff: 2s]", time.Minute, time.Minute, false},
		{"a hint raises a none backoff", "[retry: 3, backoff_kind: none]", time.Second, time.Second, false},
		{"full jitter never goes below the hint", "[retry: 3, backoff: 1s, jitter: full]", 3 * time.Second, 3 * time.Second, true},
		{"a huge hint does not overflow", "[retry: 3]", math.MaxInt64, maxDelay, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := mustParse(t, tt.policy)
			d := p.Decide(&Failure{Attempt: 1, Types: []string{"E"}, RetryAfter: tt.retryAfter, Key: "k"})
			if !d.Retry {
				t.Fatalf("%+v, want a retry", d)
			}
			if tt.atLeast && d.Delay < tt.want {
				t.Errorf("delay %v is below the hint %v", d.Delay, tt.want)
			}
			if !tt.atLeast && d.Delay != tt.want {
				t.Errorf("delay %v, want %v", d.Delay, tt.want)
			}
		})
	}
}

func TestDecideDeadline(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "[retry: unlimited, backoff: 10s, backoff_kind: fixed] [deadline: 1m]")
	tests := []struct {
		elapsed time.Duration
		retry   bool
	}{
		{0, true},
		{49 * time.Second, true},
		{50 * time.Second, true}, // the retry starts at the deadline itself
		{50*time.Second + 1, false},
		{2 * time.Minute, false},
		{math.MaxInt64, false}, // no overflow
		{-time.Hour, true},
	}
	for _, tt := range tests {
		d := p.Decide(&Failure{Attempt: 3, Types: []string{"E"}, Elapsed: tt.elapsed})
		if d.Retry != tt.retry {
			t.Errorf("elapsed %v: %+v, want retry %v", tt.elapsed, d, tt.retry)
		}
		if !d.Retry && (d.Reason != ReasonDeadline || d.Rule != 0 || d.Delay != 10*time.Second) {
			t.Errorf("elapsed %v: %+v, want reason deadline with the rule and its delay", tt.elapsed, d)
		}
	}
	// A zero delay after the deadline has passed still stops.
	q := mustParse(t, "[retry: 3, backoff_kind: none] [deadline: 1s]")
	if d := q.Decide(&Failure{Attempt: 1, Types: []string{"E"}, Elapsed: 2 * time.Second}); d.Retry {
		t.Errorf("retry at once after the deadline: %+v, want a stop", d)
	}
}

// The backoff table of docs/policies.md.
func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	const s, ms = time.Second, time.Millisecond
	tests := []struct {
		name string
		b    Backoff
		n    int
		want time.Duration
	}{
		{"none", None, 1, 0},
		{"none later", None, 50, 0},
		{"fixed", Fixed(3 * s), 1, 3 * s},
		{"fixed later", Fixed(3 * s), 7, 3 * s},
		{"linear 1", Linear(100*ms, 0), 1, 100 * ms},
		{"linear 5", Linear(100*ms, 0), 5, 500 * ms},
		{"linear capped", Linear(100*ms, 300*ms), 5, 300 * ms},
		{"exponential 1", Exponential(s, 2, 0), 1, s},
		{"exponential 4", Exponential(s, 2, 0), 4, 8 * s},
		{"exponential ×3", Exponential(s, 3, 0), 3, 9 * s},
		{"exponential multiplier 0 means 2", Backoff{Kind: BackoffExponential, Base: s}, 3, 4 * s},
		{"exponential multiplier 1", Exponential(s, 1, 0), 30, s},
		{"exponential capped", Exponential(s, 2, time.Minute), 10, time.Minute},
		{"default 1", DefaultBackoff, 1, s},
		{"default 6", DefaultBackoff, 6, 32 * s},
		{"default 7", DefaultBackoff, 7, time.Minute},
		{"attempt 0 reads as 1", Exponential(s, 2, 0), 0, s},
		{"attempt -5 reads as 1", Linear(s, 0), -5, s},
		{"linear at 10,000", Linear(time.Hour, 0), 10000, 10000 * time.Hour},
		{"linear overflow", Linear(time.Hour, 0), math.MaxInt, maxDelay},
		{"linear overflow capped", Linear(time.Hour, 2*time.Hour), math.MaxInt, 2 * time.Hour},
		{"exponential at 10,000", Exponential(s, 2, 0), 10000, maxDelay},
		{"exponential at 10,000 capped", Exponential(s, 2, time.Hour), 10000, time.Hour},
		{"multiplier 1e9", Exponential(s, 1e9, 0), 3, maxDelay},
		{"multiplier 1e9 capped", Exponential(s, 1e9, time.Hour), 10000, time.Hour},
		{"zero base at 10,000", Exponential(0, 2, 0), 10000, 0},
		{"zero base at 10,000 capped", Exponential(0, 2, time.Second), 10000, 0},
		{"negative base", Exponential(-s, 2, 0), 3, 0},
		{"negative linear", Linear(-s, 0), 3, 0},
		{"huge fixed", Fixed(math.MaxInt64), 1, maxDelay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.b.Delay(tt.n); got != tt.want {
				t.Errorf("%+v.Delay(%d) = %v, want %v", tt.b, tt.n, got, tt.want)
			}
		})
	}
}

// Delays never go negative nor shrink as attempts go on, whatever the
// multiplier, for every kind and both caps.
func TestBackoffDelayMonotonic(t *testing.T) {
	t.Parallel()
	for _, b := range []Backoff{
		Linear(time.Millisecond, 0), Linear(time.Hour, time.Hour*1000),
		Exponential(time.Nanosecond, 1.0001, 0), Exponential(time.Second, 2, 0),
		Exponential(time.Second, 1e9, 0), Exponential(time.Hour, 1e300, time.Hour*5),
	} {
		prev := time.Duration(0)
		for n := 1; n <= 10000; n++ {
			d := b.Delay(n)
			if d < prev || d < 0 || d > maxDelay {
				t.Fatalf("%+v.Delay(%d) = %v after %v", b, n, d, prev)
			}
			prev = d
		}
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	full := mustParse(t, "[retry: unlimited, backoff: 10s, backoff_kind: fixed, jitter: full]")
	equal := mustParse(t, "[retry: unlimited, backoff: 10s, backoff_kind: fixed, jitter: equal]")
	const d = 10 * time.Second
	seen := map[time.Duration]bool{}
	for n := 1; n <= 2000; n++ {
		for _, key := range []string{"", "step-a", "step-b"} {
			f := &Failure{Attempt: n, Types: []string{"E"}, Key: key}
			fd := full.Decide(f).Delay
			if fd < 0 || fd > d {
				t.Fatalf("full jitter, attempt %d, key %q: %v outside [0, %v]", n, key, fd, d)
			}
			ed := equal.Decide(f).Delay
			if ed < d/2 || ed > d {
				t.Fatalf("equal jitter, attempt %d, key %q: %v outside [%v, %v]", n, key, ed, d/2, d)
			}
			if again := full.Decide(f).Delay; again != fd {
				t.Fatalf("full jitter, attempt %d, key %q: %v then %v for the same input", n, key, fd, again)
			}
			seen[fd] = true
		}
	}
	if len(seen) < 5000 {
		t.Errorf("full jitter gave %d distinct delays in 6000 draws, want them spread", len(seen))
	}
	// The draws cover the range: some below a tenth, some above nine tenths.
	low, high := false, false
	for v := range seen {
		low = low || v < d/10
		high = high || v > d*9/10
	}
	if !low || !high {
		t.Errorf("full jitter draws do not reach both ends of [0, %v]", d)
	}
}

// Pinned values: the same key and attempt give the same delay in every
// version, or replaying an old history would wait differently.
func TestJitterStable(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "[retry: 9, backoff: 1s, backoff_kind: fixed, jitter: full]")
	want := map[int]time.Duration{}
	for n := 1; n <= 3; n++ {
		want[n] = p.Decide(&Failure{Attempt: n, Types: []string{"E"}, Key: "run-1/charge"}).Delay
	}
	if want[1] == want[2] || want[2] == want[3] {
		t.Errorf("jitter gives equal delays for attempts 1-3: %v", want)
	}
	pinned := map[int]time.Duration{1: 261301509, 2: 131578942, 3: 36619087}
	for n, d := range pinned {
		if want[n] != d {
			t.Errorf("attempt %d: jittered delay %d, pinned %d", n, want[n], d)
		}
	}
}

//nolint:paralleltest // AllocsPerRun panics in a parallel test; it counts the process's allocations
func TestDecideAllocs(t *testing.T) {
	p := mustParse(t, "[retry: 5, backoff: 1s, jitter: full] [NetworkError -> retry: 10] [non_retryable: (Fatal)] [deadline: 1h]")
	f := &Failure{Attempt: 3, Types: []string{"OpError", "NetworkError"}, Key: "run/step", Elapsed: time.Minute}
	if n := testing.AllocsPerRun(1000, func() { p.Decide(f) }); n != 0 {
		t.Errorf("Decide allocates %v times per call, want 0", n)
	}
}

func BenchmarkDecide(b *testing.B) {
	p := mustParse(b, "[retry: 5, backoff: 1s, jitter: full] [NetworkError -> retry: 10] [non_retryable: (Fatal)] [deadline: 1h]")
	f := &Failure{Attempt: 3, Types: []string{"OpError", "NetworkError"}, Key: "run/step", Elapsed: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(f)
	}
}
