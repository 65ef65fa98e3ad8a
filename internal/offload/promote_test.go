package offload

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
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
