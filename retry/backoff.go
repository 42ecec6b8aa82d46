package retry

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// BackoffKind names how a backoff grows from one retry to the next.
type BackoffKind uint8

const (
	// BackoffNone retries at once.
	BackoffNone BackoffKind = iota
	// BackoffFixed waits Base before every retry.
	BackoffFixed
	// BackoffLinear waits Base × n after attempt n, capped at Max.
	BackoffLinear
	// BackoffExponential waits Base × Multiplier^(n−1) after attempt n, capped at Max.
	BackoffExponential
)

var kindNames = [...]string{"none", "fixed", "linear", "exponential"}

func (k BackoffKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("BackoffKind(%d)", k)
}

// ParseBackoffKind reads the name of a backoff kind.
func ParseBackoffKind(s string) (BackoffKind, error) {
	for i, n := range kindNames {
		if n == s {
			return BackoffKind(i), nil
		}
	}
	return 0, fmt.Errorf("unknown backoff kind %q (want none, fixed, linear or exponential)", s)
}

// Jitter names how a delay is spread so that many retries do not start at once.
type Jitter uint8

const (
	// JitterNone keeps the delay as computed.
	JitterNone Jitter = iota
	// JitterFull draws the delay uniformly from [0, d].
	JitterFull
	// JitterEqual draws the delay uniformly from [d/2, d].
	JitterEqual
)

var jitterNames = [...]string{"none", "full", "equal"}

func (j Jitter) String() string {
	if int(j) < len(jitterNames) {
		return jitterNames[j]
	}
	return fmt.Sprintf("Jitter(%d)", j)
}

// ParseJitter reads the name of a jitter.
func ParseJitter(s string) (Jitter, error) {
	for i, n := range jitterNames {
		if n == s {
			return Jitter(i), nil
		}
	}
	return 0, fmt.Errorf("unknown jitter %q (want none, full or equal)", s)
}

// A Backoff computes the delay before a retry. Its zero value retries at once.
type Backoff struct {
	Kind BackoffKind
	// Base is the fixed delay, or the first delay of linear and exponential.
	Base time.Duration
	// Multiplier is the growth factor of an exponential backoff, at least 1.
	// Zero means 2.
	Multiplier float64
	// Max caps linear and exponential delays. Zero means no cap.
	Max time.Duration
	// Jitter spreads the computed delay; see Jitter.
	Jitter Jitter
}

// None is the backoff that retries at once.
var None = Backoff{}

// Fixed waits d before every retry.
func Fixed(d time.Duration) Backoff { return Backoff{Kind: BackoffFixed, Base: d} }

// Linear waits base × n after attempt n, capped at max (0 for no cap).
func Linear(base, max time.Duration) Backoff {
	return Backoff{Kind: BackoffLinear, Base: base, Max: max}
}

// Exponential waits base × multiplier^(n−1) after attempt n, capped at max
// (0 for no cap).
func Exponential(base time.Duration, multiplier float64, max time.Duration) Backoff {
	return Backoff{Kind: BackoffExponential, Base: base, Multiplier: multiplier, Max: max}
}

// WithJitter returns a copy of b with jitter j.
func (b Backoff) WithJitter(j Jitter) Backoff {
	b.Jitter = j
	return b
}

// Validate reports every problem with b at once.
func (b *Backoff) Validate() error {
	var errs []error
	if b.Kind > BackoffExponential {
		errs = append(errs, fmt.Errorf("backoff kind %d is unknown", b.Kind))
	}
	if b.Base < 0 {
		errs = append(errs, fmt.Errorf("backoff %v is negative", b.Base))
	}
	if b.Max < 0 {
		errs = append(errs, fmt.Errorf("max_backoff %v is negative", b.Max))
	}
	if b.Multiplier != 0 && !(b.Multiplier >= 1) || math.IsInf(b.Multiplier, 0) {
		errs = append(errs, fmt.Errorf("multiplier %v is out of range (want at least 1)", b.Multiplier))
	}
	if b.Jitter > JitterEqual {
		errs = append(errs, fmt.Errorf("jitter %d is unknown", b.Jitter))
	}
	return errors.Join(errs...)
}

// maxDelay bounds every delay, so that adding one to a time never overflows.
const maxDelay = time.Duration(math.MaxInt64 / 2)

// Delay returns the delay before the retry that follows attempt n (n ≥ 1),
// without jitter. It is never negative and never overflows.
func (b *Backoff) Delay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	var d time.Duration
	switch b.Kind {
	case BackoffFixed:
		d = b.Base
	case BackoffLinear:
		if b.Base > 0 && time.Duration(n) > maxDelay/b.Base {
			d = maxDelay
		} else {
			d = b.Base * time.Duration(n)
		}
		d = b.cap(d)
	case BackoffExponential:
		m := b.Multiplier
		if m == 0 {
			m = 2
		}
		f := float64(b.Base) * math.Pow(m, float64(n-1))
		switch {
		case b.Base <= 0:
			// 0 × an overflowed power is NaN, not a delay.
			d = 0
		case f >= float64(maxDelay) || math.IsNaN(f):
			d = maxDelay
		default:
			d = time.Duration(f)
		}
		d = b.cap(d)
	}
	return min(max(d, 0), maxDelay)
}

func (b *Backoff) cap(d time.Duration) time.Duration {
	if b.Max > 0 && d > b.Max {
		return b.Max
	}
	return d
}

// jitter spreads d by b.Jitter, drawing from a generator seeded by key and n
// so that the same step and attempt always get the same delay.
func (b *Backoff) jitter(d time.Duration, key string, n int) time.Duration {
	if b.Jitter == JitterNone || d <= 0 {
		return d
	}
	u := unit(key, n)
	switch b.Jitter {
	case JitterFull:
		return time.Duration(u * float64(d))
	case JitterEqual:
		half := d / 2
		return half + time.Duration(u*float64(d-half))
	}
	return d
}

// unit returns a number in [0, 1) determined by key and n: FNV-1a over both,
// finished by the splitmix64 mixer so that nearby inputs spread out.
func unit(key string, n int) float64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime
	}
	for i := 0; i < 8; i++ {
		h ^= uint64(n>>(8*i)) & 0xff
		h *= prime
	}
	h += 0x9e3779b97f4a7c15
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
	h = (h ^ (h >> 27)) * 0x94d049bb133111eb
	h ^= h >> 31
	return float64(h>>11) / (1 << 53)
}
