package offload

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// blockEvent is the engine's event for record r at depth d.
func blockEvent(kind prefix.EventKind, r *tier.Record, depth, hits int) prefix.Event {
	return prefix.Event{Kind: kind, Hash: r.Hash, Parent: r.Parent, Root: r.Root, Hits: uint32(hits), Depth: int32(depth), Tokens: r.Tokens}
}

// startTiers starts Tiers over host and remote memstores (no Open: no real stores).
func startTiers(t *testing.T, mod func(*Config)) (ts *Tiers, host, remote *memstore.Store) {
	t.Helper()
	host, remote = memstore.New(), memstore.New()
	cfg := DefaultConfig()
	cfg.Identity, cfg.Layout, cfg.HostBytes, cfg.RemoteURL = identity, layout, 1<<20, "redis://fake"
	mod(&cfg)
	cfg, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	ts = &Tiers{cfg: cfg, tiers: []TierStore{{kvtier.Host, host}, {kvtier.Remote, remote}}}
	if err := ts.start(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ts.Close)
	return ts, host, remote
}

// held lists which of recs s holds, as block indexes.
func held(t *testing.T, s tier.Store, recs []*tier.Record) string {
	t.Helper()
	keys := make([]tier.Key, len(recs))
	for i, r := range recs {
		keys[i] = r.Key()
	}
	ok, err := s.Contains(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for i, b := range ok {
		if b {
			out = append(out, i)
		}
	}
	return fmt.Sprint(out)
}

// TestRemoteWritePolicies: the same block events under each --remote-write policy. A chain of
// 4 blocks (block size 4) is committed; blocks 0 and 1 are then reused once by another
// request; then blocks 3 (never reused) and 1 are evicted. Admission: 1 reuse and an 8-token
// prefix. Host is written back in every policy; the remote tier is written at the commit
// (through: everything), at the reuse that passes admission (selective: block 1; block 0's
// prefix is too short) or at the eviction (back: block 1).
func TestRemoteWritePolicies(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 4, 7)
	for _, tc := range []struct {
		pol                WritePolicy
		reuseEvents        bool
		throughAtCommit    uint64 // write-throughs queued by the commits
		throughAfterReuse  uint64 // ... and by the reuses
		remoteBeforeEvict  string
		remote, host       string
		enqueuedAtEviction uint64
	}{
		{pol: WriteThrough, throughAtCommit: 4, throughAfterReuse: 4, remoteBeforeEvict: "[0 1 2 3]", remote: "[0 1 2 3]", host: "[1]", enqueuedAtEviction: 1},
		{pol: WriteSelective, reuseEvents: true, throughAtCommit: 0, throughAfterReuse: 1, remoteBeforeEvict: "[1]", remote: "[1]", host: "[1]", enqueuedAtEviction: 1},
		{pol: WriteBack, throughAtCommit: 0, throughAfterReuse: 0, remoteBeforeEvict: "[]", remote: "[1]", host: "[1]", enqueuedAtEviction: 1},
	} {
		t.Run(tc.pol.String(), func(t *testing.T) {
			ts, host, remote := startTiers(t, func(c *Config) {
				c.RemoteWrite, c.Admission = tc.pol, Admission{MinHits: 1, MinPrefixTokens: 8}
			})
			if got := ts.reuseEvents(); got != tc.reuseEvents {
				t.Fatalf("reuseEvents %v, want %v", got, tc.reuseEvents)
			}
			var evs []prefix.Event
			var kv [][]byte
			for d, r := range recs {
				evs, kv = append(evs, blockEvent(prefix.Stored, r, d, 0)), append(kv, r.KV)
			}
			ts.BlockEvents(evs, kv, nil)
			if st := ts.writer.Stats(); st.Through != tc.throughAtCommit || st.Enqueued != 0 {
				t.Fatalf("after the commits: %d write-throughs, %d write-backs; want %d, 0", st.Through, st.Enqueued, tc.throughAtCommit)
			}
			ts.BlockEvents([]prefix.Event{blockEvent(prefix.Reused, recs[0], 0, 1), blockEvent(prefix.Reused, recs[1], 1, 1)}, [][]byte{recs[0].KV, recs[1].KV}, nil)
			if st := ts.writer.Stats(); st.Through != tc.throughAfterReuse || st.Enqueued != 0 {
				t.Fatalf("after the reuses: %d write-throughs, %d write-backs; want %d, 0", st.Through, st.Enqueued, tc.throughAfterReuse)
			}
			waitFor(t, "the write-throughs", func() bool { return ts.writer.Stats().Written[1] == tc.throughAfterReuse })
			if got := held(t, remote, recs); got != tc.remoteBeforeEvict {
				t.Fatalf("remote before any eviction holds %s, want %s", got, tc.remoteBeforeEvict)
			}
			if got := held(t, host, recs); got != "[]" {
				t.Fatalf("host before any eviction holds %s, want none (write-back)", got)
			}
			ts.BlockEvents([]prefix.Event{blockEvent(prefix.Evicted, recs[3], 3, 0), blockEvent(prefix.Evicted, recs[1], 1, 1)}, [][]byte{recs[3].KV, recs[1].KV}, nil)
			if st := ts.writer.Stats(); st.Enqueued != tc.enqueuedAtEviction {
				t.Fatalf("after the evictions: %d write-backs, want %d", st.Enqueued, tc.enqueuedAtEviction)
			}
			ts.writer.Close()
			if got := held(t, remote, recs); got != tc.remote {
				t.Errorf("remote holds %s, want %s", got, tc.remote)
			}
			if got := held(t, host, recs); got != tc.host {
				t.Errorf("host holds %s, want %s", got, tc.host)
			}
		})
	}
}

// TestSelectiveWithoutMinHits: with no reuse to wait for, selective writes at the commit the
// blocks whose prefix passes MinPrefixTokens, and needs no Reused events.
func TestSelectiveWithoutMinHits(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 4, 8)
	ts, _, remote := startTiers(t, func(c *Config) { c.Admission = Admission{MinPrefixTokens: 12} })
	if ts.cfg.RemoteWrite != WriteSelective || ts.reuseEvents() {
		t.Fatalf("default policy %v, reuse events %v; want selective, none", ts.cfg.RemoteWrite, ts.reuseEvents())
	}
	for d, r := range recs {
		ts.BlockEvents([]prefix.Event{blockEvent(prefix.Stored, r, d, 0)}, [][]byte{r.KV}, nil)
	}
	ts.writer.Close()
	if got := held(t, remote, recs); got != "[2 3]" {
		t.Fatalf("remote holds %s, want [2 3] (prefixes of 12 and 16 tokens)", got)
	}
	if st := ts.writer.Stats(); st.Through != 2 || st.NotAdmitted != 2 {
		t.Fatalf("stats %+v, want 2 written through, 2 not admitted", st)
	}
}

// TestMaxOffloadTokens: blocks past the server's cap, or marked NoOffload by their request's
// cap, are never written down: not through, not back, not at shutdown.
func TestMaxOffloadTokens(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 4, 9)
	ts, host, remote := startTiers(t, func(c *Config) { c.RemoteWrite, c.MaxOffloadTokens = WriteThrough, 12 })
	for d, r := range recs {
		ev := blockEvent(prefix.Stored, r, d, 0)
		ev.NoOffload = d == 1 // beyond its request's max_offload_tokens of 4
		ts.BlockEvents([]prefix.Event{ev}, [][]byte{r.KV}, nil)
	}
	for d, r := range recs {
		ev := blockEvent(prefix.Evicted, r, d, 0)
		ev.NoOffload = d == 1
		ts.BlockEvents([]prefix.Event{ev}, [][]byte{r.KV}, nil)
	}
	ev := blockEvent(prefix.Stored, recs[3], 3, 0)
	ts.FlushBlock(ev, recs[3].KV, nil)
	ts.writer.Close()
	if got := held(t, remote, recs); got != "[0 2]" {
		t.Errorf("remote holds %s, want [0 2] (block 1 NoOffload, block 3 ends at 16 > 12 tokens)", got)
	}
	if got := held(t, host, recs); got != "[0 2]" {
		t.Errorf("host holds %s, want [0 2]", got)
	}
}

// TestThroughDropsWhenFull: a stuck remote tier never blocks the engine's goroutine; what its
// full queue refuses is dropped and counted, as a write-back's would be.
func TestThroughDropsWhenFull(t *testing.T) {
	slow := &blockingStore{Store: memstore.New(), release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	m, _ := NewMetrics(reg)
	w, err := NewWriter(WriterConfig{Identity: identity, Layout: layout, QueueLen: 2, MaxBatch: 1, Remote: WriteThrough},
		[]TierStore{{kvtier.Host, memstore.New()}, {kvtier.Remote, slow}}, m)
	if err != nil {
		t.Fatal(err)
	}
	recs := tiertest.Chain(identity, root, layout, 10, 3)
	// The worker takes the first block and blocks in Put; two more fill the queue.
	w.Through(evicted(recs[0], 0, 4), recs[0].KV)
	waitFor(t, "the worker to take a block", func() bool { return w.Stats().Queued[1] == 0 })
	for _, r := range recs[1:] {
		w.Through(evicted(r, 0, 4), r.KV)
	}
	close(slow.release)
	w.Close()
	st := w.Stats()
	if st.Dropped[1] != 7 || st.Written[1] != 3 || st.Written[0] != 0 {
		t.Fatalf("stats %+v; want remote 7 dropped, 3 written, host nothing (write-back only)", st)
	}
	if got := counterValue(m.dropped.WithLabelValues("remote")); got != 7 {
		t.Fatalf("stockpot_kv_offload_dropped_writes_total{tier=remote} = %v, want 7", got)
	}
	if got := counterValue(m.failures.WithLabelValues("remote", FailQueueFull)); got != 7 {
		t.Fatalf("stockpot_kv_tier_write_failures_total{tier=remote,reason=queue_full} = %v, want 7", got)
	}
}

func TestParseWritePolicy(t *testing.T) {
	for _, s := range []string{"through", "selective", "back"} {
		p, err := ParseWritePolicy(s)
		if err != nil || p.String() != s {
			t.Errorf("ParseWritePolicy(%q) = %v, %v", s, p, err)
		}
	}
	for _, s := range []string{"", "Through", "write-back", "all"} {
		if _, err := ParseWritePolicy(s); err == nil {
			t.Errorf("ParseWritePolicy(%q) accepted", s)
		}
	}
}

// discardStore accepts every Put and keeps nothing.
type discardStore struct{ tier.Store }

func (discardStore) Put(context.Context, []tier.Item) error { return nil }

// BenchmarkWriteThroughCommit is what write-through costs the engine's goroutine per committed
// block (Writer.Through: encode, the one copy out of the arena with its checksum, and the
// enqueue), beside its peer, a plain copy of the block's bytes. Blocks of benchLayout (512 KiB).
// Run with -benchtime 200x (the queue holds 256 blocks).
func BenchmarkWriteThroughCommit(b *testing.B) {
	recs := tiertest.Chain(identity, root, benchLayout, benchBlocks, 5)
	b.Run("copy", func(b *testing.B) {
		dst := make([]byte, len(recs[0].KV))
		b.SetBytes(int64(len(dst)))
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			copy(dst, recs[i%len(recs)].KV)
		}
	})
	b.Run("through", func(b *testing.B) {
		// A queue as long as the run, so no write is dropped (a drop costs nothing): run it
		// with -benchtime of at most 256x.
		w, err := NewWriter(WriterConfig{Identity: identity, Layout: benchLayout, Remote: WriteThrough, QueueLen: 256},
			[]TierStore{{kvtier.Remote, discardStore{memstore.New()}}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		b.SetBytes(int64(len(recs[0].KV)))
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r := recs[i%len(recs)]
			w.Through(Evicted{Root: r.Root, Hash: r.Hash, Parent: r.Parent, Tokens: r.Tokens, StateComplete: true}, r.KV)
		}
		b.StopTimer()
		b.ReportMetric(float64(w.Stats().Dropped[0])/float64(b.N), "drops/op")
	})
}

// TestRestoredNotWrittenThrough: a Stored event of a block the engine restored from a tier
// (prefix.Event.Restored) is not written through: only computed blocks are. Under the through
// policy, of a chain of 4 committed blocks of which the first 3 were restored, only the
// fourth reaches the remote tier.
func TestRestoredNotWrittenThrough(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 4, 9)
	ts, _, remote := startTiers(t, func(c *Config) { c.RemoteWrite = WriteThrough })
	var evs []prefix.Event
	var kv [][]byte
	for d, r := range recs {
		ev := blockEvent(prefix.Stored, r, d, 0)
		ev.Restored = d < 3
		evs, kv = append(evs, ev), append(kv, r.KV)
	}
	ts.BlockEvents(evs, kv, nil)
	ts.writer.Close()
	if got, st := held(t, remote, recs), ts.writer.Stats(); got != "[3]" || st.Through != 1 {
		t.Fatalf("remote holds %s after %d write-throughs; want [3] after 1", got, st.Through)
	}
}
