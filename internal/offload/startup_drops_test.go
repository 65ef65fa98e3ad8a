package offload

import (
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Open registers the disk tier's start-up drops with the registry that serves /metrics: a
// zero-length record file found at start is counted under reason="empty".
func TestOpenReportsDiskStartupDrops(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, hex.EncodeToString(identity[:]))
	if err := os.MkdirAll(own, 0o755); err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("ab", 32) + "-" + strings.Repeat("cd", 32) + ".kv"
	if err := os.WriteFile(filepath.Join(own, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DiskDir, cfg.DiskBytes, cfg.Identity, cfg.Layout = dir, 1<<20, identity, layout
	reg := prometheus.NewRegistry()
	ts, err := Open(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() == "stockpot_kv_disk_startup_dropped_total" {
			for _, m := range mf.GetMetric() {
				got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	if got["empty"] != 1 || got["symlink"] != 0 || len(got) < 2 {
		t.Fatalf("stockpot_kv_disk_startup_dropped_total %v, want empty=1 and every other reason at 0", got)
	}
}
