package main

import (
	"fmt"
	"strings"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/kvcache"
	"stockpot/internal/offload"
)

func kvInstance(t *testing.T, model string, dt kvcache.DType, to offload.Config) (string, func()) {
	t.Helper()
	o := serveOptions{model: model, threads: 2, tiers: to, engine: engine.Config{BlockSize: 16, KVMemory: 16 << 20, KVType: dt, PrefixCache: true, Dedup: true, MaxBatchTokens: 256, MaxRunning: 16, Prefetch: engine.PrefetchWait}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	return ts.URL, func() { ts.Close(); inst.Close() }
}

// TestKVTypeQ8Tiers: with --kv-type q8_0, blocks written back to disk come back after a
// restart (the record carries the q8_0 bytes as they are) and give the same greedy output; a
// server on the same directory with f16 K/V reuses none of them (the K/V type is in the cache
// identity), nor does a q8_0 one reuse f16 blocks.
func TestKVTypeQ8Tiers(t *testing.T) {
	dir := t.TempDir()
	to := offload.Config{DiskDir: dir, DiskBytes: 1 << 30}
	prompt := longText(3000)
	const model = "synthetic:tiny-kquant" // head dim 64
	url, stop := kvInstance(t, model, kvcache.Q8_0, to)
	cold := completeText(t, url, prompt)
	again := completeText(t, url, prompt)
	stop()
	if again.text != cold.text {
		t.Errorf("q8_0: cached output %q differs from cold %q", again.text, cold.text)
	}

	url, stop = kvInstance(t, model, kvcache.Q8_0, to)
	warm := completeText(t, url, prompt)
	stop()
	aligned := (warm.usage.PromptTokens - 1) / 16 * 16
	if got := warm.usage.Cache["disk_tokens"]; float64(got) < 0.95*float64(aligned) {
		t.Errorf("q8_0 after restart: %d disk tokens of %d block-aligned (usage %v)", got, aligned, warm.usage.Cache)
	}
	if warm.text != cold.text {
		t.Errorf("q8_0 after restart the output changed: %q vs %q", warm.text, cold.text)
	}

	url, stop = kvInstance(t, model, kvcache.F16, to)
	f16 := completeText(t, url, prompt)
	stop()
	if c := *f16.usage.PromptTokensDetails.CachedTokens; c != 0 {
		t.Errorf("f16 server reused %d tokens of q8_0 blocks", c)
	}
	url, stop = kvInstance(t, model, kvcache.Q8_0, to)
	back := completeText(t, url, prompt)
	stop()
	// The disk tier drops records of another layout when it opens a directory, so the f16
	// run left nothing of the q8_0 blocks; what matters is that nothing f16 is reused.
	if c := *back.usage.PromptTokensDetails.CachedTokens; c != 0 || back.text != cold.text {
		t.Errorf("q8_0 after an f16 run: %d cached tokens (want 0), output %q (want %q)", c, back.text, cold.text)
	}
}

func TestKVTypeFlag(t *testing.T) {
	err := cmdServe([]string{"--model", "synthetic:tiny-llama-spm", "--kv-type", "bf16"})
	if err == nil || !strings.Contains(err.Error(), "want f32, f16 or q8_0") {
		t.Fatalf("--kv-type bf16: %v", err)
	}
	// q8_0 needs head rows of whole 32-value blocks; tiny-llama-spm has head dim 16.
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 1, engine: engine.Config{BlockSize: 16, KVMemory: 16 << 20, KVType: kvcache.Q8_0, MaxBatchTokens: 256, MaxRunning: 4}}
	if inst, err := newInstance(o); err == nil {
		inst.Close()
		t.Fatal("q8_0 K/V on head dim 16 accepted")
	} else if !strings.Contains(err.Error(), "multiple of 32") {
		t.Fatalf("q8_0 on head dim 16: %v", err)
	}
}

// TestKVTypeQ8HostTier: q8_0 blocks pushed out of a small working pool come back from host RAM
// with the same output.
func TestKVTypeQ8HostTier(t *testing.T) {
	l := kvcache.Layout{BlockSize: 16, Layers: 2, KVHeads: 2, HeadDim: 64, DType: kvcache.Q8_0} // tiny-kquant
	o := serveOptions{model: "synthetic:tiny-kquant", threads: 2, tiers: offload.Config{HostBytes: 64 << 20}, engine: engine.Config{BlockSize: 16, KVMemory: 70 * l.BlockBytes(), KVType: kvcache.Q8_0, PrefixCache: true, MaxBatchTokens: 256, MaxRunning: 4, Prefetch: engine.PrefetchWait}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	defer func() { ts.Close(); inst.Close() }()
	first := completeText(t, ts.URL, longText(1500))
	for i := 0; i < 3; i++ {
		completeText(t, ts.URL, fmt.Sprint(i, longText(1500)))
	}
	again := completeText(t, ts.URL, longText(1500))
	if again.usage.Cache["host_tokens"] == 0 {
		t.Errorf("nothing restored from host: %v", again.usage.Cache)
	}
	if again.text != first.text {
		t.Errorf("restored output differs: %q vs %q", again.text, first.text)
	}
}
