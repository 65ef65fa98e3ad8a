package kernels

import (
	"sync/atomic"
	"time"
)

// Team runs one function on every thread of the pool at once, each with its
// own member index, the members meeting at barriers: a whole decode step's
// layer as one parallel region instead of a parallel loop per product with
// the caller's serial work between them (norms, the activations'
// quantization, RoPE, the K/V store, attention), during which the other
// threads only wait.
//
// Which member runs on which thread is not fixed (whoever claims a member
// index runs it); a member's work must depend only on its index, so the
// values are the same whichever thread runs it.
type Team struct {
	p       *Pool
	n       int
	fn      func(t *Team, member int)
	arrived atomic.Int32
	gen     atomic.Uint32
	// parked[m] is 1 + the generation member m waits to see pass while it
	// is blocked on wake[m] or about to be, else 0; whoever swaps it to 0
	// decides who sends (the Pool's rule). The generation keeps the last
	// member of one barrier, still waking those that parked there, from
	// waking a member already parked at the next one.
	parked []atomic.Uint64
	wake   []chan struct{}
	// spin[m] is the spin policy of the thread running member m (the
	// pool's, by thread index), set when the member starts.
	spin []*spinPolicy
	// sentAt[m] is when member m's wake-up was sent.
	sentAt []time.Time
	run    func(worker, lo, hi int) // t.member, bound once
}

// Members returns how many members the team has (the pool's threads).
func (t *Team) Members() int { return t.n }

// Team runs fn(t, m) for every member m in [0, Threads()) concurrently,
// one member per thread, and returns when all have returned. fn may call
// t.Barrier(m); every member must call it the same number of times. A nil
// pool or a pool of one thread runs the one member on the caller. Like
// For, Team is not reentrant and fn must not call the pool's For or MatMul.
func (p *Pool) Team(fn func(t *Team, member int)) {
	if p == nil || p.threads == 1 {
		var t Team
		t.n = 1
		t.spin = []*spinPolicy{{}}
		t.parked = make([]atomic.Uint64, 1)
		t.wake = make([]chan struct{}, 1)
		t.sentAt = make([]time.Time, 1)
		if p != nil {
			p.stats.inlines.Add(1)
		}
		fn(&t, 0)
		return
	}
	p.mu.Lock()
	t := p.team
	if t == nil {
		t = &Team{p: p, n: p.threads, parked: make([]atomic.Uint64, p.threads),
			wake: make([]chan struct{}, p.threads), spin: make([]*spinPolicy, p.threads),
			sentAt: make([]time.Time, p.threads)}
		for m := range t.wake {
			t.wake[m] = make(chan struct{}, 1)
		}
		t.run = t.member
		p.team = t
	}
	t.fn = fn
	p.mu.Unlock()
	// Every member ends at a barrier, so no member returns before all have
	// started: a thread never runs two members, and a late worker that finds
	// every member claimed has nothing to wait for.
	p.forMembers(p.threads, t.run)
	t.fn = nil
}

// member runs member lo (forMembers' chunks are one member each) on thread
// worker, ending at a barrier.
func (t *Team) member(worker, lo, hi int) {
	for m := lo; m < hi; m++ {
		t.spin[m] = &t.p.spins[worker]
		t.fn(t, m)
		t.Barrier(m)
	}
}

// Barrier returns once every member has called it (as often as member has).
// A member waits spinning, for as long as its thread's spin policy allows,
// then parks until the last member to arrive wakes it.
func (t *Team) Barrier(member int) {
	if t.n == 1 {
		return
	}
	g := t.gen.Load()
	mark := uint64(g) + 1
	if t.arrived.Add(1) == int32(t.n) {
		t.arrived.Store(0)
		t.gen.Add(1)
		for m := range t.n {
			if m != member && t.parked[m].Load() == mark && t.parked[m].CompareAndSwap(mark, 0) {
				t.sentAt[m] = time.Now()
				t.wake[m] <- struct{}{}
			}
		}
		return
	}
	s := t.spin[member]
	ok, began := s.spin(t.p.busy.Load(), func() bool { return t.gen.Load() != g })
	if ok {
		return
	}
	t.parked[member].Store(mark)
	if t.gen.Load() != g && t.parked[member].CompareAndSwap(mark, 0) {
		s.note(time.Since(began))
		return
	}
	t.p.stats.parks.Add(1)
	<-t.wake[member]
	s.note(t.sentAt[member].Sub(began))
}

// forMembers is forWorker with one chunk per index: n chunks of one.
func (p *Pool) forMembers(n int, fn func(worker, lo, hi int)) {
	p.runChunked(n, n, nil, fn)
}

// Split returns member m's share [lo, hi) of n items split over members
// members as evenly as units allow: every boundary but n a multiple of
// unit.
func Split(n, unit, members, m int) (lo, hi int) {
	units := (n + unit - 1) / unit
	lo = min(units*m/members*unit, n)
	hi = min(units*(m+1)/members*unit, n)
	return lo, hi
}
