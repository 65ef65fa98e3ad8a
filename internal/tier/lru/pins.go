package lru

import (
	"time"

	"stockpot/internal/tier"
)

// pinState is a Node's place in Pins.
type pinState struct {
	idx     int // 1 + the index in Pins.h; 0: not pinned
	ttl     time.Duration
	expires time.Time
}

// Pins holds the pinned nodes, ordered by expiry (a binary min-heap), so eviction never sees
// them and the expired ones are found at the top in O(1). A store moves a node out of its
// List to pin it and back into one when the pin ends (Unpin, or Expired at a sweep).
//
// The clock is the caller's: every method that needs the time takes now, so a store reads
// its (injectable) clock once per operation and this type stays pure.
// The zero Pins is empty and ready to use. Not safe for concurrent use.
type Pins[T any] struct {
	h       []*Node[T]
	expired []*Node[T] // Expire's buffer, kept between calls
}

// Len returns the number of pinned nodes, expired ones included until they are taken.
func (p *Pins[T]) Len() int { return len(p.h) }

// Pinned reports whether n is in p.
func (p *Pins[T]) Pinned(n *Node[T]) bool { return n.pin.idx != 0 }

// TTL returns n's pin TTL and expiry. REQUIRES: n is pinned.
func (p *Pins[T]) TTL(n *Node[T]) (ttl time.Duration, expires time.Time) {
	if n.pin.idx == 0 {
		panic("lru: TTL of a node not pinned")
	}
	return n.pin.ttl, n.pin.expires
}

// Pin pins n for ttl from now (expires = now + ttl), or repins it if it is already pinned.
// REQUIRES: ttl > 0; n is in no List.
func (p *Pins[T]) Pin(n *Node[T], ttl time.Duration, now time.Time) {
	p.PinUntil(n, ttl, now.Add(ttl))
}

// PinUntil pins n with ttl and an explicit expiry (a pin restored with its remaining time).
// REQUIRES: ttl > 0; n is in no List.
func (p *Pins[T]) PinUntil(n *Node[T], ttl time.Duration, expires time.Time) {
	if ttl <= 0 {
		panic("lru: Pin with ttl <= 0")
	}
	if n.next != nil {
		panic("lru: Pin of a node in a list")
	}
	n.pin.ttl, n.pin.expires = ttl, expires
	if n.pin.idx == 0 {
		p.h = append(p.h, n)
		n.pin.idx = len(p.h)
		p.up(len(p.h) - 1)
		return
	}
	p.fix(n.pin.idx - 1)
}

// Touch refreshes n's expiry to now + its TTL (a use of a pinned node).
// REQUIRES: n is pinned.
func (p *Pins[T]) Touch(n *Node[T], now time.Time) {
	if n.pin.idx == 0 {
		panic("lru: Touch of a node not pinned")
	}
	n.pin.expires = now.Add(n.pin.ttl)
	p.fix(n.pin.idx - 1)
}

// Unpin takes n out of p; the caller links it into a List.
// REQUIRES: n is pinned.
func (p *Pins[T]) Unpin(n *Node[T]) {
	if n.pin.idx == 0 {
		panic("lru: Unpin of a node not pinned")
	}
	i, last := n.pin.idx-1, len(p.h)-1
	if i != last {
		p.swap(i, last)
	}
	p.h[last] = nil
	p.h = p.h[:last]
	n.pin = pinState{}
	if i != last {
		p.fix(i)
	}
}

// Expired reports whether n's pin has expired at now (expires <= now).
// REQUIRES: n is pinned.
func (p *Pins[T]) Expired(n *Node[T], now time.Time) bool {
	if n.pin.idx == 0 {
		panic("lru: Expired of a node not pinned")
	}
	return !n.pin.expires.After(now)
}

// PopExpired unpins and returns the pinned node expiring first if it has expired at now, or
// nil. A sweep calls it until nil and links each node back into its List (PushBack: its last
// use is a TTL ago).
func (p *Pins[T]) PopExpired(now time.Time) *Node[T] {
	if len(p.h) == 0 || p.h[0].pin.expires.After(now) {
		return nil
	}
	n := p.h[0]
	p.Unpin(n)
	return n
}

// First returns the pinned node expiring first, or nil.
func (p *Pins[T]) First() *Node[T] {
	if len(p.h) == 0 {
		return nil
	}
	return p.h[0]
}

// Expire unpins every node expired at now and calls back for each, the latest expiry first,
// and returns how many: a store whose back links each at the Back of its List ends with the
// earliest expired, the least recently used, as the least recent. The store calls it at the
// start of each operation (one comparison when nothing has expired).
func (p *Pins[T]) Expire(now time.Time, back func(n *Node[T])) int {
	p.expired = p.expired[:0]
	for n := p.PopExpired(now); n != nil; n = p.PopExpired(now) {
		p.expired = append(p.expired, n)
	}
	for i := len(p.expired) - 1; i >= 0; i-- {
		back(p.expired[i])
		p.expired[i] = nil
	}
	return len(p.expired)
}

// All calls fn for every pinned node, in no particular order; fn must not change p.
func (p *Pins[T]) All(fn func(n *Node[T], ttl time.Duration, expires time.Time)) {
	for _, n := range p.h {
		fn(n, n.pin.ttl, n.pin.expires)
	}
}

func (p *Pins[T]) less(i, j int) bool { return p.h[i].pin.expires.Before(p.h[j].pin.expires) }

func (p *Pins[T]) swap(i, j int) {
	p.h[i], p.h[j] = p.h[j], p.h[i]
	p.h[i].pin.idx, p.h[j].pin.idx = i+1, j+1
}

func (p *Pins[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !p.less(i, parent) {
			return
		}
		p.swap(i, parent)
		i = parent
	}
}

func (p *Pins[T]) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(p.h) {
			break
		}
		c := l
		if r := l + 1; r < len(p.h) && p.less(r, l) {
			c = r
		}
		if !p.less(c, i) {
			break
		}
		p.swap(i, c)
		i = c
	}
	return i > start
}

func (p *Pins[T]) fix(i int) {
	if !p.down(i) {
		p.up(i)
	}
}

// ExpireNow is Expire at clock(), with the clock read only when something is pinned, so a
// store without pins pays nothing; it returns the time read (zero when it read none) and how
// many pins ended.
func (p *Pins[T]) ExpireNow(clock func() time.Time, back func(n *Node[T])) (time.Time, int) {
	if len(p.h) == 0 {
		return time.Time{}, 0
	}
	now := clock()
	return now, p.Expire(now, back)
}

// Infos lists every pin as a tier.PinInfo (Pinner.Pins), key naming a node's key.
func (p *Pins[T]) Infos(key func(T) tier.Key) []tier.PinInfo {
	out := make([]tier.PinInfo, 0, len(p.h))
	for _, n := range p.h {
		out = append(out, tier.PinInfo{Key: key(n.Value), TTL: n.pin.ttl, Expires: n.pin.expires})
	}
	return out
}
