package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of worker goroutines that run the parallel loops of
// the kernels. It is created once and reused for every call: a For call
// starts no goroutine and allocates nothing.
//
// For is not reentrant: fn must not call For on the same Pool. Calls from
// several goroutines are serialized (protected by mu).
//
// # Hand-offs
//
// A decode step is a chain of short parallel loops (four or five per
// layer), each ended by a wait, so what a hand-off costs is paid a hundred
// times or more per token. Two rules keep it small:
//
//   - The caller waits for the job's chunks, not for its workers. A worker
//     claims a chunk by a compare-and-swap on the job's claim word (sequence
//     number, chunk count, next chunk), so one that wakes late, after the
//     caller and the others took every chunk, finds none and goes back to
//     waiting; nobody waits for it. On a machine with more runnable threads
//     than cores a woken worker may not run for milliseconds, and a wait for
//     every worker stalled each loop that long.
//   - Waiting spins before parking: a worker that finishes watches the claim
//     word for the next job, and the caller watches the finished count, so
//     back-to-back loops pass from one to the next in about a cache-line
//     transfer instead of a scheduler wake-up (tens of microseconds on a VM,
//     and the work waits for it). How long each waiter spins adapts to how
//     long its recent waits took (spinPolicy): up to spinMax while three in
//     four of them end within it (a quiet machine, a decode step's loops),
//     spinMin when they do not (more runnable threads than cores, where a
//     spinning thread takes time from the one it waits for). An idle pool
//     still sleeps.
//
// Neither decides which chunks exist or what a chunk computes, so every
// value is as it would be on one thread.
type Pool struct {
	threads int

	mu sync.Mutex // serializes For calls; protects job's plain fields and seq
	// job is the loop being run. Its plain fields are written under mu
	// before claim announces the job and stay fixed until every chunk has
	// finished, so a worker that has claimed a chunk may read them.
	job struct {
		fn    func(lo, hi int)
		wfn   func(worker, lo, hi int)
		n     int
		chunk int
	}
	seq uint64 // jobs announced so far (under mu)
	// claim is the current job's chunk counter: seq<<40 | chunks<<20 | next.
	// A chunk is claimed by a compare-and-swap from next to next+1 while
	// next < chunks, so a worker that wakes late either claims a chunk of
	// the job that is running (and the job waits for it) or sees none left;
	// the caller never waits for a worker that has nothing to do.
	claim atomic.Uint64
	// finished counts the current job's chunks that have run; the job ends
	// when it reaches chunks.
	finished atomic.Int64
	// parked[w] is 1 while worker w is blocked on wake[w] or about to be;
	// whoever swaps it from 1 to 0 decides: the caller then sends on wake[w],
	// the worker itself goes on without a token.
	parked []atomic.Int32
	// waiting is the seq of the job whose caller is blocked on done or about
	// to be (0: none); the same swap rule as parked decides who sends.
	waiting atomic.Uint64
	quit    atomic.Bool
	wake    []chan struct{} // one per worker (index 1..threads-1), buffered 1
	spins   []spinPolicy    // one per waiter: the caller (0) and the workers
	// sentAt[w] is when waiter w's wake-up was sent (0: the caller's done),
	// written before the send and read after the receive.
	sentAt []time.Time
	done   chan struct{} // signalled by whoever finishes a waited-for job's last chunk
	closed bool

	matMu sync.Mutex // held for a whole MatMul; protects mat and quant
	mat   *matJob
	quant *quantJob

	// perWorker[w] is worker w's buffer; touched only by worker w inside a
	// forWorker fn (so under mu).
	perWorker [][]float32

	attn attnScratch // Attention's buffers (its own lock)

	team *Team // Team's state, made on first use (under mu)

	stats poolStats

	// busy is set while the machine has more runnable threads than the
	// process has cores: every waiter then spins spinMin. checkLoops,
	// checkedAt and runnable are the caller's sampling state (under mu;
	// loadCheck).
	busy       atomic.Bool
	checkLoops int
	checkedAt  time.Time
	runnable   int
}

const (
	claimSeqShift = 40
	claimField    = 1<<20 - 1 // chunks and next are 20-bit fields of claim
)

// spinMin and spinMax bound how long a worker waits for the next job, and
// the caller for the job's last chunks, before parking (spinPolicy).
//
// spinMax covers the gaps inside a decode step: the caller's inline work
// between loops (norms, one row's quantization, RoPE and the K/V store) and
// the other thread's last chunk, which at 4 streams can take 100 µs. On the
// project's 2-core VM a 2 µs budget parked 66 of a step's 121 hand-offs
// and the single-stream Q8_0 decode of smollm-135m ran at 133 tok/s; 50 µs
// parked 1.5 and it ran at 209 tok/s; at 4 streams 50 µs still parked 70
// hand-offs a step (299 tok/s) and 200 µs 0.5 (366 tok/s)
// (BenchmarkOursDecode; a parked thread takes 60-130 µs to run again).
//
// spinMin is what a waiter spins when its waits are long: at a load of 16
// on 2 cores, 10 µs cost about 5% more CPU per decoded token than 2 µs for
// no gain (and the Go scheduler spins a little itself before it sleeps an
// idle thread).
const (
	spinMin = 2 * time.Microsecond
	spinMax = 200 * time.Microsecond
)

// The caller samples how many threads the machine has runnable
// (/proc/loadavg's running count, which counts the pool's own busy or
// spinning threads) at most every loadCheckEvery, every loadCheckLoops
// parallel loops, and keeps a moving average of it in 1/16ths. While that
// is more than the cores the process may use, the machine has more
// runnable threads than cores and the pool spins spinMin. On the project's
// 2-core VM a decode reads about 2 (its own two threads); at a load of 8
// about 8, and there the long budget made the single-stream decode
// 10-30% slower and take 10% more CPU than spinMin. Where the count is not
// to be had, the budget follows the waits alone.
const (
	loadCheckLoops = 64
	loadCheckEvery = 5 * time.Millisecond
)

// loadCheck is run by the caller for every parallel loop (under mu).
func (p *Pool) loadCheck() {
	if p.checkLoops++; p.checkLoops < loadCheckLoops {
		return
	}
	p.checkLoops = 0
	now := time.Now()
	if now.Sub(p.checkedAt) < loadCheckEvery {
		return
	}
	p.checkedAt = now
	n, ok := runnableThreads()
	if !ok {
		return
	}
	if p.runnable == 0 {
		p.runnable = 16 * n
	}
	p.runnable += n - p.runnable/16
	p.busy.Store(oversubscribed(p.runnable, runtime.NumCPU()))
}

// oversubscribed reports whether a moving average of runnable threads (in
// 1/16ths) is more than half a thread past cpus.
func oversubscribed(runnable16, cpus int) bool {
	return runnable16 > 16*cpus+8
}

// spinPolicy is one waiter's spin budget, from how its recent waits went
// (Pool.busy overrides it). short is a moving average, in 1/1024ths, of
// whether a wait's hand-off came within spinMax of its start. For a wait
// that parked, that is when the other side sent the wake-up (Pool.sentAt),
// not when the parked thread ran again: a wake-up takes 60-130 µs to run
// on the project's VM, and a wait parked because the budget was spinMin
// must still count as short when the hand-off came soon after, or a
// machine that quiets down would never get the long budget back. The
// budget is spinMax while at least spinShortShare of the waits are short
// (an idle pool's long waits between requests are few), else spinMin. Each
// Pool waiter has its own (the caller's is used under Pool.mu, a worker's
// by that worker only), on its own cache line.
type spinPolicy struct {
	short int32
	_     [60]byte
}

const (
	spinShortShare = 768 // of 1024: three waits in four
	spinSmoothing  = 16  // each wait moves short by 1/16 of the difference
)

func (s *spinPolicy) budget() time.Duration {
	if s.short >= spinShortShare {
		return spinMax
	}
	return spinMin
}

// note records a wait of d.
func (s *spinPolicy) note(d time.Duration) {
	v := int32(0)
	if d <= spinMax {
		v = 1024
	}
	s.short += (v - s.short) / spinSmoothing
}

// poolStats counts hand-offs, for tests and benchmarks (PoolStats).
type poolStats struct {
	loops   atomic.Int64 // parallel loops (jobs given to helpers)
	parks   atomic.Int64 // a worker or the caller blocked on its channel
	inlines atomic.Int64 // loops run on the caller alone (one chunk, one thread)
}

// PoolStats is what a Pool counted since it was made.
type PoolStats struct {
	// Loops is how many parallel loops (barriers) ran on several workers;
	// Inline how many ran on the caller alone.
	Loops, Inline int64
	// Parks is how many times a worker or the caller blocked (a scheduler
	// wake-up each) instead of catching the hand-off while spinning.
	Parks int64
}

// Stats returns the pool's counters. A nil Pool has none.
func (p *Pool) Stats() PoolStats {
	if p == nil {
		return PoolStats{}
	}
	return PoolStats{Loops: p.stats.loops.Load(), Inline: p.stats.inlines.Load(), Parks: p.stats.parks.Load()}
}

// NewPool starts a pool of threads workers (the calling goroutine counts as
// one of them). threads <= 0 means runtime.NumCPU().
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &Pool{threads: threads, done: make(chan struct{}, 1)}
	p.perWorker = make([][]float32, threads)
	p.mat = newMatJob()
	p.quant = newQuantJob()
	p.wake = make([]chan struct{}, threads)
	p.parked = make([]atomic.Int32, threads)
	p.spins = make([]spinPolicy, threads)
	p.sentAt = make([]time.Time, threads)
	for w := 1; w < threads; w++ {
		p.wake[w] = make(chan struct{}, 1)
		go p.worker(w)
	}
	return p
}

// Threads returns the number of workers, the caller of For included.
// A nil Pool has one.
func (p *Pool) Threads() int {
	if p == nil {
		return 1
	}
	return p.threads
}

// Close stops the workers. The Pool must not be used afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.quit.Store(true)
	p.seq++
	p.claim.Store(p.seq << claimSeqShift) // news for spinning workers
	for w := 1; w < p.threads; w++ {
		close(p.wake[w])
	}
}

// For splits [0,n) into contiguous ranges, runs fn on them across the
// workers and returns when all are done. Ranges are claimed dynamically
// (a few per worker) so that a worker slowed by another process does not
// hold up the rest. A nil Pool runs fn(0, n) on the caller.
func (p *Pool) For(n int, fn func(lo, hi int)) {
	p.run(n, chunksPerWorker, fn, nil)
}

// forGEMV is For for a matrix product of a few activation rows (a decode
// step's), split in decodeChunksPerWorker chunks per worker: such a loop
// streams its weights once, and every chunk starts cold (the first few KB
// of its rows are read before the kernel's prefetch runs ahead of it).
func (p *Pool) forGEMV(n int, fn func(lo, hi int)) {
	p.run(n, decodeChunksPerWorker, fn, nil)
}

// chunksPerWorker trades load balance against per-chunk overhead (and, for
// MatMul, re-reading the activations once per chunk).
const chunksPerWorker = 4

// decodeChunksPerWorker is forGEMV's. On the project's 2-core VM, 2 instead
// of 4 took smollm-135m's decode (BenchmarkOursDecode, means of three
// alternating rounds of both builds) from 211 to 232 tok/s in Q4_K_M at one
// stream, 384 to 422 at four, and 350 to 380 in Q8_0 at four; Q8_0 at one
// stream stayed within the rounds' spread (197 and 189).
const decodeChunksPerWorker = 2

// forWorker is For with the worker index (0..Threads()-1) passed to fn, so
// that fn can use per-worker scratch space.
func (p *Pool) forWorker(n int, fn func(worker, lo, hi int)) {
	p.run(n, chunksPerWorker, nil, fn)
}

// run is For (fn) or forWorker (wfn); exactly one of them is non-nil.
func (p *Pool) run(n, perWorker int, fn func(lo, hi int), wfn func(worker, lo, hi int)) {
	chunks := n
	if p != nil {
		chunks = min(p.threads*perWorker, n, claimField)
	}
	p.runChunked(n, chunks, fn, wfn)
}

// runChunked is run with the chunk count given: [0, n) in chunks ranges of
// equal size (the last shorter).
func (p *Pool) runChunked(n, chunks int, fn func(lo, hi int), wfn func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	if p == nil || p.threads == 1 || n == 1 {
		if p != nil {
			p.stats.inlines.Add(1)
		}
		if fn != nil {
			fn(0, n)
		} else {
			wfn(0, 0, n)
		}
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		panic("kernels: For on a closed Pool")
	}
	chunks = min(max(chunks, 1), n, claimField)
	j := &p.job
	j.fn, j.wfn, j.n = fn, wfn, n
	j.chunk = (n + chunks - 1) / chunks
	chunks = (n + j.chunk - 1) / j.chunk
	p.stats.loops.Add(1)
	p.loadCheck()
	p.finished.Store(0)
	p.seq++
	seq := p.seq & (1<<(64-claimSeqShift) - 1)
	if seq == 0 { // 0 means "no job" to waiting
		p.seq++
		seq = 1
	}
	p.claim.Store(seq<<claimSeqShift | uint64(chunks)<<20)
	for w := 1; w < min(p.threads, chunks); w++ {
		if p.parked[w].Load() == 1 && p.parked[w].CompareAndSwap(1, 0) {
			p.sentAt[w] = time.Now()
			p.wake[w] <- struct{}{}
		}
	}
	p.runChunks(0)
	p.waitJob(seq, int64(chunks))
	j.fn, j.wfn = nil, nil
}

// waitJob returns when all chunks of job seq have finished.
func (p *Pool) waitJob(seq uint64, chunks int64) {
	s := &p.spins[0]
	ok, began := s.spin(p.busy.Load(), func() bool { return p.finished.Load() == chunks })
	if ok {
		return
	}
	p.waiting.Store(seq)
	if p.finished.Load() == chunks && p.waiting.CompareAndSwap(seq, 0) {
		s.note(time.Since(began))
		return
	}
	// Whoever finished the last chunk swapped waiting to 0 and sends.
	p.stats.parks.Add(1)
	<-p.done
	s.note(p.sentAt[0].Sub(began))
}

// spin polls cond for up to s's budget (spinMin when busy) and reports
// whether it held, and when the wait began (zero when cond held within the
// first polls). A wait that ends here is noted; one that goes on to park is
// noted by the caller when it ends.
func (s *spinPolicy) spin(busy bool, cond func() bool) (ok bool, began time.Time) {
	budget := s.budget()
	if busy {
		budget = spinMin
	}
	for i := 0; ; i++ {
		if cond() {
			if began.IsZero() {
				s.note(0)
			} else {
				s.note(time.Since(began))
			}
			return true, began
		}
		if i&15 == 15 {
			if began.IsZero() {
				began = time.Now()
			} else if time.Since(began) > budget {
				return false, began
			}
		}
		spinPause()
	}
}

// runChunks claims and runs chunks of the current job until none is left.
// It returns the claim word it last saw (no chunk left in it).
func (p *Pool) runChunks(worker int) uint64 {
	j := &p.job
	for {
		c := p.claim.Load()
		next, chunks := int(c&claimField), int(c>>20&claimField)
		if next >= chunks {
			return c
		}
		if !p.claim.CompareAndSwap(c, c+1) {
			continue
		}
		// Claimed: the job cannot end before this chunk finishes, so its
		// fields are stable.
		lo := next * j.chunk
		hi := min(lo+j.chunk, j.n)
		if j.fn != nil {
			j.fn(lo, hi)
		} else {
			j.wfn(worker, lo, hi)
		}
		if p.finished.Add(1) == int64(chunks) {
			if seq := c >> claimSeqShift; p.waiting.Load() == seq && p.waiting.CompareAndSwap(seq, 0) {
				p.sentAt[0] = time.Now()
				p.done <- struct{}{}
			}
		}
	}
}

func (p *Pool) worker(w int) {
	// A worker that starts after the first job was announced must still run
	// it (a Team's members wait for each other): no claim word is 0.
	seen := uint64(0)
	for {
		p.await(w, seen)
		if p.quit.Load() {
			return
		}
		seen = p.runChunks(w)
	}
}

// await returns when the claim word differs from seen (a new job, or
// Close), spinning on it and then parking on wake[w]. A wake-up may find
// the job's chunks all claimed already.
func (p *Pool) await(w int, seen uint64) {
	s := &p.spins[w]
	ok, began := s.spin(p.busy.Load(), func() bool { return p.claim.Load() != seen })
	if ok {
		return
	}
	p.parked[w].Store(1)
	if p.claim.Load() != seen && p.parked[w].CompareAndSwap(1, 0) {
		s.note(time.Since(began))
		return
	}
	// Either nothing new yet, or the caller swapped parked to 0 and sends.
	p.stats.parks.Add(1)
	<-p.wake[w]
	s.note(p.sentAt[w].Sub(began))
}
