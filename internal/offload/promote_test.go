package offload

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
	"stockpot/internal/tier/disk"
	"stockpot/internal/tier/hostmem"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// TestPromotionToHost: a prefix restored from disk and remote is also put in host, off the
// fetch (the writer's host queue); the next fetch of it reads host only.
func TestPromotionToHost(t *testing.T) {
	host, disk, remote := memstore.New(), memstore.New(), memstore.New()
	tiers := []TierStore{{kvtier.Host, host}, {kvtier.Disk, disk}, {kvtier.Remote, remote}}
	recs := tiertest.Chain(identity, root, layout, 4, 11)
	for i, r := range recs {
		s := disk
		if i >= 2 {
			s = remote
		}
		if err := s.Put(ctx, []tier.Item{{Key: r.Key(), Value: tiertest.Encode(r)}}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := NewWriter(WriterConfig{Identity: identity, Layout: layout, Admission: Admission{MinHits: 9}}, tiers, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, tiers, nil, nil)
	f.SetPromote(w.Promote)
	res, err := f.Fetch(ctx, request(recs)).Wait(ctx)
	if err != nil || res.Usable != 4 {
		t.Fatalf("first fetch: usable %d, %v", res.Usable, err)
	}
	for i, want := range []kvtier.Tier{kvtier.Disk, kvtier.Disk, kvtier.Remote, kvtier.Remote} {
		if res.Blocks[i].Tier != want {
			t.Fatalf("first fetch: block %d from %v, want %v", i, res.Blocks[i].Tier, want)
		}
	}
	waitFor(t, "the promotions", func() bool { return w.Stats().Written[0] == 4 })
	if st := w.Stats(); st.Promoted != 4 || st.Written[1] != 0 || st.Written[2] != 0 {
		t.Fatalf("stats %+v: want 4 promoted to host, nothing written below (MinHits does not apply)", st)
	}
	res, err = f.Fetch(ctx, request(recs)).Wait(ctx)
	if err != nil || res.Usable != 4 {
		t.Fatalf("second fetch: usable %d, %v", res.Usable, err)
	}
	for i, b := range res.Blocks {
		if b.Tier != kvtier.Host {
			t.Errorf("second fetch: block %d from %v, want host", i, b.Tier)
		}
	}
	w.Close()
	if st := w.Stats(); st.Promoted != 4 {
		t.Errorf("a host hit was promoted again: %+v", st)
	}
}

// TestPromotionWiring: Tiers promotes only where a host tier sits above another tier.
func TestPromotionWiring(t *testing.T) {
	for _, tc := range []struct {
		tiers []kvtier.Tier
		want  bool
	}{
		{[]kvtier.Tier{kvtier.Host, kvtier.Disk}, true},
		{[]kvtier.Tier{kvtier.Host, kvtier.Remote}, true},
		{[]kvtier.Tier{kvtier.Host}, false},
		{[]kvtier.Tier{kvtier.Disk, kvtier.Remote}, false},
	} {
		cfg := DefaultConfig()
		cfg.Identity, cfg.Layout, cfg.HostBytes = identity, layout, 1<<20
		ts := &Tiers{cfg: cfg}
		for _, k := range tc.tiers {
			ts.tiers = append(ts.tiers, TierStore{k, memstore.New()})
		}
		if err := ts.start(prometheus.NewRegistry()); err != nil {
			t.Fatal(err)
		}
		if got := ts.fetcher.promote != nil; got != tc.want {
			t.Errorf("tiers %v: promotes %v, want %v", tc.tiers, got, tc.want)
		}
		ts.Close()
	}
}

// TestPromotionOfALargeRestore: a restore of many more blocks than the write-back queue holds
// (256) from the disk tier promotes every one of them to host when host has room: the
// promotion queue is bounded by bytes, not by the write-back's entries. Counts only, no
// timing: Close waits for the promotions.
func TestPromotionOfALargeRestore(t *testing.T) {
	const n = 2000
	host, err := hostmem.New(hostmem.Config{CapacityBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	dsk, err := disk.Open(disk.Config{Dir: t.TempDir(), CapacityBytes: 1 << 30, IdentityDigest: identity})
	if err != nil {
		t.Fatal(err)
	}
	defer dsk.Close()
	recs := tiertest.Chain(identity, root, layout, n, 5)
	items := make([]tier.Item, n)
	for i, r := range recs {
		items[i] = tier.Item{Key: r.Key(), Value: tiertest.Encode(r)}
	}
	if err := dsk.Put(ctx, items); err != nil {
		t.Fatal(err)
	}
	tiers := []TierStore{{kvtier.Host, host}, {kvtier.Disk, dsk}}
	w, err := NewWriter(WriterConfig{Identity: identity, Layout: layout}, tiers, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, tiers, nil, nil)
	f.SetPromote(w.Promote)
	if res := fetch(t, f, request(recs)); res.Usable != n {
		t.Fatalf("restored %d of %d blocks", res.Usable, n)
	}
	w.Close()
	st := w.Stats()
	if st.Promoted != n || st.Dropped[0] != 0 || st.Written[0] != n || host.Stats().Items != n {
		t.Errorf("promoted %d, dropped %d, written %d, host holds %d: want all %d in host, none dropped",
			st.Promoted, st.Dropped[0], st.Written[0], host.Stats().Items, n)
	}
	if res := fetch(t, f, request(recs)); res.Usable != n || res.Blocks[n-1].Tier != kvtier.Host {
		t.Errorf("second fetch: %d usable, the last from %v: want all from host", res.Usable, res.Blocks[n-1].Tier)
	}
}

// TestPromotionBudget: promotions past WriterConfig.PromoteBytes are dropped, and counted as
// host queue_full drops; the rest are promoted.
func TestPromotionBudget(t *testing.T) {
	host := memstore.New()
	gate := &gatedStore{Store: host, open: make(chan struct{})} // holds the worker's first Put
	tiers := []TierStore{{kvtier.Host, gate}, {kvtier.Disk, memstore.New()}}
	recs := tiertest.Chain(identity, root, layout, 10, 6)
	items := make([]tier.Item, len(recs))
	for i, r := range recs {
		items[i] = tier.Item{Key: r.Key(), Value: tiertest.Encode(r)}
	}
	size := int64(len(items[0].Value))
	w, err := NewWriter(WriterConfig{Identity: identity, Layout: layout, PromoteBytes: 4 * size}, tiers, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Promote(items)
	close(gate.open)
	w.Close()
	if st := w.Stats(); st.Promoted != 4 || st.Dropped[0] != 6 || st.Written[0] != 4 {
		t.Errorf("stats %+v: want 4 promoted and written, 6 dropped", st)
	}
}

// gatedStore is a tier.Store whose Put waits until open is closed.
type gatedStore struct {
	tier.Store
	open chan struct{}
}

func (g *gatedStore) Put(ctx context.Context, items []tier.Item) error {
	<-g.open
	return g.Store.Put(ctx, items)
}
