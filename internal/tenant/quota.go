package tenant

import (
	"math"
	"sync"
	"time"
)

// Bucket is a token bucket: it holds at most Burst tokens, refills Rate tokens a second, and
// each request takes one. The zero Bucket with Rate 0 admits everything. Not safe for
// concurrent use (Limiter locks around it).
type Bucket struct {
	Rate  float64 // tokens per second; 0: unlimited
	Burst float64 // capacity, at least 1

	tokens float64
	last   time.Time // when tokens was last brought up to date; zero: full
}

// NewBucket returns a full bucket for rate and burst (burst 0: the rate rounded up, at least 1).
func NewBucket(rate float64, burst int) *Bucket {
	b := &Bucket{Rate: rate, Burst: float64(burst)}
	if b.Burst <= 0 {
		b.Burst = max(1, math.Ceil(rate))
	}
	b.tokens = b.Burst
	return b
}

// refill brings tokens up to date at now. A clock that went backwards adds nothing.
func (b *Bucket) refill(now time.Time) {
	if b.last.IsZero() {
		b.last = now
		return
	}
	if dt := now.Sub(b.last); dt > 0 {
		b.tokens = min(b.Burst, b.tokens+dt.Seconds()*b.Rate)
		b.last = now
	}
}

// Take takes one token at now. When none is left it takes nothing and says how long until one
// will be there (the Retry-After).
func (b *Bucket) Take(now time.Time) (ok bool, wait time.Duration) {
	if b.Rate <= 0 {
		return true, 0
	}
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	need := (1 - b.tokens) / b.Rate
	return false, time.Duration(math.Ceil(need * float64(time.Second)))
}

// Tokens is what the bucket holds at now (for tests and metrics).
func (b *Bucket) Tokens(now time.Time) float64 {
	b.refill(now)
	return b.tokens
}

// Quota names, as the 429's code and the metrics' label.
const (
	QuotaRate       = "requests_per_second"
	QuotaConcurrent = "concurrent"
	QuotaCacheBytes = "cache_bytes"
)

// Breach says which quota refused a request and when to retry.
type Breach struct {
	Quota      string // QuotaRate or QuotaConcurrent
	RetryAfter time.Duration
	Limit      float64 // the quota's value, for the error message
}

// concurrentRetry is the Retry-After of a concurrency breach: when a slot frees cannot be
// known, and one second is how long a short completion takes on a busy replica.
const concurrentRetry = time.Second

// Limiter holds each tenant's bucket and running count. Safe for concurrent use; the time is
// passed in.
type Limiter struct {
	mu struct {
		sync.Mutex
		state map[*Tenant]*limitState // protected by mu
	}
}

type limitState struct {
	bucket  *Bucket
	running int
}

// NewLimiter returns an empty Limiter (tenants get their state on first use).
func NewLimiter() *Limiter {
	l := &Limiter{}
	l.mu.state = map[*Tenant]*limitState{}
	return l
}

// Acquire admits one request of t at now, or says which quota it breaches (a breached request
// takes no token and no slot). On admission the caller must call Release once the request
// ends. A nil tenant, or one without rate or concurrency quotas, is always admitted.
func (l *Limiter) Acquire(t *Tenant, now time.Time) (Breach, bool) {
	if t == nil || (t.Quotas.RequestsPerSecond <= 0 && t.Quotas.Concurrent <= 0) {
		return Breach{}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stateLocked(t)
	// Concurrency first: a request refused for it must not also spend a token.
	if c := t.Quotas.Concurrent; c > 0 && st.running >= c {
		return Breach{Quota: QuotaConcurrent, RetryAfter: concurrentRetry, Limit: float64(c)}, false
	}
	if ok, wait := st.bucket.Take(now); !ok {
		return Breach{Quota: QuotaRate, RetryAfter: wait, Limit: t.Quotas.RequestsPerSecond}, false
	}
	st.running++
	return Breach{}, true
}

// Release ends a request Acquire admitted. REQUIRES: one Release per admitted Acquire.
func (l *Limiter) Release(t *Tenant) {
	if t == nil || (t.Quotas.RequestsPerSecond <= 0 && t.Quotas.Concurrent <= 0) {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.stateLocked(t)
	if st.running <= 0 {
		panic("tenant: Release without Acquire")
	}
	st.running--
}

// Running is t's admitted requests not yet released.
func (l *Limiter) Running(t *Tenant) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok := l.mu.state[t]; ok {
		return st.running
	}
	return 0
}

func (l *Limiter) stateLocked(t *Tenant) *limitState {
	st, ok := l.mu.state[t]
	if !ok {
		st = &limitState{bucket: NewBucket(t.Quotas.RequestsPerSecond, t.Quotas.Burst)}
		l.mu.state[t] = st
	}
	return st
}
