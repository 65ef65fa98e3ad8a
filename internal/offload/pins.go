package offload

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// Pins down the tiers.
//
// The engine pins blocks in the working pool (engine.Hooks.PinEvents); the tiers that honour
// pins (tier.Pinner) keep them too, with the same TTL, so a pinned prefix outlives its pool
// copy's eviction after expiry elsewhere, a restart, or a replica that shares the remote
// tier. The pool's events reach the stores off the request path:
//
//   - PinCreated (a new pin, or a longer TTL): each Pinner store pins the key if it holds it
//     (Pin), and is given the block, encoded on the engine's goroutine as a write-back is, with
//     Item.PinTTL if it does not. Pinned items are sole copies (never Shadowed).
//   - PinRefreshed (hits; the engine sends at most a few per TTL): Pin again, which moves the
//     expiry to now + TTL. A store that lost the block meanwhile is not sent it again.
//   - PinRemoved (Unpin): Pin with ttl 0, which unpins.
//
// A bounded queue and one worker, as the Writer's per-tier queues: a full queue drops the
// event (counted as queue_full of each Pinner tier), never blocks the engine.
//
// After a restart, the persistent stores' pins (tier.Pinner.Pins, read at Open) become the
// engine's Config.KnownPins: a block that enters the pool again, restored or recomputed, is
// pinned again with its remaining time. The flush at shutdown writes pinned blocks with
// their TTL (FlushBlock), so the disk keeps them pinned whichever write lands first.

// pinQueueLen is the pin worker's queue, in jobs (one job is the events of one engine hook
// call with the same kind and TTL; a job of PinCreated events holds their encoded blocks). The
// engine calls the hook with at most 32 MiB of checkpoints at a time, so one pin of a long
// hybrid prefix is many jobs at once: about 60 for 480K tokens of small-kimi-k3. 1,024 is far
// above what a pool pins at once; the jobs' bytes are the encoded blocks themselves, which
// the host tier keeps once written.
const pinQueueLen = 1024

// pinJob is one Pin call (and, for new pins, the Puts of what a store lacks) on every Pinner
// tier. ttl 0 unpins. items[i].Value is nil for a refresh or an unpin.
type pinJob struct {
	ttl   time.Duration
	items []tier.Item
}

// pinState is what the pool has pinned, as the pin events told (for FlushBlock).
type pinState struct {
	ttl     time.Duration
	expires time.Time
}

// pinWriter takes the pool's pin events down the tiers that are Pinners.
type pinWriter struct {
	identity [32]byte
	layout   kvcache.Layout
	tiers    []TierStore // the Pinner tiers, fastest first
	metrics  *Metrics
	timeout  time.Duration
	onPut    func(TierStore, []tier.Item, error) // set before the first job; nil: none
	// stateBytes, for a hybrid model, is a checkpoint's size: a pinned block is written
	// complete only with its checkpoint (PinEvent.State), as the write-back does.
	stateBytes int
	keys       *tier.Keyring // sign the records (WriterConfig.Keys); nil: unsigned
	jobs       chan pinJob
	done       chan struct{}
	once       sync.Once
	dropped    atomic.Uint64
	pinned     atomic.Uint64 // keys a store held and pinned
	put        atomic.Uint64 // blocks Put pinned into a store that lacked them
	failed     atomic.Uint64

	// pins is the pool's pinned blocks by hash. Engine goroutine only: PinEvents and
	// FlushBlock both run there.
	pins map[prefix.Hash]pinState

	mu     sync.RWMutex // PinEvents holds it shared; close exclusive
	closed bool         // protected by mu
}

func newPinWriter(identity [32]byte, layout kvcache.Layout, tiers []TierStore, metrics *Metrics, timeout time.Duration) *pinWriter {
	w := &pinWriter{identity: identity, layout: layout, metrics: metrics, timeout: timeout,
		jobs: make(chan pinJob, pinQueueLen), done: make(chan struct{}), pins: map[prefix.Hash]pinState{}}
	for _, t := range tiers {
		if _, ok := t.Store.(tier.Pinner); ok {
			w.tiers = append(w.tiers, t)
		}
	}
	go w.run()
	return w
}

// events turns one step's pin events into jobs. kv[i] is the K/V of a PinCreated event's
// block, read during the call only. Never blocks.
func (w *pinWriter) events(evs []engine.PinEvent, kv [][]byte) {
	for _, ev := range evs {
		switch ev.Kind {
		case engine.PinCreated, engine.PinRefreshed:
			w.pins[ev.Hash] = pinState{ttl: ev.TTL, expires: ev.Expires}
		case engine.PinRemoved:
			delete(w.pins, ev.Hash)
		}
	}
	if len(w.tiers) == 0 {
		return
	}
	var cur *pinJob
	var curKind engine.PinEventKind
	var jobs []pinJob
	for i, ev := range evs {
		ttl := ev.TTL
		if ev.Kind == engine.PinRemoved {
			ttl = 0
		}
		if cur == nil || curKind != ev.Kind || cur.ttl != ttl {
			jobs = append(jobs, pinJob{ttl: ttl})
			cur, curKind = &jobs[len(jobs)-1], ev.Kind
		}
		it := tier.Item{Key: tier.Key{Root: ev.Root, Hash: ev.Hash}, PinTTL: ttl}
		if ev.Kind == engine.PinCreated && kv[i] != nil {
			rec := tier.Record{Identity: w.identity, Root: ev.Root, Hash: ev.Hash, Parent: ev.Parent,
				Tokens: ev.Tokens, Layout: w.layout, KV: kv[i], StateComplete: w.stateBytes == 0}
			if w.stateBytes > 0 && len(ev.State) == w.stateBytes {
				rec.Aux, rec.StateComplete = [][]byte{ev.State}, true // its checkpoint goes with it
			}
			b, err := rec.EncodeSigned(w.keys) // the copy out of the arena
			if err != nil {
				panic(fmt.Sprintf("offload: pinned block does not encode: %v", err)) // the engine passed a wrong block
			}
			it.Value = b
		}
		cur.items = append(cur.items, it)
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return
	}
	for _, j := range jobs {
		select {
		case w.jobs <- j:
		default:
			w.dropped.Add(uint64(len(j.items)))
			for _, t := range w.tiers {
				w.metrics.WriteFailed(t.Tier.String(), FailQueueFull, len(j.items))
			}
		}
	}
}

// pinTTL returns the TTL a block is pinned with in the pool now (0: not pinned).
func (w *pinWriter) pinTTL(h prefix.Hash, now time.Time) time.Duration {
	p, ok := w.pins[h]
	if !ok || !p.expires.After(now) {
		return 0
	}
	return p.ttl
}

func (w *pinWriter) run() {
	defer close(w.done)
	for j := range w.jobs {
		w.apply(j)
	}
}

// apply runs one job on every Pinner tier.
func (w *pinWriter) apply(j pinJob) {
	keys := make([]tier.Key, len(j.items))
	for i, it := range j.items {
		keys[i] = it.Key
	}
	for _, t := range w.tiers {
		ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
		held, err := t.Store.(tier.Pinner).Pin(ctx, keys, j.ttl)
		if err != nil {
			w.failed.Add(uint64(len(keys)))
			w.metrics.WriteFailed(t.Tier.String(), writeFailure(err), len(keys))
			cancel()
			continue
		}
		var put []tier.Item
		for i, it := range j.items {
			if i < len(held) && held[i] {
				w.pinned.Add(1)
				continue
			}
			if j.ttl > 0 && it.Value != nil {
				put = append(put, it)
			}
		}
		if len(put) > 0 {
			start := time.Now()
			err := t.Store.Put(ctx, put)
			w.metrics.ObserveWrite(t.Tier.String(), time.Since(start))
			if w.onPut != nil {
				w.onPut(t, put, err) // the tier events (events.go)
			}
			failed := 0
			for reason, n := range writeFailures(err, len(put)) {
				w.metrics.WriteFailed(t.Tier.String(), reason, n)
				failed += n
			}
			failed = min(failed, len(put))
			w.failed.Add(uint64(failed))
			w.put.Add(uint64(len(put) - failed))
		}
		cancel()
	}
}

// close stops taking events, applies what is queued, and waits.
func (w *pinWriter) close() {
	w.once.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.jobs)
		<-w.done
	})
}

// PinStats counts the pin writer's work.
type PinStats struct {
	Pinned  uint64 // keys a Pinner store held and pinned (or refreshed, or unpinned)
	Put     uint64 // pinned blocks written to a Pinner store that lacked them
	Dropped uint64 // events dropped on a full queue
	Failed  uint64 // keys whose Pin or Put failed
}

func (w *pinWriter) stats() PinStats {
	return PinStats{Pinned: w.pinned.Load(), Put: w.put.Load(), Dropped: w.dropped.Load(), Failed: w.failed.Load()}
}

// knownPins collects the unexpired pins the Pinner stores hold now (the persistent ones'
// survive a restart), for engine.Config.KnownPins; a key pinned in several stores takes the
// latest expiry.
func knownPins(tiers []TierStore, now time.Time) []engine.KnownPin {
	byHash := map[prefix.Hash]engine.KnownPin{}
	for _, t := range tiers {
		p, ok := t.Store.(tier.Pinner)
		if !ok {
			continue
		}
		for _, pi := range p.Pins() {
			if !pi.Expires.After(now) || pi.TTL <= 0 {
				continue
			}
			if k, ok := byHash[pi.Key.Hash]; !ok || pi.Expires.After(k.Expires) {
				byHash[pi.Key.Hash] = engine.KnownPin{Hash: pi.Key.Hash, TTL: pi.TTL, Expires: pi.Expires}
			}
		}
	}
	out := make([]engine.KnownPin, 0, len(byHash))
	for _, k := range byHash {
		out = append(out, k)
	}
	return out
}
