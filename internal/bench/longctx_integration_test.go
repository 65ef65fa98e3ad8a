package bench

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestLongCtxTinyKimiK3 is the longctx workload scaled down for CI: a real `stockpot serve` of
// tiny-kimi-k3 (KDA + MLA, recurrent state checkpointed every 4 blocks of 16) with a host and
// a disk tier, prompts of 2048 and 6144 tokens, and one past the model's 8192-token context.
// It checks what the server did, never how fast: warm from the pool the cached tokens come
// from the device; with the pool dropped, from host; with host dropped too, from disk; what a
// tier restored is in the counters the decision quotes; the pool's K/V and checkpoint bytes
// are exactly the linear model's; the report has its longctx section and the HTML its plots.
func TestLongCtxTinyKimiK3(t *testing.T) {
	base := startServer(t, "--model", "synthetic:tiny-kimi-k3", "--admin-key", "adm", "--block-size", "16",
		"--state-checkpoint-blocks", "4", "--kv-memory", "256MiB", "--host-cache", "128MiB",
		"--disk-cache", t.TempDir(), "--disk-cache-size", "512MiB", "--threads", "2")
	cfg := DefaultConfig()
	cfg.Target, cfg.Workload, cfg.AdminKey, cfg.Lengths = base, "longctx", "adm", []int{2048, 6144, 16384}
	cfg.Logf = t.Logf
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	lc := rep.LongCtx
	if lc == nil {
		t.Fatal("no longctx section")
	}
	if strings.Join(lc.Tiers, ",") != "host,disk" || lc.BlockSize != 16 || lc.CheckpointBlocks != 4 || lc.StateBytes == 0 {
		t.Fatalf("server facts: tiers %v, block %d, N %d, state %d", lc.Tiers, lc.BlockSize, lc.CheckpointBlocks, lc.StateBytes)
	}
	// tiny-kimi-k3: 2 MLA layers × (kv_lora_rank 96 + rope 16) f32 floats a token.
	if lc.KVBytesPerToken == nil || *lc.KVBytesPerToken != 2*112*4 {
		t.Errorf("K/V bytes per token %v, want %d (the MLA latent)", lc.KVBytesPerToken, 2*112*4)
	}
	if len(lc.Lengths) != 3 || !strings.Contains(lc.Lengths[2].Skipped, "context (8192 tokens)") {
		t.Fatalf("lengths: %+v", lc.Lengths)
	}
	for _, l := range lc.Lengths[:2] {
		if !l.Tokenized || l.PromptTokens < l.Target-16 || l.PromptTokens > l.Target+16 {
			t.Errorf("length %d: prompt of %d tokens (tokenized %v)", l.Target, l.PromptTokens, l.Tokenized)
		}
		var got []string
		for _, st := range l.Steps {
			got = append(got, st.Source+"←"+st.From)
			if st.Error != "" {
				t.Errorf("length %d, %s: %s", l.Target, st.Source, st.Error)
			}
		}
		if strings.Join(got, " ") != "cold←computed device←device host←host disk←disk" {
			t.Errorf("length %d: sources %v, want cold from computing, then device, host, disk", l.Target, got)
		}
		unit := 16 * 4
		reusable := (l.PromptTokens - 1) / unit * unit // whole checkpoint units; the last token computed
		for _, src := range []string{"device", "host", "disk"} {
			st := l.step(src)
			if st == nil || st.CachedTokens == nil || *st.CachedTokens == 0 || st.Cache == nil {
				t.Errorf("length %d, %s: nothing cached: %+v", l.Target, src, st)
				continue
			}
			byTier := map[string]int{"device": st.Cache.DeviceTokens, "host": st.Cache.HostTokens, "disk": st.Cache.DiskTokens}
			if byTier[src] != *st.CachedTokens || *st.CachedTokens > reusable {
				t.Errorf("length %d, %s: cached %d, by tier %v; want all from %s, at most %d", l.Target, src, *st.CachedTokens, byTier, src, reusable)
			}
			if src != "device" {
				if st.Restored[src]*16 != float64(*st.CachedTokens) || !strings.Contains(st.Decision, "restored") {
					t.Errorf("length %d, %s: restored blocks %v for %d cached tokens; decision %q", l.Target, src, st.Restored, *st.CachedTokens, st.Decision)
				}
			}
		}
		m := l.Memory
		if m == nil || m.PoolKVBytes == nil || m.PredictedKVBytes == nil || int64(*m.PoolKVBytes) != *m.PredictedKVBytes || m.Checkpoints == nil ||
			int(*m.Checkpoints) != m.PredictedCheckpoints || m.PredictedCheckpoints != l.PromptTokens/16/4 {
			t.Errorf("length %d: memory %+v, want the pool's K/V and checkpoints exactly ⌊P/16⌋ blocks and ⌊P/64⌋ checkpoints", l.Target, m)
		}
		if l.TierBlocks["host"] < int64(l.PromptTokens/16) || l.TierBlocks["disk"] < int64(l.PromptTokens/16) {
			t.Errorf("length %d: staged blocks %v, want the prompt's %d in each tier", l.Target, l.TierBlocks, l.PromptTokens/16)
		}
	}
	if len(lc.Growth) != 1 || lc.Growth[0].PoolKV == nil || lc.Growth[0].Checkpoints == nil {
		t.Errorf("growth %+v", lc.Growth)
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	checkHTMLInChromium(t, filepath.Join(dir, "report.html"), "longctx-ttft-vs-length", "longctx-bytes-vs-length")
}
