package offload

import (
	"context"
	"sync"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// fakePinner is a tier.Pinner over memstore for these tests: the real stores' Pinner
// (hostmem, disk, redis) lands on another branch, and is tested there against the tiertest
// suite; here only the calls the pin writer makes matter.
type fakePinner struct {
	*memstore.Store
	mu   sync.Mutex
	pins map[tier.Key]tier.PinInfo
	puts []tier.Item // the pinned Puts, in order
	now  time.Time
}

func newFakePinner() *fakePinner {
	return &fakePinner{Store: memstore.New(), pins: map[tier.Key]tier.PinInfo{}, now: time.Unix(1_000_000, 0)}
}

func (f *fakePinner) Put(ctx context.Context, items []tier.Item) error {
	f.mu.Lock()
	for _, it := range items {
		if it.PinTTL > 0 {
			f.pins[it.Key] = tier.PinInfo{Key: it.Key, TTL: it.PinTTL, Expires: f.now.Add(it.PinTTL)}
			f.puts = append(f.puts, it)
		}
	}
	f.mu.Unlock()
	return f.Store.Put(ctx, items)
}

func (f *fakePinner) Pin(ctx context.Context, keys []tier.Key, ttl time.Duration) ([]bool, error) {
	held, err := f.Contains(ctx, keys)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, k := range keys {
		switch {
		case !held[i]:
		case ttl <= 0:
			delete(f.pins, k)
		default:
			f.pins[k] = tier.PinInfo{Key: k, TTL: ttl, Expires: f.now.Add(ttl)}
		}
	}
	return held, nil
}

func (f *fakePinner) Pins() []tier.PinInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []tier.PinInfo
	for _, p := range f.pins {
		out = append(out, p)
	}
	return out
}

func (f *fakePinner) pinned(k tier.Key) (tier.PinInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pins[k]
	return p, ok
}

// plainStore is a tier.Store and nothing more (no Pinner, whatever the store under it is).
type plainStore struct{ tier.Store }

func pinEvents(kind engine.PinEventKind, recs []*tier.Record, ttl time.Duration) ([]engine.PinEvent, [][]byte) {
	evs := make([]engine.PinEvent, len(recs))
	kv := make([][]byte, len(recs))
	for i, r := range recs {
		evs[i] = engine.PinEvent{Kind: kind, Root: r.Root, Hash: r.Hash, Parent: r.Parent, Depth: i, Tokens: r.Tokens, TTL: ttl,
			Expires: time.Now().Add(ttl)}
		if kind == engine.PinCreated {
			kv[i] = r.KV
		}
	}
	return evs, kv
}

// TestPinWriter: a new pin pins the keys a Pinner store holds and writes it the others,
// pinned; a refresh pins again; an unpin unpins; a store that is no Pinner sees nothing.
func TestPinWriter(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 3, 40)
	host, plain := newFakePinner(), plainStore{memstore.New()}
	if err := host.Store.Put(ctx, tiertest.Items(recs[:1])); err != nil { // the host already holds block 0
		t.Fatal(err)
	}
	w := newPinWriter(identity, layout, []TierStore{{kvtier.Host, host}, {kvtier.Disk, plain}}, nil, time.Second)
	w.events(pinEvents(engine.PinCreated, recs, time.Hour))
	w.close()
	for i, r := range recs {
		p, ok := host.pinned(r.Key())
		if !ok || p.TTL != time.Hour {
			t.Errorf("block %d: pin %+v %v, want pinned for 1h", i, p, ok)
		}
	}
	if len(host.puts) != 2 || host.puts[0].Key != recs[1].Key() || host.puts[0].Shadowed {
		t.Errorf("pinned puts %+v, want blocks 1 and 2 (block 0 was held), unshadowed", host.puts)
	}
	vals, _ := host.Get(ctx, tiertest.Keys(recs))
	for i, v := range vals {
		if _, err := tier.DecodeVerify(v, tier.Want{Identity: identity, Root: recs[i].Root, Hash: recs[i].Hash, Parent: recs[i].Parent, Tokens: recs[i].Tokens, Layout: layout}); err != nil {
			t.Errorf("block %d as stored: %v", i, err)
		}
	}
	if st := plain.Stats(); st.Items != 0 {
		t.Errorf("a store that is no Pinner got %d items", st.Items)
	}
	if st := w.stats(); st.Pinned != 1 || st.Put != 2 || st.Dropped != 0 || st.Failed != 0 {
		t.Errorf("stats %+v", st)
	}
	if w.pinTTL(recs[2].Hash, time.Now()) != time.Hour || w.pinTTL(recs[2].Hash, time.Now().Add(2*time.Hour)) != 0 {
		t.Errorf("the pool's pin of block 2 is not known for its TTL")
	}

	// Refresh, then unpin the tail.
	w = newPinWriter(identity, layout, []TierStore{{kvtier.Host, host}}, nil, time.Second)
	host.now = host.now.Add(30 * time.Minute)
	w.events(pinEvents(engine.PinRefreshed, recs, time.Hour))
	w.events(pinEvents(engine.PinRemoved, recs[2:], time.Hour))
	w.close()
	if p, _ := host.pinned(recs[0].Key()); !p.Expires.Equal(host.now.Add(time.Hour)) {
		t.Errorf("refreshed pin expires %v, want %v", p.Expires, host.now.Add(time.Hour))
	}
	if _, ok := host.pinned(recs[2].Key()); ok {
		t.Errorf("block 2 still pinned after PinRemoved")
	}
	if w.pinTTL(recs[2].Hash, time.Now()) != 0 || w.pinTTL(recs[1].Hash, time.Now()) != time.Hour {
		t.Errorf("pool pins after the unpin: wrong")
	}
}

// TestKnownPins: the unexpired pins of every Pinner store, the latest expiry per block.
func TestKnownPins(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 3, 41)
	a, b := newFakePinner(), newFakePinner()
	now := time.Unix(2_000_000, 0)
	a.pins[recs[0].Key()] = tier.PinInfo{Key: recs[0].Key(), TTL: time.Hour, Expires: now.Add(time.Minute)}
	b.pins[recs[0].Key()] = tier.PinInfo{Key: recs[0].Key(), TTL: time.Hour, Expires: now.Add(time.Hour)}
	a.pins[recs[1].Key()] = tier.PinInfo{Key: recs[1].Key(), TTL: time.Hour, Expires: now.Add(-time.Second)} // expired
	got := knownPins([]TierStore{{kvtier.Host, a}, {kvtier.Disk, b}, {kvtier.Remote, memstore.New()}}, now)
	if len(got) != 1 || got[0].Hash != recs[0].Hash || !got[0].Expires.Equal(now.Add(time.Hour)) || got[0].TTL != time.Hour {
		t.Errorf("known pins %+v, want block 0 until now+1h", got)
	}
}

// TestFlushWritesPinned: at shutdown a block pinned in the pool is written pinned, never
// shadowed; an unpinned one as before.
func TestFlushWritesPinned(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 2, 42)
	host, d := newFakePinner(), newFakePinner()
	w, err := NewWriter(WriterConfig{Identity: identity, Layout: layout}, []TierStore{{kvtier.Host, host}, {kvtier.Disk, d}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := evicted(recs[0], 0, 0)
	e.PinTTL = time.Hour
	w.EnqueueWait(e, recs[0].KV)
	w.EnqueueWait(evicted(recs[1], 0, 0), recs[1].KV)
	w.Close()
	for _, s := range []*fakePinner{host, d} {
		if p, ok := s.pinned(recs[0].Key()); !ok || p.TTL != time.Hour {
			t.Errorf("pinned block written as %+v %v", p, ok)
		}
		if _, ok := s.pinned(recs[1].Key()); ok {
			t.Errorf("unpinned block written pinned")
		}
	}
}
