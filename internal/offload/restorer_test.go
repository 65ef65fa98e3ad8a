package offload

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// prefetchArgs are a Prefetch's arguments for recs, a whole prompt from block 0.
func prefetchArgs(recs []*tier.Record) (hashes []prefix.Hash, tokens []int32) {
	for _, r := range recs {
		hashes = append(hashes, r.Hash)
		tokens = append(tokens, r.Tokens...)
	}
	return hashes, tokens
}

// prefetch calls Prefetch and returns a channel with its one result.
func prefetch(ts *Tiers, recs []*tier.Record) <-chan engine.Prefetched {
	ch := make(chan engine.Prefetched, 2) // room for a wrong second call, caught by the caller
	hs, toks := prefetchArgs(recs)
	ts.Prefetch(root, hs, toks, 0, func(p engine.Prefetched) { ch <- p })
	return ch
}

// evictedEvents are the engine's block events for recs leaving the pool, and their K/V.
func evictedEvents(recs []*tier.Record) ([]prefix.Event, [][]byte) {
	var evs []prefix.Event
	var kv [][]byte
	for i, r := range recs {
		evs = append(evs, prefix.Event{Kind: prefix.Evicted, Root: r.Root, Hash: r.Hash, Parent: r.Parent,
			Depth: int32(i), Block: prefix.BlockID(i), Tokens: r.Tokens})
		kv = append(kv, r.KV)
	}
	return evs, kv
}

// Open wires a host tier; the engine hook writes evicted blocks down and the restorer brings
// them back, verified, from the host tier.
func TestTiersWriteBackThenRestore(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HostBytes, cfg.Identity, cfg.Layout = 1<<20, identity, layout
	ts, err := Open(cfg, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	var published int
	ecfg := engine.DefaultConfig()
	ts.Hook(&ecfg)
	if ecfg.Restorer == nil || ecfg.Hooks != engine.Hooks(ts) {
		t.Fatalf("Hook left the engine unwired: %+v", ecfg)
	}
	// A hook above the tiers (serve's event publisher) sees every event and calls them on.
	hooks := countingHooks{Hooks: ecfg.Hooks, n: &published}
	recs := tiertest.Chain(identity, root, layout, 3, 31)
	evs, kv := evictedEvents(recs)
	stored := prefix.Event{Kind: prefix.Stored, Hash: recs[0].Hash}
	hooks.BlockEvents(append(evs, stored), append(kv, nil), nil)
	if published != 4 {
		t.Errorf("the hook above the tiers saw %d events, want 4", published)
	}
	ts.writer.Close() // the write-backs are in the store
	if st := ts.writer.Stats(); st.Enqueued != 3 || st.Written[0] != 3 {
		t.Fatalf("writer stats %+v, want 3 evicted blocks written (the Stored event is not)", st)
	}
	p := <-prefetch(ts, recs)
	if p.First != 0 || len(p.Blocks) != 3 {
		t.Fatalf("restored %d blocks from %d, want 3 from 0", len(p.Blocks), p.First)
	}
	for i, b := range p.Blocks {
		if b.Tier != kvtier.Host || !slices.Equal(b.Data, recs[i].KV) {
			t.Fatalf("block %d: tier %v, data equal %v", i, b.Tier, slices.Equal(b.Data, recs[i].KV))
		}
	}
	if got := ts.Stats(); len(got) != 1 || got[0].Tier != kvtier.Host || got[0].UsedBytes == 0 {
		t.Errorf("Stats = %+v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	if DefaultConfig().Enabled() {
		t.Error("the default config turns a tier on")
	}
	if _, err := Open(DefaultConfig(), prometheus.NewRegistry()); err == nil {
		t.Error("Open with no tier: no error")
	}
	cfg := DefaultConfig()
	cfg.HostBytes, cfg.Identity, cfg.Layout, cfg.Fetchers = 1<<20, identity, layout, -1
	if _, err := Open(cfg, prometheus.NewRegistry()); err == nil {
		t.Error("Open with -1 fetchers: no error")
	}
}

// newTestTiers is a Tiers over stores, restore only (no writer).
func newTestTiers(t *testing.T, stores []TierStore, mod func(*Config)) *Tiers {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Identity, cfg.Layout = identity, layout
	mod(&cfg)
	ts := &Tiers{cfg: cfg, tiers: stores, fetcher: newFetcher(t, stores, nil, nil)}
	ts.restorer = newRestorer(ts.fetcher, cfg)
	t.Cleanup(ts.Close)
	return ts
}

// waitFor waits until cond holds (a condition, not a duration, is what the test asserts).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// One fetcher and a queue of one: a third prefetch while both are taken is answered at
// once, empty, instead of starting a goroutine; the other two complete when the store does.
func TestRestorerBounded(t *testing.T) {
	gate := make(chan struct{})
	st := &blockingStore{Store: memstore.New(), getGate: gate}
	recs := tiertest.Chain(identity, root, layout, 2, 32)
	st.Store.Put(ctx, tiertest.Items(recs))
	ts := newTestTiers(t, []TierStore{{kvtier.Host, st}}, func(c *Config) { c.Fetchers, c.FetchQueue = 1, 1 })
	first := prefetch(ts, recs)
	waitFor(t, "the fetcher reads", func() bool { return st.gets.Load() > 0 })
	second := prefetch(ts, recs)
	select {
	case p := <-prefetch(ts, recs):
		if len(p.Blocks) != 0 {
			t.Fatalf("an overflowing prefetch restored %d blocks", len(p.Blocks))
		}
	default:
		t.Fatal("an overflowing prefetch was not answered at once")
	}
	close(gate)
	for i, ch := range []<-chan engine.Prefetched{first, second} {
		if p := <-ch; len(p.Blocks) != 2 {
			t.Fatalf("prefetch %d restored %d blocks, want 2", i, len(p.Blocks))
		}
	}
}

// hangingStore answers Contains but never a Get, until the context ends.
type hangingStore struct{ tier.Store }

func (h hangingStore) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A fetch that outlives FetchTimeout is abandoned, and the request computes instead.
func TestRestorerTimeout(t *testing.T) {
	st := hangingStore{memstore.New()}
	recs := tiertest.Chain(identity, root, layout, 2, 33)
	st.Store.Put(ctx, tiertest.Items(recs))
	ts := newTestTiers(t, []TierStore{{kvtier.Host, st}}, func(c *Config) { c.FetchTimeout = time.Millisecond })
	if p := <-prefetch(ts, recs); len(p.Blocks) != 0 {
		t.Fatalf("a timed-out fetch restored %d blocks", len(p.Blocks))
	}
}

// Close cancels the fetch in flight and answers the queued ones, each exactly once; a
// Prefetch after Close is answered at once.
func TestRestorerClose(t *testing.T) {
	st := hangingStore{memstore.New()}
	recs := tiertest.Chain(identity, root, layout, 2, 34)
	st.Store.Put(ctx, tiertest.Items(recs))
	ts := newTestTiers(t, []TierStore{{kvtier.Host, st}}, func(c *Config) { c.Fetchers, c.FetchTimeout = 1, time.Hour })
	var chans []<-chan engine.Prefetched
	for range 3 {
		chans = append(chans, prefetch(ts, recs))
	}
	ts.Close()
	chans = append(chans, prefetch(ts, recs))
	for i, ch := range chans {
		select {
		case p := <-ch:
			if len(p.Blocks) != 0 {
				t.Errorf("prefetch %d restored %d blocks", i, len(p.Blocks))
			}
		default:
			t.Fatalf("prefetch %d not answered by Close", i)
		}
		if len(ch) != 0 {
			t.Errorf("prefetch %d answered twice", i)
		}
	}
}

// prefetched keeps the usable leading blocks and counts the rest by reason.
func TestPrefetched(t *testing.T) {
	rec := &tier.Record{KV: []byte{1}}
	res := Result{Usable: 1, Blocks: []Restored{
		{Found: true, Tier: kvtier.Disk, Record: rec},
		{Found: true, Tier: kvtier.Disk, Reason: tier.ReasonChecksum},
		{Found: true, Tier: kvtier.Remote, Reason: tier.ReasonChecksum},
		{Found: true, Tier: kvtier.Remote, Reason: tier.ReasonSlowerThanRecompute},
	}}
	p := prefetched(3, res, false, 0)
	if p.First != 3 || len(p.Blocks) != 1 || p.Blocks[0].Tier != kvtier.Disk || p.Blocks[0].Data[0] != 1 || p.Blocks[0].State != nil {
		t.Errorf("blocks %+v from %d", p.Blocks, p.First)
	}
	if p.Discarded[tier.ReasonChecksum] != 2 || p.Discarded[tier.ReasonSlowerThanRecompute] != 1 || len(p.Discarded) != 2 {
		t.Errorf("discarded %v", p.Discarded)
	}
	// A hybrid's checkpoint goes with its block, only when complete and of the right size.
	for _, tc := range []struct {
		aux      [][]byte
		complete bool
		want     bool
	}{{[][]byte{{7, 7, 7}}, true, true}, {[][]byte{{7, 7}}, true, false}, {[][]byte{{7, 7, 7}}, false, false}, {nil, true, false}} {
		rec := &tier.Record{KV: []byte{1}, Aux: tc.aux, StateComplete: tc.complete}
		p := prefetched(0, Result{Usable: 1, Blocks: []Restored{{Found: true, Tier: kvtier.Disk, Record: rec}}}, false, 3)
		if got := p.Blocks[0].State != nil; got != tc.want {
			t.Errorf("aux %v complete %v: state passed %v, want %v", tc.aux, tc.complete, got, tc.want)
		}
	}
}

// After a damaged block the engine is handed each discard under its first cause: the torn
// block as checksum, the foreign one as identity, and the sound blocks after the break as
// after_break, never under the break's reason.
func TestRestorerDiscardsPerBlock(t *testing.T) {
	host := memstore.New()
	recs := tiertest.Chain(identity, root, layout, 6, 33)
	items := tiertest.Items(recs)
	items[2].Value[200] ^= 1 // torn block 2
	foreign := *recs[4]
	foreign.Identity = [32]byte{0x22}
	items[4].Value = tiertest.Encode(&foreign) // another model's record under block 4's key
	host.Put(ctx, items)
	ts := newTestTiers(t, []TierStore{{kvtier.Host, host}}, func(*Config) {})
	p := <-prefetch(ts, recs)
	if len(p.Blocks) != 2 {
		t.Fatalf("restored %d blocks, want 2 (the chain breaks at block 2)", len(p.Blocks))
	}
	want := map[string]int{tier.ReasonChecksum: 1, tier.ReasonIdentity: 1, ReasonAfterBreak: 2}
	if fmt.Sprint(p.Discarded) != fmt.Sprint(want) {
		t.Fatalf("discarded %v, want %v", p.Discarded, want)
	}
}

// countingHooks counts the block events it passes on, as serve's publisher does.
type countingHooks struct {
	engine.Hooks
	n *int
}

func (h countingHooks) BlockEvents(evs []prefix.Event, kv, state [][]byte) {
	*h.n += len(evs)
	h.Hooks.BlockEvents(evs, kv, state)
}

// progressLog records a fetch's Progress.
type progressLog struct {
	mu                 sync.Mutex
	plans              int
	blocks, arrived    int
	restore, recompute time.Duration
}

func (p *progressLog) Plan(blocks int, restore, recompute time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plans++
	p.blocks, p.restore, p.recompute = blocks, restore, recompute
}

func (p *progressLog) Arrive(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.arrived += n
}

// TestFetchProgress: a fetch tells its Progress the cost model's plan once, with its
// estimates, then every planned block as it arrives (the engine's PrefetchCost reads them).
func TestFetchProgress(t *testing.T) {
	host, disk := memstore.New(), memstore.New()
	recs := tiertest.Chain(identity, root, layout, 6, 7)
	for i, r := range recs {
		s := host
		if i >= 2 {
			s = disk
		}
		if err := s.Put(ctx, []tier.Item{{Key: r.Key(), Value: tiertest.Encode(r)}}); err != nil {
			t.Fatal(err)
		}
	}
	f := newFetcher(t, []TierStore{{kvtier.Host, host}, {kvtier.Disk, disk}}, nil, nil)
	var log progressLog
	req := request(recs)
	req.Progress = &log
	res := fetch(t, f, req)
	if res.Usable != 6 || log.plans != 1 || log.blocks != 6 || log.arrived != 6 {
		t.Fatalf("usable %d; progress %+v: want one plan of 6 blocks, 6 arrived", res.Usable, &log)
	}
	if log.restore <= 0 || log.recompute <= log.restore {
		t.Errorf("estimates: restore %v, recompute %v: want 0 < restore < recompute (the plan restores only what pays)", log.restore, log.recompute)
	}
	var none progressLog
	miss := request(tiertest.Chain(identity, root, layout, 2, 99))
	miss.Progress = &none
	fetch(t, f, miss)
	if none.plans != 1 || none.blocks != 0 || none.arrived != 0 {
		t.Errorf("nothing found: progress %+v, want one plan of nothing", &none)
	}
}
