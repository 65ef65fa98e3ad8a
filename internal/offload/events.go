package offload

import (
	"context"
	"sync"
	"time"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
)

// Tier events: what the lower tiers hold, published as kv-events (Config.Events), so that a
// router scores host, disk and remote blocks as it scores the device pool's.
//
//   - Stored: after a write's Put, for each item the tier then holds (a Put may decline an
//     item without an error, or fail some of a batch, so a local tier is asked with Contains;
//     a remote Put without an error stored all of it). Every write path goes through the
//     writer's Put (write-back, spills, write-through), so every one is announced.
//   - Removed: the stores evict inside their own Puts, Redis evicts and expires on its own,
//     and the cache admin deletes: none of them call back. The reconciler asks each tier,
//     with Contains, about the keys announced as stored: a local tier when its Stats show an
//     eviction or fewer items than announced (each ReconcileEvery), the remote tier every
//     RemoteReconcileEvery. What it no longer holds is announced Removed.
//   - At open, what a persistent tier (disk) already holds is announced Stored.
//
// The remote tier is shared: a replica announces what it wrote, and what it restored from
// there (adoption: the block is verified present, and from then on this replica's reconciler
// asks about it too); the router unions the replicas' remote announcements. Adoption is why a
// block outlives its writer in every view: a replica that restored it lists it in its
// snapshot, so a router started after the writer died still learns it, and its reconciler
// announces it Removed once Redis lets it go.

// ReconcileEvery is how often the local tiers' stats are checked for evictions and deletes,
// and RemoteReconcileEvery how often the remote tier is asked about every key this replica
// announced there.
const (
	ReconcileEvery       = 250 * time.Millisecond
	RemoteReconcileEvery = 10 * time.Second
)

// reconcileBatch is how many keys one Contains asks about, and remotePassKeys how many keys
// one pass over the remote tier asks about at most (64 calls): a pass takes those the map's
// random iteration order yields, so successive passes cover a large remote set in turn.
const (
	reconcileBatch = 1024
	remotePassKeys = 64 * reconcileBatch
)

type tierEvents struct {
	publish func(...kvevents.Event)
	tiers   []TierStore
	stop    chan struct{}
	done    chan struct{}
	mu      struct {
		sync.Mutex
		gen  uint64
		held []map[tier.Key]uint64 // per tiers[i]: announced keys → the gen of their last Stored
	}
	last    []tier.Stats // the reconciler's last look at each tier (its goroutine only)
	started bool
	// every and remoteEvery are ReconcileEvery and RemoteReconcileEvery (tests shorten them
	// before start).
	every, remoteEvery time.Duration
}

// newTierEvents returns nil when publish is nil: every method is a no-op on nil.
func newTierEvents(publish func(...kvevents.Event), tiers []TierStore) *tierEvents {
	if publish == nil {
		return nil
	}
	e := &tierEvents{publish: publish, tiers: tiers, stop: make(chan struct{}), done: make(chan struct{}),
		last: make([]tier.Stats, len(tiers)), every: ReconcileEvery, remoteEvery: RemoteReconcileEvery}
	e.mu.held = make([]map[tier.Key]uint64, len(tiers))
	for i := range e.mu.held {
		e.mu.held[i] = map[tier.Key]uint64{}
	}
	return e
}

func (e *tierEvents) index(t kvtier.Tier) int {
	for i := range e.tiers {
		if e.tiers[i].Tier == t {
			return i
		}
	}
	return -1
}

// start announces what the persistent tiers hold, then runs the reconciler until close.
func (e *tierEvents) start() {
	if e == nil {
		return
	}
	for i, tr := range e.tiers {
		if tr.Tier != kvtier.Disk {
			continue
		}
		if l, ok := tr.Store.(tier.Lister); ok {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			keys, err := l.Keys(ctx, tier.AllRoots)
			cancel()
			if err == nil {
				e.stored(i, keys)
			}
		}
		e.last[i] = tr.Store.Stats()
	}
	e.started = true
	go e.run()
}

func (e *tierEvents) close() {
	if e == nil || !e.started {
		return
	}
	close(e.stop)
	<-e.done
}

// put is the writer's hook after a Put of items to t (WriterConfig.OnPut).
func (e *tierEvents) put(t TierStore, items []tier.Item, err error) {
	if e == nil || len(items) == 0 {
		return
	}
	i := e.index(t.Tier)
	if i < 0 {
		return
	}
	keys := make([]tier.Key, len(items))
	for j := range items {
		keys[j] = items[j].Key
	}
	if err == nil && t.Tier == kvtier.Remote {
		e.stored(i, keys)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	has, cerr := t.Store.Contains(ctx, keys)
	if cerr != nil {
		return
	}
	held := keys[:0]
	for j, k := range keys {
		if j < len(has) && has[j] {
			held = append(held, k)
		}
	}
	e.stored(i, held)
}

func (e *tierEvents) stored(i int, keys []tier.Key) {
	if len(keys) == 0 {
		return
	}
	evs := make([]kvevents.Event, len(keys))
	e.mu.Lock()
	defer e.mu.Unlock()
	for j, k := range keys {
		e.mu.gen++
		e.mu.held[i][k] = e.mu.gen
		evs[j] = kvevents.Event{Kind: kvevents.Stored, Tier: e.tiers[i].Tier, Hash: k.Hash}
	}
	e.publish(evs...) // under mu: a Removed of the same key is ordered after or before it, never across
}

// adopt announces in the remote tier the blocks a fetch restored from it (verified there just
// now) that this replica did not announce yet, and holds them for the reconciler.
func (e *tierEvents) adopt(keys []tier.Key) {
	if e == nil {
		return
	}
	i := e.index(kvtier.Remote)
	if i < 0 {
		return
	}
	e.mu.Lock()
	fresh := make([]tier.Key, 0, len(keys))
	for _, k := range keys {
		if _, ok := e.mu.held[i][k]; !ok {
			fresh = append(fresh, k)
		}
	}
	e.mu.Unlock()
	e.stored(i, fresh)
}

func (e *tierEvents) run() {
	defer close(e.done)
	tk := time.NewTicker(e.every)
	defer tk.Stop()
	remoteEvery := max(1, int(e.remoteEvery/e.every))
	for n := 1; ; n++ {
		select {
		case <-e.stop:
			return
		case <-tk.C:
		}
		for i, tr := range e.tiers {
			if tr.Tier == kvtier.Remote {
				if n%remoteEvery == 0 {
					e.reconcile(i)
				}
				continue
			}
			st := tr.Store.Stats()
			e.mu.Lock()
			announced := int64(len(e.mu.held[i]))
			e.mu.Unlock()
			if st.Evictions != e.last[i].Evictions || st.Items < announced {
				e.reconcile(i)
			}
			e.last[i] = st
		}
	}
}

// reconcile asks tier i about every key announced there and announces Removed for those it
// no longer holds (unless stored again meanwhile).
func (e *tierEvents) reconcile(i int) {
	type seen struct {
		k   tier.Key
		gen uint64
	}
	e.mu.Lock()
	all := make([]seen, 0, min(len(e.mu.held[i]), remotePassKeys))
	for k, g := range e.mu.held[i] {
		if e.tiers[i].Tier == kvtier.Remote && len(all) == remotePassKeys {
			break
		}
		all = append(all, seen{k, g})
	}
	e.mu.Unlock()
	st := e.tiers[i].Store
	keys := make([]tier.Key, 0, reconcileBatch)
	for len(all) > 0 {
		part := all[:min(len(all), reconcileBatch)]
		all = all[len(part):]
		keys = keys[:0]
		for _, s := range part {
			keys = append(keys, s.k)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		has, err := st.Contains(ctx, keys)
		cancel()
		if err != nil {
			return // the tier is down: keep what was announced, ask again later
		}
		var evs []kvevents.Event
		e.mu.Lock()
		for j, s := range part {
			if j < len(has) && has[j] {
				continue
			}
			if g, ok := e.mu.held[i][s.k]; ok && g == s.gen {
				delete(e.mu.held[i], s.k)
				evs = append(evs, kvevents.Event{Kind: kvevents.Removed, Tier: e.tiers[i].Tier, Hash: s.k.Hash})
			}
		}
		if len(evs) > 0 {
			e.publish(evs...)
		}
		e.mu.Unlock()
	}
}

// Costs returns the cost model's current figures for the configured tiers, for the
// kv-events publisher (kvevents.Publisher.SetCosts). Safe for concurrent use.
func (t *Tiers) Costs() kvevents.Costs {
	c := kvevents.Costs{BlockSize: t.cfg.Layout.BlockSize, BlockBytes: t.cfg.Layout.BlockBytes()}
	t.fetcher.mu.Lock()
	c.PrefillTokensPerSecond = t.fetcher.mu.cost.PrefillRate()
	for _, tr := range t.tiers {
		c.ReadBandwidth[tr.Tier] = t.fetcher.mu.cost.ReadBandwidth(tr.Tier)
	}
	t.fetcher.mu.Unlock()
	return c
}
