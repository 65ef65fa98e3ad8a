package offload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"stockpot/internal/kvcache"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// Admission is the write-back admission policy. Zero fields are off.
type Admission struct {
	MinHits         int // the block was reused at least this often on the device
	MinPrefixTokens int // its prefix, itself included, is at least this long
}

// Admit reports whether a block passes.
func (a Admission) Admit(hits, prefixTokens int) bool {
	return hits >= a.MinHits && prefixTokens >= a.MinPrefixTokens
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	Identity  [32]byte       // identity.Descriptor digest written into records
	Layout    kvcache.Layout // shape of every block
	Admission Admission
	// Remote is when the remote tier is written (see WritePolicy). Default WriteSelective.
	Remote WritePolicy
	// QueueLen is each tier's queue, in blocks (`--tier-queue-blocks`). Default 256: with
	// 64 KiB to 2 MiB blocks, that bounds write-back memory to what one or two long prompts
	// evict at once, per tier. Promotions to host have a queue of their own, bounded by
	// PromoteBytes (promote.go).
	QueueLen int
	// Workers is how many goroutines write each tier's queue, each one Put at a time
	// (`--tier-writers`). Default 1: a host Put is a copy, and the disk's and Redis's own
	// batching keeps one busy; more help a remote tier whose round trips, not its
	// bandwidth, bound the write-back.
	Workers int
	// PromoteBytes bounds the promotions waiting for the host tier, in bytes of their values
	// (promote.go). Default: the host tier's capacity (what it could hold at once; more
	// would only evict what was just promoted). 0 with no host tier.
	PromoteBytes int64
	// MaxBatch blocks go to one Put. Default 16.
	MaxBatch int
	// PutTimeout bounds one Put. Default 5s.
	PutTimeout time.Duration
	// OnPut, when set, is called on the tier's worker after each Put with its items and
	// error (the tier events: events.go).
	OnPut func(t TierStore, items []tier.Item, err error)
	// Keys, when set, sign every record (tier.Record.EncodeSigned): one encoding, shared by
	// every tier, so the host tier holds signed records too (read there unchecked).
	Keys *tier.Keyring
}

// DefaultWriterConfig returns the defaults; Identity and Layout must be set.
func DefaultWriterConfig() WriterConfig {
	return WriterConfig{QueueLen: 256, MaxBatch: 16, PutTimeout: 5 * time.Second}
}

func (c WriterConfig) validate() (WriterConfig, error) {
	d := DefaultWriterConfig()
	if err := c.Layout.Validate(); err != nil {
		return c, fmt.Errorf("offload: writer: %w", err)
	}
	if c.Identity == [32]byte{} {
		return c, errors.New("offload: writer: Identity is zero")
	}
	if c.Admission.MinHits < 0 || c.Admission.MinPrefixTokens < 0 {
		return c, fmt.Errorf("offload: writer: negative admission %+v", c.Admission)
	}
	if int(c.Remote) >= len(writePolicyNames) {
		return c, fmt.Errorf("offload: writer: %v", c.Remote)
	}
	if c.QueueLen <= 0 {
		c.QueueLen = d.QueueLen
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = d.MaxBatch
	}
	if c.Workers <= 0 {
		c.Workers = 1
	}
	if c.PutTimeout <= 0 {
		c.PutTimeout = d.PutTimeout
	}
	return c, nil
}

// Evicted describes a block the device pool is about to reuse
// (prefix.EventEvicted, plus what the admission policy needs).
type Evicted struct {
	Root, Hash, Parent prefix.Hash
	Tokens             []int32 // copied by Enqueue
	Hits               int     // reuses on the device
	PrefixTokens       int     // tokens from the start of the prompt through this block
	Aux                [][]byte
	StateComplete      bool
	// PinTTL > 0 writes the block pinned for that long (tier.Item.PinTTL), never Shadowed:
	// a pinned block of the pool at shutdown.
	PinTTL time.Duration
	// Owner is the block's owner tag (prefix.Event.Owner): tiers with per-owner budgets
	// account the block to it (tier.Item.Owner).
	Owner uint16
}

// WriterStats counts the Writer's work. Per-tier slices follow the tiers.
type WriterStats struct {
	Enqueued, NotAdmitted uint64
	Through               uint64 // blocks offered to the written-through tiers and admitted
	Promoted              uint64 // restored blocks queued to host (promotion)
	Dropped, Written      []uint64
	Failed                []uint64 // blocks whose Put returned an error
	Spilled               []uint64 // blocks a faster tier evicted, handed to this one
	Queued                []int    // writes waiting in each tier's queue now
	// PromoteQueued is the promotions waiting for the host tier now (promote.go).
	PromoteQueued int
}

// queued is one write in a tier's queue.
type queued struct {
	item tier.Item
	// spill: a faster tier (a tier.Spiller) evicted it; this tier's copy is now the only one
	// (tier.Unshadower), or it is written here if there is none.
	spill bool
}

type tierQueue struct {
	t                                 TierStore
	ch                                chan queued
	spiller                           tier.Spiller // the store, if it spills to tiers below; nil otherwise
	workers                           sync.WaitGroup
	dropped, written, failed, spilled atomic.Uint64
}

// Writer writes evicted blocks down the tiers, asynchronously.
type Writer struct {
	cfg         WriterConfig
	metrics     *Metrics
	queues      []*tierQueue
	promoter    *promoter // the host tier's promotions (promote.go); nil without a host tier
	enqueued    atomic.Uint64
	through     atomic.Uint64
	promoted    atomic.Uint64
	notAdmitted atomic.Uint64
	closeOnce   sync.Once
	mu          sync.RWMutex // Enqueue holds it shared; Close exclusive
	closed      bool         // protected by mu
}

// Reasons of stockpot_kv_tier_write_failures_total: why a block did not reach a tier.
const (
	FailQueueFull   = "queue_full"  // the tier's queue was full; dropped without a try
	FailNoSpace     = "no_space"    // the tier's storage is full (ENOSPC), even after evicting
	FailTooLarge    = "too_large"   // the block is larger than the tier's whole budget
	FailTimeout     = "timeout"     // the Put ran past WriterConfig.PutTimeout
	FailUnavailable = "unavailable" // the tier is skipped for now (a remote tier's breaker)
	FailIOError     = "io_error"    // any other error of the store
)

var writeFailureReasons = []string{FailQueueFull, FailNoSpace, FailTooLarge, FailTimeout, FailUnavailable, FailIOError}

// writeFailures counts the items of a Put of n that failed, by reason. A store joins one
// error per failed item (errors.Join); any other error failed the whole batch.
func writeFailures(err error, n int) map[string]int {
	if err == nil {
		return nil
	}
	out := map[string]int{}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out[writeFailure(e)]++
		}
		return out
	}
	out[writeFailure(err)] = n
	return out
}

func writeFailure(err error) string {
	switch {
	case errors.Is(err, tier.ErrNoSpace) || errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return FailNoSpace
	case errors.Is(err, tier.ErrTooLarge):
		return FailTooLarge
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return FailTimeout
	case errors.Is(err, tier.ErrUnavailable):
		return FailUnavailable
	}
	return FailIOError
}

// NewWriter starts one worker per tier. metrics may be nil.
func NewWriter(cfg WriterConfig, tiers []TierStore, metrics *Metrics) (*Writer, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	w := &Writer{cfg: cfg, metrics: metrics}
	for _, t := range tiers {
		q := &tierQueue{t: t, ch: make(chan queued, cfg.QueueLen)}
		w.queues = append(w.queues, q)
		metrics.initWriteFailures(t.Tier.String())
		if t.Tier == kvtier.Host && w.promoter == nil {
			w.promoter = newPromoter(q, cfg.PromoteBytes)
		}
	}
	// Each Spiller's evictions go to the Unshadowers below it. Safe without w.mu: a spill
	// comes from a Put on the spilling tier's worker, and Close closes the queues in tier
	// order, each after the worker above has finished.
	for i, q := range w.queues {
		sp, ok := q.t.Store.(tier.Spiller)
		if !ok {
			continue
		}
		var below []*tierQueue
		for _, b := range w.queues[i+1:] {
			if _, ok := b.t.Store.(tier.Unshadower); ok {
				below = append(below, b)
			}
		}
		if len(below) > 0 {
			q.spiller = sp
			sp.SpillTo(func(items []tier.Item) { w.spill(below, items) })
		}
	}
	for _, q := range w.queues {
		q.workers.Add(cfg.Workers)
		for range cfg.Workers {
			go w.run(q)
		}
	}
	if w.promoter != nil {
		go w.runPromote(w.promoter)
	}
	return w, nil
}

// spill queues what a faster tier evicted to the tiers below; never blocks (a full queue
// drops it, counted as queue_full).
func (w *Writer) spill(below []*tierQueue, items []tier.Item) {
	for _, q := range below {
		for _, it := range items {
			it.Shadowed = false
			select {
			case q.ch <- queued{item: it, spill: true}:
			default:
				q.dropped.Add(1)
				w.metrics.WriteFailed(q.t.Tier.String(), FailQueueFull, 1)
			}
		}
	}
}

// Enqueue offers one evicted block whose K/V is kv (the arena's bytes; read
// only during the call). It returns whether the block was queued to at least
// one tier. Never blocks: a full queue drops the write (counted).
func (w *Writer) Enqueue(ev Evicted, kv []byte) bool { return w.enqueue(ev, kv, false) }

// EnqueueWait is Enqueue that waits for queue space instead of dropping: for the write-back of
// the whole working pool at shutdown, when no request is waiting on the caller.
func (w *Writer) EnqueueWait(ev Evicted, kv []byte) bool { return w.enqueue(ev, kv, true) }

// encoded is one block's record, encoded: immutable, shared by every tier's queue.
type encoded struct {
	key   tier.Key
	value []byte
}

func (e encoded) item(ev Evicted) tier.Item {
	return tier.Item{Key: e.key, Value: e.value, PinTTL: ev.PinTTL, Owner: ev.Owner}
}

// encode copies a block out of the arena into its record.
func (w *Writer) encode(ev Evicted, kv []byte) encoded {
	rec := tier.Record{Identity: w.cfg.Identity, Root: ev.Root, Hash: ev.Hash, Parent: ev.Parent,
		Tokens: ev.Tokens, Layout: w.cfg.Layout, KV: kv, Aux: ev.Aux, StateComplete: ev.StateComplete}
	b, err := rec.EncodeSigned(w.cfg.Keys) // the copy out of the arena
	if err != nil {
		panic(fmt.Sprintf("offload: block does not encode: %v", err)) // the engine passed a wrong block
	}
	return encoded{key: rec.Key(), value: b}
}

// drop counts a write that q's full queue refused.
func (w *Writer) drop(q *tierQueue) {
	q.dropped.Add(1)
	w.metrics.Dropped(q.t.Tier.String())
	w.metrics.WriteFailed(q.t.Tier.String(), FailQueueFull, 1)
}

func (w *Writer) enqueue(ev Evicted, kv []byte, wait bool) bool {
	if !w.cfg.Admission.Admit(ev.Hits, ev.PrefixTokens) {
		w.notAdmitted.Add(1)
		return false
	}
	enc := w.encode(ev, kv)
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return false
	}
	w.enqueued.Add(1)
	sent := false
	shadowed := false // a Spiller above has taken the write: it holds it, and tells when it lets go
	for _, q := range w.queues {
		if w.cfg.Remote.writesThrough(q.t.Tier) {
			continue // written at the commit (Through)
		}
		// The value is shared, immutable, by every tier. At shutdown (wait) nothing above
		// outlives the process, so nothing shadows the write.
		it := queued{item: enc.item(ev)}
		it.item.Shadowed = shadowed && !wait && ev.PinTTL <= 0
		if wait {
			q.ch <- it
			sent = true
			shadowed = shadowed || q.spiller != nil
			continue
		}
		select {
		case q.ch <- it:
			sent = true
			shadowed = shadowed || q.spiller != nil
		default:
			w.drop(q)
		}
	}
	return sent
}

// run is one of q's workers (WriterConfig.Workers): it takes up to MaxBatch queued writes at
// a time and puts them, until q's queue is closed and empty.
func (w *Writer) run(q *tierQueue) {
	defer q.workers.Done()
	batch := make([]queued, 0, w.cfg.MaxBatch)
	var items []tier.Item
	for it := range q.ch {
		batch = append(batch[:0], it)
	fill:
		for len(batch) < w.cfg.MaxBatch {
			select {
			case it, ok := <-q.ch:
				if !ok {
					break fill
				}
				batch = append(batch, it)
			default:
				break fill
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.PutTimeout)
		items = w.maybeUnshadow(ctx, q, batch, items[:0])
		w.put(ctx, q, items)
		cancel()
		clear(batch) // drop references to the values
		clear(items)
	}
}

// put writes items to q's tier in one Put and counts the outcome (written, failed by
// reason, OnPut). Nothing is retried here (a store retries what it can, as the disk does on
// ENOSPC): a block that failed is recomputed if it is ever needed.
func (w *Writer) put(ctx context.Context, q *tierQueue, items []tier.Item) {
	if len(items) == 0 {
		return
	}
	start := time.Now()
	err := q.t.Store.Put(ctx, items)
	w.metrics.ObserveWrite(q.t.Tier.String(), time.Since(start))
	if w.cfg.OnPut != nil {
		w.cfg.OnPut(q.t, items, err)
	}
	failed := 0
	for reason, n := range writeFailures(err, len(items)) {
		w.metrics.WriteFailed(q.t.Tier.String(), reason, n)
		failed += n
	}
	failed = min(failed, len(items))
	q.failed.Add(uint64(failed))
	q.written.Add(uint64(len(items) - failed))
}

// maybeUnshadow turns the spills in batch into Unshadow calls: a key the tier holds becomes
// its sole copy without being written again; the others are written, as sole copies. A
// spill wins over a write-back of the same key in the batch (the value is the same: the key
// names it). It appends what to Put to items and returns it.
func (w *Writer) maybeUnshadow(ctx context.Context, q *tierQueue, batch []queued, items []tier.Item) []tier.Item {
	if !slices.ContainsFunc(batch, func(b queued) bool { return b.spill }) {
		for _, b := range batch {
			items = append(items, b.item)
		}
		return items
	}
	var spills []tier.Key
	spilled := map[tier.Key]tier.Item{}
	for _, b := range batch {
		if b.spill {
			if _, dup := spilled[b.item.Key]; !dup {
				spills = append(spills, b.item.Key)
			}
			spilled[b.item.Key] = b.item
		}
	}
	for _, b := range batch {
		if _, ok := spilled[b.item.Key]; !ok {
			items = append(items, b.item)
		}
	}
	if len(spills) == 0 {
		return items
	}
	q.spilled.Add(uint64(len(spills)))
	var held []bool
	if u, ok := q.t.Store.(tier.Unshadower); ok {
		held, _ = u.Unshadow(ctx, spills) // on error, write them all
	}
	for i, k := range spills {
		if i >= len(held) || !held[i] {
			items = append(items, spilled[k])
		}
	}
	return items
}

// Close stops accepting blocks, writes what is queued, and waits. Tiers are closed in order,
// each after the one above has finished: a tier's last Puts may still spill to those below.
func (w *Writer) Close() {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		if w.promoter != nil {
			w.promoter.close() // its Puts to host may spill to the queues below
		}
		for _, q := range w.queues {
			close(q.ch)
			q.workers.Wait()
			if q.spiller != nil {
				q.spiller.SpillTo(nil) // the queues below are about to close
			}
		}
	})
}

// Stats returns the counters.
func (w *Writer) Stats() WriterStats {
	st := WriterStats{Enqueued: w.enqueued.Load(), Through: w.through.Load(), Promoted: w.promoted.Load(), NotAdmitted: w.notAdmitted.Load()}
	for _, q := range w.queues {
		st.Dropped = append(st.Dropped, q.dropped.Load())
		st.Written = append(st.Written, q.written.Load())
		st.Failed = append(st.Failed, q.failed.Load())
		st.Spilled = append(st.Spilled, q.spilled.Load())
		st.Queued = append(st.Queued, len(q.ch))
	}
	if w.promoter != nil {
		st.PromoteQueued, _ = w.promoter.depth()
	}
	return st
}
