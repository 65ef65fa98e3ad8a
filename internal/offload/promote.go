package offload

import (
	"context"
	"math"
	"sync"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
)

// Promotion: a block restored from disk or remote is also put in host, so the next request
// that needs it after the working pool lets it go again reads it from RAM, not from the disk
// or the network a second time (the hot set climbs to the fastest tier that has room).
//
// How: the fetch hands the record's bytes as read (the tier's value, verified; no copy, no
// re-encoding) to Writer.Promote, which queues them for the host tier, off the request's
// path: never blocking. The promotion queue is not the write-back's 256-entry channel: a
// restore of 480K tokens hands it 30,000 blocks at once, and that channel dropped all but a
// few hundred of them. It is bounded by bytes instead (WriterConfig.PromoteBytes, by default
// the host tier's capacity: more than host holds would only evict what was just promoted), a
// worker of its own puts it in MaxBatch-block Puts, and only what would pass that bound is
// dropped (counted as a host queue_full write failure and dropped write). Host's own
// admission applies: its budget, its LRU eviction (what it evicts spills back down as any
// host eviction does, and the disk already holds it). The write admission (MinHits,
// MinPrefixTokens) is not applied again: the block passed it when it was written to the tier
// it came from. Values the disk's Recycler would reuse are not recycled when promoted: host
// keeps them.

// SetPromote makes every fetch hand the records it restored from a tier other than host to fn
// (as Items to put in host). fn must not block. nil turns promotion off. Call it before the
// first Fetch.
func (f *Fetcher) SetPromote(fn func([]tier.Item)) { f.promote = fn }

// promotes reports whether blocks read from tier t are promoted (so their values are kept).
func (f *Fetcher) promotes(t kvtier.Tier) bool {
	return f.promote != nil && t != kvtier.Host && t != kvtier.Transfer
}

// promoteUsable hands the usable blocks of res that came from below host to f.promote.
// REQUIRES: vals[i] is block i's value as read, for i < res.Usable.
func (f *Fetcher) promoteUsable(req Request, res *Result, vals [][]byte) {
	if f.promote == nil {
		return
	}
	var items []tier.Item
	for i := range res.Usable {
		if b := res.Blocks[i]; b.Record != nil && f.promotes(b.Tier) && vals[i] != nil {
			items = append(items, tier.Item{Key: tier.Key{Root: req.Root, Hash: req.Hashes[i]}, Value: vals[i]})
		}
	}
	if len(items) > 0 {
		f.promote(items)
	}
}

// Promote queues items (encoded records restored from a lower tier) for the host tier.
// Never blocks: what would take the promotion queue past WriterConfig.PromoteBytes is
// dropped and counted.
func (w *Writer) Promote(items []tier.Item) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed || w.promoter == nil {
		return
	}
	queued, dropped := w.promoter.add(items)
	w.promoted.Add(uint64(queued))
	for range dropped {
		w.drop(w.promoter.q)
	}
}

// promoter is the host tier's promotion queue: items in arrival order, bounded by the bytes
// of their values, drained by one worker (Writer.runPromote) in MaxBatch Puts.
type promoter struct {
	q      *tierQueue // the host tier's: its store and counters
	budget int64
	wake   chan struct{} // capacity 1: a signal that items or close arrived
	done   chan struct{} // closed when the worker has put everything and returned
	mu     struct {
		sync.Mutex
		items  []tier.Item // waiting, oldest first
		bytes  int64       // of the values of items and of the batch being put
		closed bool
	}
}

func newPromoter(q *tierQueue, budget int64) *promoter {
	if budget <= 0 {
		budget = q.t.Store.Stats().CapacityBytes // what host holds at once
	}
	if budget <= 0 {
		budget = math.MaxInt64 // a store of no stated capacity (tests' memstore)
	}
	return &promoter{q: q, budget: budget, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

// add queues the items that fit in the budget, in order, and returns how many it queued and
// dropped.
func (p *promoter) add(items []tier.Item) (queued, dropped int) {
	p.mu.Lock()
	for _, it := range items {
		if n := int64(len(it.Value)); p.mu.bytes+n <= p.budget {
			p.mu.items = append(p.mu.items, it)
			p.mu.bytes += n
			queued++
		} else {
			dropped++
		}
	}
	p.mu.Unlock()
	p.signal()
	return queued, dropped
}

func (p *promoter) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take moves up to n waiting items into batch (reused) and returns it; ok is false once the
// queue is closed and empty. The items' bytes stay counted until release.
func (p *promoter) take(batch []tier.Item, n int) (out []tier.Item, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := min(n, len(p.mu.items))
	out = append(batch[:0], p.mu.items[:k]...)
	clear(p.mu.items[:k]) // the queue holds no reference to what it handed out
	p.mu.items = p.mu.items[k:]
	if len(p.mu.items) == 0 {
		p.mu.items = nil // let a large burst's array go
	}
	return out, k > 0 || !p.mu.closed
}

// release uncounts a batch that was put.
func (p *promoter) release(batch []tier.Item) {
	var n int64
	for _, it := range batch {
		n += int64(len(it.Value))
	}
	p.mu.Lock()
	p.mu.bytes -= n
	p.mu.Unlock()
}

// depth returns the promotions waiting now, in blocks, and the bytes of their values and of
// the batch being put.
func (p *promoter) depth() (blocks int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.items), p.mu.bytes
}

// close makes the worker put what is queued and return, and waits for it.
func (p *promoter) close() {
	p.mu.Lock()
	p.mu.closed = true
	p.mu.Unlock()
	p.signal()
	<-p.done
}

// runPromote is the promotion queue's worker: MaxBatch items per host Put, until it is
// closed and empty.
func (w *Writer) runPromote(p *promoter) {
	defer close(p.done)
	var batch []tier.Item
	for {
		var ok bool
		batch, ok = p.take(batch, w.cfg.MaxBatch)
		if !ok {
			return
		}
		if len(batch) == 0 {
			<-p.wake
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.PutTimeout)
		w.put(ctx, p.q, batch)
		cancel()
		p.release(batch)
		clear(batch)
	}
}

// SetRestored makes every fetch hand the keys of the verified blocks it restored from the
// remote tier to fn (adoption: tierEvents.adopt). fn must not block for long. Call it before
// the first Fetch.
func (f *Fetcher) SetRestored(fn func([]tier.Key)) { f.restored = fn }

// reportRemote hands the usable blocks of res that came from the remote tier to f.restored.
func (f *Fetcher) reportRemote(req Request, res *Result) {
	if f.restored == nil {
		return
	}
	var keys []tier.Key
	for i := range res.Usable {
		if b := res.Blocks[i]; b.Record != nil && b.Tier == kvtier.Remote {
			keys = append(keys, tier.Key{Root: req.Root, Hash: req.Hashes[i]})
		}
	}
	if len(keys) > 0 {
		f.restored(keys)
	}
}
