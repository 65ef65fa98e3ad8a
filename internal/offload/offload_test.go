package offload

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/hostmem"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

var (
	identity = [32]byte{0x11}
	root     = prefix.Root(identity[:], "")
	layout   = tiertest.SmallLayout
	ctx      = context.Background()
)

func evicted(r *tier.Record, hits, prefixTokens int) Evicted {
	return Evicted{Root: r.Root, Hash: r.Hash, Parent: r.Parent, Tokens: r.Tokens, Hits: hits, PrefixTokens: prefixTokens}
}

// blockingStore blocks every Put until released, and counts Gets.
type blockingStore struct {
	tier.Store
	release chan struct{}
	puts    atomic.Int64 // Puts entered (counted before waiting on release)
	gets    atomic.Int64
	getGate chan struct{} // if non-nil, Get waits on it
}

func (b *blockingStore) Put(ctx context.Context, items []tier.Item) error {
	b.puts.Add(1)
	if b.release != nil {
		<-b.release
	}
	return b.Store.Put(ctx, items)
}

func (b *blockingStore) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	b.gets.Add(int64(len(keys)))
	if b.getGate != nil {
		<-b.getGate
	}
	return b.Store.Get(ctx, keys)
}

func TestWriterWritesAllTiersAndAdmits(t *testing.T) {
	host, disk := memstore.New(), memstore.New()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(WriterConfig{Identity: identity, Layout: layout, Admission: Admission{MinHits: 1, MinPrefixTokens: 8}},
		[]TierStore{{kvtier.Host, host}, {kvtier.Disk, disk}}, m)
	if err != nil {
		t.Fatal(err)
	}
	recs := tiertest.Chain(identity, root, layout, 4, 1)
	kv := append([]byte(nil), recs[0].KV...)
	if w.Enqueue(evicted(recs[0], 0, 4), kv) {
		t.Fatal("a never-reused, short block was admitted")
	}
	if w.Enqueue(evicted(recs[1], 1, 4), recs[1].KV) {
		t.Fatal("a block of a 4-token prefix passed MinPrefixTokens 8")
	}
	if !w.Enqueue(evicted(recs[1], 1, 8), recs[1].KV) {
		t.Fatal("an admissible block was refused")
	}
	// The arena block is reused right after Enqueue: the queued copy must not change.
	want := tiertest.Encode(recs[1])
	for i := range recs[1].KV {
		recs[1].KV[i] = 0
	}
	w.Close()
	for _, s := range []tier.Store{host, disk} {
		v, _ := s.Get(ctx, []tier.Key{recs[1].Key()})
		if string(v[0]) != string(want) {
			t.Fatal("written record differs from the block at Enqueue time")
		}
	}
	st := w.Stats()
	if st.Enqueued != 1 || st.NotAdmitted != 2 || st.Written[0] != 1 || st.Written[1] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if w.Enqueue(evicted(recs[2], 5, 100), recs[2].KV) {
		t.Fatal("Enqueue after Close queued")
	}
}

func TestWriterDropsWhenFull(t *testing.T) {
	slow := &blockingStore{Store: memstore.New(), release: make(chan struct{})}
	fast := memstore.New()
	reg := prometheus.NewRegistry()
	m, _ := NewMetrics(reg)
	w, _ := NewWriter(WriterConfig{Identity: identity, Layout: layout, QueueLen: 2, MaxBatch: 1, Remote: WriteBack},
		[]TierStore{{kvtier.Host, fast}, {kvtier.Remote, slow}}, m)
	recs := tiertest.Chain(identity, root, layout, 10, 2)
	done := make(chan struct{})
	go func() {
		for i, r := range recs {
			w.Enqueue(evicted(r, 0, 0), r.KV)
			if i == 0 {
				// The slow tier's worker takes the first block and is stuck with it.
				for slow.puts.Load() == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			// Let the fast tier's worker keep up.
			for w.Stats().Written[0] < w.Stats().Enqueued-w.Stats().Dropped[0] {
				time.Sleep(time.Millisecond)
			}
		}
		close(done)
	}()
	select {
	case <-done: // Enqueue never blocked on the stuck tier
	case <-time.After(3 * time.Minute): // a watchdog
		t.Fatal("Enqueue blocked behind a stuck tier")
	}
	close(slow.release)
	w.Close()
	st := w.Stats()
	// The stuck worker holds 1 batch, its queue 2: 7 of 10 dropped.
	if st.Dropped[1] != 7 || st.Written[1] != 3 {
		t.Fatalf("remote: dropped %d, written %d; want 7, 3", st.Dropped[1], st.Written[1])
	}
	if st.Dropped[0] != 0 || st.Written[0] != 10 {
		t.Fatalf("host: dropped %d, written %d; want 0, 10 (a slow tier must not cost the fast one)", st.Dropped[0], st.Written[0])
	}
	if got := counterValue(m.dropped.WithLabelValues("remote")); got != 7 {
		t.Fatalf("dropped metric %v, want 7", got)
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func request(recs []*tier.Record) Request {
	req := Request{Root: root, Parent: recs[0].Parent}
	for _, r := range recs {
		req.Hashes = append(req.Hashes, r.Hash)
		req.Tokens = append(req.Tokens, r.Tokens...)
	}
	return req
}

func newFetcher(t *testing.T, tiers []TierStore, m *Metrics, mod func(*FetcherConfig)) *Fetcher {
	t.Helper()
	cfg := FetcherConfig{Identity: identity, Layout: layout,
		Cost: CostConfig{PrefillTokensPerSecond: 10, Overhead: map[kvtier.Tier]time.Duration{kvtier.Host: 0, kvtier.Disk: 0, kvtier.Remote: 0}}}
	if mod != nil {
		mod(&cfg)
	}
	f, err := NewFetcher(cfg, tiers, m)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func fetch(t *testing.T, f *Fetcher, req Request) Result {
	t.Helper()
	res, err := f.Fetch(ctx, req).Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Blocks 0-1 on host, 2-3 on disk, 5 on remote (4 nowhere): the longest
// prefix is 4 blocks, read from two tiers and verified.
func TestFetchLongestPrefixAcrossTiers(t *testing.T) {
	host, disk, remote := memstore.New(), memstore.New(), memstore.New()
	recs := tiertest.Chain(identity, root, layout, 6, 3)
	items := tiertest.Items(recs)
	host.Put(ctx, items[0:2])
	disk.Put(ctx, items[1:4])
	remote.Put(ctx, items[5:6])
	f := newFetcher(t, []TierStore{{kvtier.Host, host}, {kvtier.Disk, disk}, {kvtier.Remote, remote}}, nil, nil)
	res := fetch(t, f, request(recs))
	if res.Usable != 4 || len(res.Blocks) != 4 {
		t.Fatalf("usable %d of %d blocks, want 4 of 4", res.Usable, len(res.Blocks))
	}
	for i, want := range []kvtier.Tier{kvtier.Host, kvtier.Host, kvtier.Disk, kvtier.Disk} {
		b := res.Blocks[i]
		if !b.Found || b.Tier != want || b.Record == nil || b.Record.Hash != recs[i].Hash || string(b.Record.KV) != string(recs[i].KV) {
			t.Fatalf("block %d: %+v, want a verified record from %s", i, b, want)
		}
	}
}

// Corruption and identity: a flipped byte and a foreign record are never
// used; the prefix stops there and the reasons are counted.
func TestFetchDiscards(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := NewMetrics(reg)
	host := memstore.New()
	recs := tiertest.Chain(identity, root, layout, 4, 4)
	items := tiertest.Items(recs)
	items[1].Value[200] ^= 1 // torn block 1
	host.Put(ctx, items)
	f := newFetcher(t, []TierStore{{kvtier.Host, host}}, m, nil)
	res := fetch(t, f, request(recs))
	if res.Usable != 1 {
		t.Fatalf("usable %d, want 1 (block 1 is corrupt)", res.Usable)
	}
	if r := res.Blocks[1].Reason; r != tier.ReasonChecksum {
		t.Fatalf("block 1 reason %q, want checksum", r)
	}
	// The bad block under its cause; the 2 sound ones after it under after_break.
	if got, after := counterValue(m.discarded.WithLabelValues("checksum")), counterValue(m.discarded.WithLabelValues(ReasonAfterBreak)); got != 1 || after != 2 {
		t.Fatalf("checksum discards %v, after_break %v; want 1 (the bad block) and 2 (the sound ones after it)", got, after)
	}

	// Another model's record stored under this key.
	other := [32]byte{0x22}
	foreign := *recs[0]
	foreign.Identity = other
	host.Put(ctx, []tier.Item{{Key: recs[0].Key(), Value: tiertest.Encode(&foreign)}})
	res = fetch(t, f, request(recs))
	// Block 1 is still torn: each block under its own first cause, the sound ones after_break.
	if res.Usable != 0 || res.Blocks[0].Reason != tier.ReasonIdentity || res.Blocks[1].Reason != tier.ReasonChecksum || res.Blocks[2].Reason != ReasonAfterBreak {
		t.Fatalf("foreign record: usable %d, reasons %q %q %q; want 0, identity, checksum, after_break", res.Usable, res.Blocks[0].Reason, res.Blocks[1].Reason, res.Blocks[2].Reason)
	}
	if got := counterValue(m.discarded.WithLabelValues(tier.ReasonIdentity)); got != 1 {
		t.Fatalf("identity discards %v, want 1 (the foreign block alone)", got)
	}
	// Wrong tokens asked for: identity.
	host.Put(ctx, tiertest.Items(recs[:1]))
	req := request(recs[:1])
	req.Tokens[0]++
	if res = fetch(t, f, req); res.Usable != 0 || res.Blocks[0].Reason != tier.ReasonIdentity {
		t.Fatalf("wrong tokens: usable %d, reason %q", res.Usable, res.Blocks[0].Reason)
	}
}

func TestFetchIncompleteState(t *testing.T) {
	host := memstore.New()
	recs := tiertest.Chain(identity, root, layout, 4, 5)
	for i, r := range recs {
		r.Aux = make([][]byte, layout.Layers)
		r.StateComplete = i == 1 // only block 1 carries a full snapshot
	}
	host.Put(ctx, tiertest.Items(recs))
	reg := prometheus.NewRegistry()
	m, _ := NewMetrics(reg)
	f := newFetcher(t, []TierStore{{kvtier.Host, host}}, m, func(c *FetcherConfig) { c.NeedState = true })
	res := fetch(t, f, request(recs))
	if res.Usable != 2 {
		t.Fatalf("usable %d, want 2 (last complete state at block 1)", res.Usable)
	}
	if res.Blocks[2].Reason != tier.ReasonIncompleteState || res.Blocks[3].Record != nil {
		t.Fatalf("blocks past the state: %+v", res.Blocks[2:])
	}
	if got := counterValue(m.discarded.WithLabelValues("incomplete_state")); got != 2 {
		t.Fatalf("incomplete_state discards %v, want 2", got)
	}
}

func TestFetchSlowerThanRecompute(t *testing.T) {
	host, remote := memstore.New(), memstore.New()
	recs := tiertest.Chain(identity, root, layout, 4, 6)
	items := tiertest.Items(recs)
	host.Put(ctx, items[:2])
	remote.Put(ctx, items[2:])
	f := newFetcher(t, []TierStore{{kvtier.Host, host}, {kvtier.Remote, remote}}, nil, func(c *FetcherConfig) {
		c.Cost = CostConfig{PrefillTokensPerSecond: 1e6, ReadBandwidth: map[kvtier.Tier]float64{kvtier.Host: 1e12, kvtier.Remote: 1e3},
			Overhead: map[kvtier.Tier]time.Duration{kvtier.Host: 0, kvtier.Remote: 0}}
	})
	res := fetch(t, f, request(recs))
	if res.Usable != 2 || res.Blocks[2].Reason != tier.ReasonSlowerThanRecompute || res.Blocks[3].Reason != tier.ReasonSlowerThanRecompute {
		t.Fatalf("usable %d, blocks %+v; want 2 restored and the remote ones slower_than_recompute", res.Usable, res.Blocks)
	}
}

// Concurrent fetches of one prefix read each block once.
func TestFetchSingleflight(t *testing.T) {
	gate := make(chan struct{})
	st := &blockingStore{Store: memstore.New(), getGate: gate}
	recs := tiertest.Chain(identity, root, layout, 3, 7)
	st.Store.Put(ctx, tiertest.Items(recs))
	f := newFetcher(t, []TierStore{{kvtier.Host, st}}, nil, nil)
	var futures []*Future
	for range 8 {
		futures = append(futures, f.Fetch(ctx, request(recs)))
	}
	// Wait until every fetch has either led or joined the one read (the read is held at the
	// gate): 3 blocks in flight, each with 7 followers.
	waitFor(t, "7 followers on each of the 3 reads", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		waiters := 0
		for _, c := range f.mu.flight {
			waiters += c.waiters
		}
		return len(f.mu.flight) == 3 && waiters == 7*3
	})
	close(gate)
	for _, fu := range futures {
		res, err := fu.Wait(ctx)
		if err != nil || res.Usable != 3 {
			t.Fatalf("usable %d, %v", res.Usable, err)
		}
	}
	if got := st.gets.Load(); got != 3 {
		t.Fatalf("%d block reads for 8 fetches of 3 blocks, want 3", got)
	}
}

func TestFetchWaitTimeoutAndTierDown(t *testing.T) {
	gate := make(chan struct{})
	st := &blockingStore{Store: memstore.New(), getGate: gate}
	recs := tiertest.Chain(identity, root, layout, 2, 8)
	st.Store.Put(ctx, tiertest.Items(recs))
	f := newFetcher(t, []TierStore{{kvtier.Host, st}}, nil, nil)
	fu := f.Fetch(ctx, request(recs))
	wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := fu.Wait(wctx); err == nil {
		t.Fatal("Wait did not give up")
	}
	close(gate) // the fetch goes on; a later Wait gets it
	if res, err := fu.Wait(ctx); err != nil || res.Usable != 2 {
		t.Fatalf("later Wait: %d, %v", res.Usable, err)
	}
}

func TestTierStatsAndMetricsNames(t *testing.T) {
	h, _ := hostmem.New(hostmem.Config{CapacityBytes: 1 << 20})
	h.Put(ctx, tiertest.Items(tiertest.Chain(identity, root, layout, 2, 9)))
	st := TierStats([]TierStore{{kvtier.Host, h}})
	if len(st) != 1 || st[0].Tier != kvtier.Host || st[0].UsedBytes == 0 || st[0].CapacityBytes != 1<<20 {
		t.Fatalf("TierStats = %+v", st)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ObserveRead("host", time.Millisecond)
	m.ObserveWrite("disk", time.Millisecond)
	m.Dropped("remote")
	m.WriteFailed("disk", FailNoSpace, 1)
	m.RestoreStall(time.Second)
	fams, _ := reg.Gather()
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	for _, n := range []string{"stockpot_kv_offload_read_seconds", "stockpot_kv_offload_write_seconds", "stockpot_kv_blocks_discarded_total",
		"stockpot_kv_offload_dropped_writes_total", "stockpot_kv_tier_write_failures_total", "stockpot_kv_restore_stall_seconds_total"} {
		if !names[n] {
			t.Errorf("metric %s not registered", n)
		}
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Error("registering twice succeeded")
	}
	var nilMetrics *Metrics
	nilMetrics.Discarded("checksum", 1) // no panic
	_ = sync.Mutex{}
}

// flakyGetStore fails the first fails Gets, then reads its store.
type flakyGetStore struct {
	tier.Store
	fails atomic.Int64
	gets  atomic.Int64
}

func (f *flakyGetStore) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	f.gets.Add(1)
	if f.fails.Add(-1) >= 0 {
		return nil, errors.New("flaky: call timed out")
	}
	return f.Store.Get(ctx, keys)
}

// TestFetchRetriesARemoteCall: a remote read call that fails is made once more, so one slow
// call of a chunked read does not end the restored chain there; a remote that fails twice
// gives up (a gap: everything is recomputed), after two calls, not more. Host and disk reads
// are not retried.
func TestFetchRetriesARemoteCall(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 6, 8)
	for _, c := range []struct {
		tier        kvtier.Tier
		fails       int64
		usable      int
		wantGets    int64
		description string
	}{
		{kvtier.Remote, 1, 6, 2, "one failed call, retried"},
		{kvtier.Remote, 2, 0, 2, "failed twice: a gap"},
		{kvtier.Host, 1, 0, 1, "host: no retry"},
	} {
		st := &flakyGetStore{Store: memstore.New()}
		st.Store.Put(ctx, tiertest.Items(recs))
		st.fails.Store(c.fails)
		f := newFetcher(t, []TierStore{{c.tier, st}}, nil, nil)
		res, err := f.Fetch(ctx, request(recs)).Wait(ctx)
		if err != nil || res.Usable != c.usable || st.gets.Load() != c.wantGets {
			t.Errorf("%s: %d usable, %d Gets, %v; want %d usable, %d Gets", c.description, res.Usable, st.gets.Load(), err, c.usable, c.wantGets)
		}
	}
}
