package offload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"stockpot/internal/kvcache"
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
	// QueueLen is each tier's queue, in blocks. Default 256: with 64 KiB to
	// 2 MiB blocks, that bounds write-back memory to what one or two long
	// prompts evict at once, per tier.
	QueueLen int
	// MaxBatch blocks go to one Put. Default 16.
	MaxBatch int
	// PutTimeout bounds one Put. Default 5s.
	PutTimeout time.Duration
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
	if c.QueueLen <= 0 {
		c.QueueLen = d.QueueLen
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = d.MaxBatch
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
}

// WriterStats counts the Writer's work. Per-tier slices follow the tiers.
type WriterStats struct {
	Enqueued, NotAdmitted uint64
	Dropped, Written      []uint64
	Failed                []uint64 // blocks whose Put returned an error
}

type tierQueue struct {
	t                        Tier
	ch                       chan tier.Item
	dropped, written, failed atomic.Uint64
}

// Writer writes evicted blocks down the tiers, asynchronously.
type Writer struct {
	cfg         WriterConfig
	metrics     *Metrics
	queues      []*tierQueue
	wg          sync.WaitGroup
	enqueued    atomic.Uint64
	notAdmitted atomic.Uint64
	closeOnce   sync.Once
	mu          sync.RWMutex // Enqueue holds it shared; Close exclusive
	closed      bool         // protected by mu
}

// NewWriter starts one worker per tier. metrics may be nil.
func NewWriter(cfg WriterConfig, tiers []Tier, metrics *Metrics) (*Writer, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	w := &Writer{cfg: cfg, metrics: metrics}
	for _, t := range tiers {
		q := &tierQueue{t: t, ch: make(chan tier.Item, cfg.QueueLen)}
		w.queues = append(w.queues, q)
		w.wg.Add(1)
		go w.run(q)
	}
	return w, nil
}

// Enqueue offers one evicted block whose K/V is kv (the arena's bytes; read
// only during the call). It returns whether the block was queued to at least
// one tier. Never blocks: a full queue drops the write (counted).
func (w *Writer) Enqueue(ev Evicted, kv []byte) bool { return w.enqueue(ev, kv, false) }

// EnqueueWait is Enqueue that waits for queue space instead of dropping: for the write-back of
// the whole working pool at shutdown, when no request is waiting on the caller.
func (w *Writer) EnqueueWait(ev Evicted, kv []byte) bool { return w.enqueue(ev, kv, true) }

func (w *Writer) enqueue(ev Evicted, kv []byte, wait bool) bool {
	if !w.cfg.Admission.Admit(ev.Hits, ev.PrefixTokens) {
		w.notAdmitted.Add(1)
		return false
	}
	rec := tier.Record{Identity: w.cfg.Identity, Root: ev.Root, Hash: ev.Hash, Parent: ev.Parent,
		Tokens: ev.Tokens, Layout: w.cfg.Layout, KV: kv, Aux: ev.Aux, StateComplete: ev.StateComplete}
	b, err := rec.Encode() // the copy out of the arena
	if err != nil {
		panic(fmt.Sprintf("offload: evicted block does not encode: %v", err)) // the engine passed a wrong block
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return false
	}
	w.enqueued.Add(1)
	item := tier.Item{Key: rec.Key(), Value: b} // shared, immutable, by every tier
	queued := false
	for _, q := range w.queues {
		if wait {
			q.ch <- item
			queued = true
			continue
		}
		select {
		case q.ch <- item:
			queued = true
		default:
			q.dropped.Add(1)
			w.metrics.Dropped(q.t.Name)
		}
	}
	return queued
}

func (w *Writer) run(q *tierQueue) {
	defer w.wg.Done()
	batch := make([]tier.Item, 0, w.cfg.MaxBatch)
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
		start := time.Now()
		err := q.t.Store.Put(ctx, batch)
		cancel()
		w.metrics.ObserveWrite(q.t.Name, time.Since(start))
		if err != nil {
			// A store reports per-item failures joined; without knowing
			// which, count the batch as failed. Nothing is retried: the
			// block is recomputed if it is ever needed.
			q.failed.Add(uint64(len(batch)))
		} else {
			q.written.Add(uint64(len(batch)))
		}
		clear(batch) // drop references to the values
	}
}

// Close stops accepting blocks, writes what is queued, and waits.
func (w *Writer) Close() {
	w.closeOnce.Do(func() {
		w.mu.Lock()
		w.closed = true
		for _, q := range w.queues {
			close(q.ch)
		}
		w.mu.Unlock()
		w.wg.Wait()
	})
}

// Stats returns the counters.
func (w *Writer) Stats() WriterStats {
	st := WriterStats{Enqueued: w.enqueued.Load(), NotAdmitted: w.notAdmitted.Load()}
	for _, q := range w.queues {
		st.Dropped = append(st.Dropped, q.dropped.Load())
		st.Written = append(st.Written, q.written.Load())
		st.Failed = append(st.Failed, q.failed.Load())
	}
	return st
}
