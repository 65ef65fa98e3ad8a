package offload

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// stockpot_kv_tier_read_bytes_total counts, per tier, the bytes of the values a restore's
// reads returned: every tier's series reads 0 from the start, and a fetch of two blocks from
// disk and two from remote adds exactly their encoded sizes there.
func TestReadBytesPerTier(t *testing.T) {
	host, disk, remote := memstore.New(), memstore.New(), memstore.New()
	tiers := []TierStore{{kvtier.Host, host}, {kvtier.Disk, disk}, {kvtier.Remote, remote}}
	recs := tiertest.Chain(identity, root, layout, 4, 12)
	want := map[string]float64{}
	for i, r := range recs {
		s, name := disk, "disk"
		if i >= 2 {
			s, name = remote, "remote"
		}
		v := tiertest.Encode(r)
		want[name] += float64(len(v))
		if err := s.Put(ctx, []tier.Item{{Key: r.Key(), Value: v}}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, tiers, m, nil)
	for _, name := range []string{"host", "disk", "remote"} {
		if got := testutil.ToFloat64(m.readBytes.WithLabelValues(name)); got != 0 {
			t.Fatalf("%s: %v read bytes before any read", name, got)
		}
	}
	if res, err := f.Fetch(ctx, request(recs)).Wait(ctx); err != nil || res.Usable != 4 {
		t.Fatalf("fetch: usable %d, %v", res.Usable, err)
	}
	for _, name := range []string{"host", "disk", "remote"} {
		if got := testutil.ToFloat64(m.readBytes.WithLabelValues(name)); got != want[name] {
			t.Errorf("%s: read bytes %v, want %v", name, got, want[name])
		}
	}
}
