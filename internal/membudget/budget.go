package membudget

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrTooLarge: the reservation exceeds the whole budget and can never be granted.
var ErrTooLarge = errors.New("membudget: more than the whole budget")

// Budget is a byte budget shared by concurrent reservations. The zero value is unusable; use
// New.
type Budget struct {
	capacity int64
	mu       struct {
		sync.Mutex
		inUse   int64     // protected by mu; <= capacity
		waiters []*waiter // protected by mu; FIFO
	}
}

type waiter struct {
	n     int64
	ready chan struct{} // closed once granted (inUse already counts n)
}

// New is a budget of capacity bytes (capacity > 0).
func New(capacity int64) *Budget {
	if capacity <= 0 {
		panic(fmt.Sprintf("membudget: capacity %d", capacity))
	}
	return &Budget{capacity: capacity}
}

// Capacity is the budget's size in bytes.
func (b *Budget) Capacity() int64 { return b.capacity }

// InUse is the bytes reserved now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mu.inUse
}

// TryAcquire reserves n bytes if they are free now and nobody is waiting before it.
func (b *Budget) TryAcquire(n int64) bool {
	if n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mu.waiters) == 0 && b.mu.inUse+n <= b.capacity {
		b.mu.inUse += n
		return true
	}
	return false
}

// Acquire reserves n bytes, waiting in arrival order until they are free or ctx ends (then it
// returns ctx's error and holds nothing). n > Capacity fails at once with ErrTooLarge.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if n <= 0 {
		return nil
	}
	if n > b.capacity {
		return fmt.Errorf("%w: %d bytes asked, budget %d", ErrTooLarge, n, b.capacity)
	}
	b.mu.Lock()
	if len(b.mu.waiters) == 0 && b.mu.inUse+n <= b.capacity {
		b.mu.inUse += n
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.mu.waiters = append(b.mu.waiters, w)
	b.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		select {
		case <-w.ready: // granted while ctx ended: give it back
			b.mu.inUse -= n
		default:
			for i, x := range b.mu.waiters {
				if x == w {
					b.mu.waiters = append(b.mu.waiters[:i], b.mu.waiters[i+1:]...)
					break
				}
			}
		}
		b.grantLocked() // the head may have changed, or bytes come free
		b.mu.Unlock()
		return ctx.Err()
	}
}

// Release gives back n bytes reserved by Acquire or TryAcquire.
func (b *Budget) Release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.mu.inUse {
		panic(fmt.Sprintf("membudget: release of %d bytes, %d held", n, b.mu.inUse))
	}
	b.mu.inUse -= n
	b.grantLocked()
}

// grantLocked grants waiters from the head while they fit. REQUIRES: b.mu held.
func (b *Budget) grantLocked() {
	for len(b.mu.waiters) > 0 {
		w := b.mu.waiters[0]
		if b.mu.inUse+w.n > b.capacity {
			return
		}
		b.mu.inUse += w.n
		close(w.ready)
		b.mu.waiters[0] = nil
		b.mu.waiters = b.mu.waiters[1:]
	}
}

// Waiting is the number of reservations waiting now.
func (b *Budget) Waiting() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mu.waiters)
}
