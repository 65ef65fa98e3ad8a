package offload

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier/memstore"
)

// TestQueueGauges: the write-back queues' capacity per tier (Config.WriteQueueBlocks), the
// promotion queue's depth and the prefetch queue's depth and capacity are exported.
func TestQueueGauges(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Identity, cfg.Layout, cfg.HostBytes = identity, layout, 1<<20
	cfg.WriteQueueBlocks, cfg.Writers, cfg.FetchQueue = 1000, 2, 77
	ts := &Tiers{cfg: cfg, tiers: []TierStore{{kvtier.Host, memstore.New()}, {kvtier.Disk, memstore.New()}}}
	reg := prometheus.NewRegistry()
	if err := ts.start(reg); err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"stockpot_kv_offload_queue_capacity,host": 1000, "stockpot_kv_offload_queue_capacity,disk": 1000,
		"stockpot_kv_offload_queue_depth,host": 0, "stockpot_kv_offload_promotion_queue_depth": 0,
		"stockpot_kv_prefetch_queue_depth": 0, "stockpot_kv_prefetch_queue_capacity": 77,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (exported %v), want %v", name, v, ok, want)
		}
	}
}
