package bench

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestPDBenchShape runs `stockpot bench pd` at a toy scale (tiny models, a few short requests,
// every topology, two handoff lengths and the Redis store path) and checks the report's shape:
// every topology measured with no errors, the pair's requests handed off (transfer tokens) and
// no one else's, every handoff split with its pull and store restore, the files written. It
// never looks at a timing's value.
func TestPDBenchShape(t *testing.T) {
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (%v): `make test` installs it", err)
	}
	dir := t.TempDir()
	cfg := DefaultPDConfig()
	cfg.Binary, cfg.Dir, cfg.Redis, cfg.Pin = stockpotBinary(t), dir, redis, false
	cfg.Model, cfg.Streams, cfg.StreamPromptTokens, cfg.StreamTokens = "synthetic:tiny-llama-spm", 2, 24, 6
	cfg.LongRequests, cfg.LongRate, cfg.LongPromptTokens, cfg.LongMaxTokens = 2, 20, 200, 3
	cfg.HandoffModel, cfg.HandoffLengths, cfg.HandoffKVMemory = "synthetic:tiny-kimi-k3", []int{256, 512}, "64MiB"
	cfg.HandoffCheckpointBlocks = 2 // reuse in units of 32 tokens: both prompts are handed off
	cfg.Timeout = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := RunPD(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Topologies) != 3 {
		t.Fatalf("%d topologies, want 3", len(rep.Topologies))
	}
	for i, top := range rep.Topologies {
		if top.Name != pdTopologies[i] || top.Description == "" {
			t.Errorf("topology %d: %q %q", i, top.Name, top.Description)
		}
		if top.Errors != 0 || top.TTFTLong == nil || top.TTFTLong.Count != 2 || top.TTFTStreams == nil || top.ITLStreams == nil ||
			top.Goodput == nil || len(top.LongStarts) != 2 || len(top.TTFTAll) != top.Requests {
			t.Errorf("%s: %+v", top.Name, top.PDLoadStats)
		}
		if handed := top.TransferTokens > 0; handed != (top.Name == "pd") {
			t.Errorf("%s: transfer tokens %d", top.Name, top.TransferTokens)
		}
	}
	if len(rep.Handoff) != 2 {
		t.Fatalf("%d handoff rows, want 2", len(rep.Handoff))
	}
	for _, h := range rep.Handoff {
		if h.Err != "" || h.TransferTokens == 0 || h.PullMs == nil || h.PulledBytes == nil || h.MemcpyGBps == nil ||
			h.StoreRestoreMs == nil || h.StoreTokens == nil || *h.StoreTokens == 0 {
			b, _ := json.Marshal(h)
			t.Errorf("handoff row %s", b)
		}
	}
	if rep.MemcpyGBps == nil || rep.Machine.CPU == "" || rep.Machine.Cores == 0 {
		t.Errorf("machine %+v memcpy %v", rep.Machine, rep.MemcpyGBps)
	}
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"pd.json", "pd.html", "pd.png", "pd-prefill.log", "pair-route.log", "handoff-store.log"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || (st.Size() == 0 && filepath.Ext(f) != ".log") {
			t.Errorf("%s: %v", f, err)
		}
	}
}
