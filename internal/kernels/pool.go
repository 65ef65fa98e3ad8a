package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool is a fixed set of worker goroutines that run the parallel loops of
// the kernels. It is created once and reused for every call: a For call
// starts no goroutine and allocates nothing.
//
// For is not reentrant: fn must not call For on the same Pool. Calls from
// several goroutines are serialized (protected by mu).
type Pool struct {
	threads int

	mu sync.Mutex // serializes For calls; protects job
	// job is the loop being run; written under mu before the workers are woken.
	job struct {
		fn     func(lo, hi int)
		wfn    func(worker, lo, hi int)
		n      int
		chunk  int
		next   atomic.Int64 // next chunk index to claim
		chunks int
	}
	pending atomic.Int32    // workers that have not finished the current job
	wake    []chan struct{} // one per worker (index 1..threads-1), buffered 1
	done    chan struct{}   // signalled by the last worker to finish
	closed  bool

	matMu sync.Mutex // held for a whole MatMul; protects mat and quant
	mat   *matJob
	quant *quantJob

	// perWorker[w] is worker w's buffer; touched only by worker w inside a
	// forWorker fn (so under mu).
	perWorker [][]float32

	attn attnScratch // Attention's buffers (its own lock)
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
	for w := 1; w < p.threads; w++ {
		close(p.wake[w])
	}
}

// For splits [0,n) into contiguous ranges, runs fn on them across the
// workers and returns when all are done. Ranges are claimed dynamically
// (a few per worker) so that a worker slowed by another process does not
// hold up the rest. A nil Pool runs fn(0, n) on the caller.
func (p *Pool) For(n int, fn func(lo, hi int)) {
	p.run(n, fn, nil)
}

// chunksPerWorker trades load balance against per-chunk overhead (and, for
// MatMul, re-reading the activations once per chunk).
const chunksPerWorker = 4

// forWorker is For with the worker index (0..Threads()-1) passed to fn, so
// that fn can use per-worker scratch space.
func (p *Pool) forWorker(n int, fn func(worker, lo, hi int)) {
	p.run(n, nil, fn)
}

// run is For (fn) or forWorker (wfn); exactly one of them is non-nil.
func (p *Pool) run(n int, fn func(lo, hi int), wfn func(worker, lo, hi int)) {
	if n <= 0 {
		return
	}
	if p == nil || p.threads == 1 || n == 1 {
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
	chunks := p.threads * chunksPerWorker
	if chunks > n {
		chunks = n
	}
	j := &p.job
	j.fn, j.wfn, j.n = fn, wfn, n
	j.chunk = (n + chunks - 1) / chunks
	j.chunks = (n + j.chunk - 1) / j.chunk
	j.next.Store(0)
	helpers := p.threads - 1
	if helpers > j.chunks-1 {
		helpers = j.chunks - 1
	}
	p.pending.Store(int32(helpers))
	for w := 1; w <= helpers; w++ {
		p.wake[w] <- struct{}{}
	}
	p.runChunks(0)
	if helpers > 0 {
		<-p.done
	}
	j.fn, j.wfn = nil, nil
}

// runChunks claims and runs chunks of the current job until none is left.
func (p *Pool) runChunks(worker int) {
	j := &p.job
	for {
		c := int(j.next.Add(1) - 1)
		if c >= j.chunks {
			return
		}
		lo := c * j.chunk
		hi := min(lo+j.chunk, j.n)
		if j.fn != nil {
			j.fn(lo, hi)
		} else {
			j.wfn(worker, lo, hi)
		}
	}
}

func (p *Pool) worker(w int) {
	for range p.wake[w] {
		p.runChunks(w)
		if p.pending.Add(-1) == 0 {
			p.done <- struct{}{}
		}
	}
}
