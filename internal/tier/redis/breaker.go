package redis

import (
	"fmt"
	"sync"
	"time"

	"stockpot/internal/tier"
)

// breaker is a consecutive-failure circuit breaker:
//
//	closed --failures in a row--> open --cooldown--> half-open (one probe)
//	half-open --probe ok--> closed;  half-open --probe fails--> open
type breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time

	mu struct {
		sync.Mutex
		consecutive int
		openUntil   time.Time // zero: closed
		probing     bool      // a half-open probe is in flight
		// Counted transitions: closed → open, open → closed (a probe that succeeded), and
		// failed calls.
		opens, recoveries, failed uint64
	}
}

// breakerCounts are a breaker's counters (see BreakerStats).
type breakerCounts struct {
	open                      bool
	opens, recoveries, failed uint64
}

func (b *breaker) counts() breakerCounts {
	b.mu.Lock()
	defer b.mu.Unlock()
	return breakerCounts{open: !b.mu.openUntil.IsZero() && b.now().Before(b.mu.openUntil),
		opens: b.mu.opens, recoveries: b.mu.recoveries, failed: b.mu.failed}
}

// allow returns nil if a call may go to Redis.
func (b *breaker) allow() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.openUntil.IsZero() {
		return nil
	}
	if now := b.now(); now.Before(b.mu.openUntil) {
		return fmt.Errorf("%w: redis circuit breaker open for %v more", tier.ErrUnavailable, b.mu.openUntil.Sub(now).Round(time.Millisecond))
	}
	if b.mu.probing {
		return fmt.Errorf("%w: redis circuit breaker half-open, probe in flight", tier.ErrUnavailable)
	}
	b.mu.probing = true
	return nil
}

// done records the verdict of an allowed call.
func (b *breaker) done(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.probing = false
	if ok {
		if !b.mu.openUntil.IsZero() {
			b.mu.recoveries++
		}
		b.mu.consecutive = 0
		b.mu.openUntil = time.Time{}
		return
	}
	b.mu.failed++
	b.mu.consecutive++
	if b.mu.consecutive >= b.failures || !b.mu.openUntil.IsZero() {
		if b.mu.openUntil.IsZero() {
			b.mu.opens++
		}
		b.mu.openUntil = b.now().Add(b.cooldown)
	}
}

// release ends an allowed call without a verdict.
func (b *breaker) release() {
	b.mu.Lock()
	b.mu.probing = false
	b.mu.Unlock()
}
