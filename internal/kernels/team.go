package kernels

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Team runs one function as several members at once, one per pool thread
// that is free to take one: a decode step's whole layer stack as one
// parallel region (model's fused step) instead of a parallel loop per
// product with the caller's serial work between them (norms, the
// activations' quantization, RoPE, the K/V store, attention), during which
// the other threads only wait.
//
// The members share their work through Stages: each stage is a set of
// tasks any member may claim, and a member waits only for a stage's tasks
// to be done, never for another member to arrive. So a member whose thread
// is taken away (the Go scheduler's GC worker, another goroutine, another
// process) holds up the others for at most the one task it holds, and a
// thread that comes late finds the work done and passes through: one
// thread may run every member, one after another. (Members that waited for
// each other at barriers ran 40% slower in `serve`, whose garbage collector
// takes a thread now and then, than in a benchmark.)
//
// Which member or thread runs a task never changes its values.
type Team struct {
	p  *Pool
	n  int
	fn func(t *Team, member int)
	// spin[m] is the spin policy of the thread running member m (the
	// pool's, by thread index), set when the member starts.
	spin []*spinPolicy
	run  func(worker, lo, hi int) // t.member, bound once
}

// Members returns how many members the team has (the pool's threads).
func (t *Team) Members() int { return t.n }

// Team runs fn(t, m) for every member m in [0, Threads()), each on a pool
// thread, concurrently as far as threads are free, and returns when all
// have returned. fn must not wait for another member other than through
// Stages. Like For, Team is not reentrant and fn must not call the pool's
// For or MatMul. A nil pool runs the one member on the caller.
func (p *Pool) Team(fn func(t *Team, member int)) {
	if p == nil {
		fn(&Team{n: 1, spin: []*spinPolicy{{}}}, 0)
		return
	}
	p.mu.Lock()
	t := p.team
	if t == nil {
		t = &Team{p: p, n: p.threads, spin: make([]*spinPolicy, p.threads)}
		t.run = t.member
		p.team = t
	}
	t.fn = fn
	// A team is a whole step: let its one parallel loop sample the machine's load (at most
	// every loadCheckEvery) as a step's hundred loops would, or a busy reading taken at
	// start would stand for seconds of fused steps.
	p.checkLoops = loadCheckLoops - 1
	p.mu.Unlock()
	p.forMembers(p.threads, t.run)
	t.fn = nil
}

// member runs members [lo, hi) on thread worker, one after another.
func (t *Team) member(worker, lo, hi int) {
	for m := lo; m < hi; m++ {
		t.spin[m] = &t.p.spins[worker]
		t.fn(t, m)
	}
}

// forMembers is forWorker with one chunk per index: n chunks of one.
func (p *Pool) forMembers(n int, fn func(worker, lo, hi int)) {
	p.runChunked(n, n, nil, fn)
}

// Stages are a team's shared work: a run of stages, stage s having
// Reset's totals[s] tasks, each claimed by one member (Claim) and marked
// done (Done); Wait(s) returns once every task of s is done. A member
// claims a stage's tasks only after waiting for the stages before it that
// its tasks read, so what a task reads is complete.
type Stages struct {
	next, done []atomic.Int32
	total      []int32
	epoch      uint64 // Resets so far: part of every park mark
	// parked[m] is the mark (epoch and stage, never 0) of the stage member
	// m waits for while it is blocked on wake[m] or about to be, else 0;
	// whoever swaps it to 0 decides who sends (the Pool's rule). The mark
	// keeps the member finishing one stage from waking a member already
	// parked for a later one.
	parked []atomic.Uint64
	wake   []chan struct{}
	sentAt []time.Time
	parks  atomic.Int64
}

// NewStages makes stages for a team of members members.
func NewStages(members int) *Stages {
	s := &Stages{parked: make([]atomic.Uint64, members), wake: make([]chan struct{}, members), sentAt: make([]time.Time, members)}
	for m := range s.wake {
		s.wake[m] = make(chan struct{}, 1)
	}
	return s
}

// Reset starts a new run of len(totals) stages, stage s having totals[s]
// tasks. No member may be using s.
func (s *Stages) Reset(totals []int32) {
	n := len(totals)
	if cap(s.next) < n {
		s.next, s.done = make([]atomic.Int32, n), make([]atomic.Int32, n)
	}
	s.next, s.done = s.next[:n], s.done[:n]
	for i := range n {
		s.next[i].Store(0)
		s.done[i].Store(0)
	}
	s.total = append(s.total[:0], totals...)
	s.epoch++
}

// Parks returns how many waits parked instead of seeing their stage done
// while spinning.
func (s *Stages) Parks() int64 { return s.parks.Load() }

// Tasks returns stage st's task count.
func (s *Stages) Tasks(st int) int32 { return s.total[st] }

// Claim takes the next unclaimed task of stage st, if any.
func (s *Stages) Claim(st int) (task int, ok bool) {
	if s.next[st].Load() >= s.total[st] {
		return 0, false
	}
	k := s.next[st].Add(1) - 1
	return int(k), k < s.total[st]
}

func (s *Stages) mark(st int) uint64 { return s.epoch<<20 | uint64(st+1) }

// Done marks one claimed task of stage st done, waking the members parked
// for st when it is the last.
func (s *Stages) Done(st int) {
	if s.done[st].Add(1) != s.total[st] {
		return
	}
	mk := s.mark(st)
	for m := range s.parked {
		if s.parked[m].Load() == mk && s.parked[m].CompareAndSwap(mk, 0) {
			s.sentAt[m] = time.Now()
			s.wake[m] <- struct{}{}
		}
	}
}

// Wait returns once every task of stage st is done. member waits spinning
// for as long as its thread's spin policy allows, then parks until the
// member finishing the stage's last task wakes it.
func (s *Stages) Wait(t *Team, member, st int) {
	total := s.total[st]
	if s.done[st].Load() == total {
		return
	}
	sp := t.spin[member]
	busy := t.p != nil && t.p.busy.Load()
	ok, began := sp.spin(busy, func() bool { return s.done[st].Load() == total })
	if ok {
		return
	}
	if !busy && t.p != nil {
		// No more runnable threads than cores: the task waited for is running, only
		// longer than the spin budget. Parking would hand the wake-up to the Go
		// scheduler (the woken member waits for a P behind the waker's goroutine,
		// tens of microseconds each time); yield to whatever else is runnable instead
		// and look again.
		for s.done[st].Load() != total {
			runtime.Gosched()
			if t.p.busy.Load() {
				break
			}
		}
		if s.done[st].Load() == total {
			sp.note(time.Since(began))
			return
		}
	}
	mk := s.mark(st)
	s.parked[member].Store(mk)
	if s.done[st].Load() == total && s.parked[member].CompareAndSwap(mk, 0) {
		sp.note(time.Since(began))
		return
	}
	s.parks.Add(1)
	<-s.wake[member]
	sp.note(s.sentAt[member].Sub(began))
}

// Split returns part k's share [lo, hi) of n items split in parts parts
// as evenly as units allow: every boundary but n a multiple of unit.
func Split(n, unit, parts, k int) (lo, hi int) {
	units := (n + unit - 1) / unit
	lo = min(units*k/parts*unit, n)
	hi = min(units*(k+1)/parts*unit, n)
	return lo, hi
}
