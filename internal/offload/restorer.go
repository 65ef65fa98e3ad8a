package offload

import (
	"context"
	"sync"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/prefix"
)

// restorer runs the engine's prefetches on a fixed set of fetcher goroutines, so the number
// of fetches in flight is bounded however many requests queue. Each fetch runs under a
// context that FetchTimeout bounds and close cancels.
type restorer struct {
	fetcher *Fetcher
	block   int
	timeout time.Duration
	jobs    chan prefetchJob
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	once    sync.Once

	mu struct {
		sync.RWMutex
		closed bool // protected by mu; Prefetch holds it shared, close exclusive
	}
}

type prefetchJob struct {
	req   Request
	first int
	start time.Time
	done  func(engine.Prefetched)
}

func newRestorer(f *Fetcher, cfg Config) *restorer {
	r := &restorer{fetcher: f, block: cfg.Layout.BlockSize, timeout: cfg.FetchTimeout, jobs: make(chan prefetchJob, cfg.FetchQueue)}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	for range cfg.Fetchers {
		r.wg.Add(1)
		go r.run()
	}
	return r
}

// Prefetch implements engine.Restorer over the fetcher: the longest verified prefix across
// the tiers, cut by the cost model where restoring would be slower than recomputing. It never
// blocks the engine: with every fetcher busy and the queue full, or after Close, done gets an
// empty result at once.
func (t *Tiers) Prefetch(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, done func(engine.Prefetched)) {
	t.PrefetchInto(root, hashes, tokens, first, nil, done)
}

// PrefetchInto implements engine.IntoRestorer: Prefetch, with each block verified straight
// into dst[i], the pool block the engine reserved for prompt block first+i (Request.Into),
// for len(dst) blocks at most. nil dst is Prefetch. done is called after the last write into
// dst (a fetch ends before its result is handed over; a job never run writes nothing).
func (t *Tiers) PrefetchInto(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, dst [][]byte, done func(engine.Prefetched)) {
	t.PrefetchProgress(root, hashes, tokens, first, dst, nil, done)
}

// PrefetchProgress implements engine.ProgressRestorer: PrefetchInto, telling progress (when
// not nil) the cost model's plan and estimates, then each chunk of blocks as it is read and
// verified (Request.Progress), so the engine's PrefetchCost can weigh the wait.
func (t *Tiers) PrefetchProgress(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, dst [][]byte, progress *engine.PrefetchProgress, done func(engine.Prefetched)) {
	r := t.restorer
	parent := root
	if first > 0 {
		parent = hashes[first-1]
	}
	if dst != nil {
		hashes = hashes[:first+min(len(dst), len(hashes)-first)]
		dst = dst[:len(hashes)-first]
	}
	job := prefetchJob{first: first, start: time.Now(), done: done,
		req: Request{Root: root, Parent: parent, Hashes: hashes[first:], Tokens: tokens[first*r.block : len(hashes)*r.block], Pos: first * r.block, Into: dst}}
	if progress != nil {
		job.req.Progress = progress // a nil pointer in the interface would not read as nil
	}
	queued := false
	r.mu.RLock()
	if !r.mu.closed {
		select {
		case r.jobs <- job:
			queued = true
		default:
		}
	}
	r.mu.RUnlock()
	if !queued {
		done(engine.Prefetched{First: first, Discarded: map[string]int{}, Elapsed: time.Since(job.start)})
	}
}

func (r *restorer) run() {
	defer r.wg.Done()
	for {
		select {
		case <-r.ctx.Done():
			return
		case job := <-r.jobs:
			r.do(job)
		}
	}
}

func (r *restorer) do(job prefetchJob) {
	ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
	defer cancel()
	res, err := r.fetcher.fetch(ctx, job.req)
	if err != nil {
		res = Result{}
	}
	p := prefetched(job.first, res, job.req.Into != nil, r.fetcher.cfg.StateBytes)
	p.Elapsed = time.Since(job.start)
	job.done(p)
}

// prefetched is the engine's view of a fetch result: the usable leading blocks, with their
// tier and K/V (or, inPlace, verified into the reserved blocks already), and the others
// counted by discard reason. A block's checkpoint, when it has one, goes with it (State,
// aliasing the read: the engine decodes it when the result arrives).
func prefetched(first int, res Result, inPlace bool, stateBytes int) engine.Prefetched {
	p := engine.Prefetched{First: first, Discarded: map[string]int{}, Blocks: make([]engine.RestoredBlock, 0, res.Usable)}
	for i, b := range res.Blocks {
		if i < res.Usable && b.Record != nil {
			rb := engine.RestoredBlock{Tier: b.Tier, Data: b.Record.KV}
			if stateBytes > 0 && HasState(b.Record, stateBytes) {
				rb.State = b.Record.Aux[0]
			}
			if inPlace {
				rb.Data, rb.InPlace = nil, true
			}
			p.Blocks = append(p.Blocks, rb)
			continue
		}
		if b.Reason != "" {
			p.Discarded[b.Reason]++
		}
	}
	return p
}

// close cancels the fetches in flight, waits for the fetchers, and answers what is still
// queued with empty results (done is called exactly once per Prefetch).
func (r *restorer) close() {
	r.once.Do(func() {
		r.mu.Lock()
		r.mu.closed = true
		r.mu.Unlock()
		r.cancel()
		r.wg.Wait()
		for {
			select {
			case job := <-r.jobs:
				job.done(engine.Prefetched{First: job.first, Discarded: map[string]int{}, Elapsed: time.Since(job.start)})
			default:
				return
			}
		}
	})
}
