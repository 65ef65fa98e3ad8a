package main

import (
	"fmt"
	"sync"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
)

type timings struct {
	TTFTMs    float64 `json:"ttft_ms"`
	QueueMs   float64 `json:"queue_ms"`
	RestoreMs float64 `json:"restore_ms"`
}

func ttftOf(b *testing.B, url, prompt string) (timings, apiUsage) {
	code, out := postB(b, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1})
	if code != 200 {
		b.Fatalf("status %d: %s", code, out)
	}
	var r struct {
		Usage struct {
			apiUsage
			Timings timings `json:"timings"`
		}
	}
	if err := jsonUnmarshal(out, &r); err != nil {
		b.Fatal(err)
	}
	return r.Usage.Timings, r.Usage.apiUsage
}

// BenchmarkDiskRestoreTTFT: TTFT of an 8K-token prompt on the default model computed cold vs
// restored from the disk tier after a restart (same directory), in the same run.
func BenchmarkDiskRestoreTTFT(b *testing.B) {
	prompt := longText(20500) // ≈ 8,000 tokens of the default model
	for b.Loop() {
		dir := b.TempDir()
		to := offload.Config{DiskDir: dir, DiskBytes: 8 << 30}
		o := serveOptions{model: defaultModel, tiers: to, engine: engine.Config{BlockSize: 16, KVMemory: 1 << 30, PrefixCache: true, Dedup: true, MaxBatchTokens: 512, MaxRunning: 16, Prefetch: engine.PrefetchWait}}
		inst, err := newInstance(o)
		if err != nil {
			b.Fatal(err)
		}
		ts := newHTTPServer(inst)
		cold, u := ttftOf(b, ts.URL, prompt)
		ts.Close()
		inst.Close()
		if inst, err = newInstance(o); err != nil {
			b.Fatal(err)
		}
		ts = newHTTPServer(inst)
		warm, wu := ttftOf(b, ts.URL, prompt)
		ts.Close()
		inst.Close()
		b.ReportMetric(float64(u.PromptTokens), "prompt-tokens")
		b.ReportMetric(float64(wu.Cache["disk_tokens"]), "disk-tokens")
		b.ReportMetric(cold.TTFTMs, "cold-ttft-ms")
		b.ReportMetric(warm.TTFTMs, "disk-ttft-ms")
		b.ReportMetric(warm.TTFTMs/cold.TTFTMs, "disk/cold")
		fmt.Printf("8K prefix: cold TTFT %.0f ms, warm from disk %.0f ms (%d of %d tokens from disk, restore %.0f ms): ratio 1/%.0f\n",
			cold.TTFTMs, warm.TTFTMs, wu.Cache["disk_tokens"], wu.PromptTokens, warm.RestoreMs, cold.TTFTMs/warm.TTFTMs)
	}
}

// BenchmarkPrefetchOverlap: a request whose prefix is on disk arrives (a) at an idle server,
// where the fetch is on its critical path, and (b) behind a long prefill, where the fetch
// started at enqueue overlaps the queue wait. Reported: the restore stall (time admission held
// the request only for its fetch, stockpot_kv_restore_stall_seconds_total) and TTFT in each case.
func BenchmarkPrefetchOverlap(b *testing.B) {
	shared := longText(4000 * 4)
	for b.Loop() {
		dir := b.TempDir()
		to := offload.Config{DiskDir: dir, DiskBytes: 8 << 30}
		o := serveOptions{model: defaultModel, tiers: to, engine: engine.Config{BlockSize: 16, KVMemory: 1 << 30, PrefixCache: true, Dedup: true, MaxBatchTokens: 512, MaxRunning: 1, Prefetch: engine.PrefetchWait}}
		inst, err := newInstance(o)
		if err != nil {
			b.Fatal(err)
		}
		ts := newHTTPServer(inst)
		ttftOf(b, ts.URL, shared)
		ts.Close()
		inst.Close()

		// (a) idle server: the fetch is on the critical path.
		inst, _ = newInstance(o)
		ts = newHTTPServer(inst)
		idle, _ := ttftOf(b, ts.URL, shared)
		idleStall := stallSeconds(b, ts.URL)
		ts.Close()
		inst.Close()

		// (b) behind a long prefill (max 1 running): the fetch overlaps the wait.
		inst, _ = newInstance(o)
		ts = newHTTPServer(inst)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); ttftOf(b, ts.URL, "other "+longText(3000*4)) }()
		for inst.engine.Stats().Running == 0 {
		}
		queued, _ := ttftOf(b, ts.URL, shared)
		wg.Wait()
		queuedStall := stallSeconds(b, ts.URL)
		ts.Close()
		inst.Close()
		b.ReportMetric(idleStall*1000, "idle-stall-ms")
		b.ReportMetric(queuedStall*1000, "queued-stall-ms")
		fmt.Printf("prefetch: idle server: TTFT %.0f ms, fetch %.0f ms, restore stall %.1f ms; behind a prefill: TTFT %.0f ms (queue %.0f ms), fetch %.0f ms, restore stall %.1f ms\n",
			idle.TTFTMs, idle.RestoreMs, idleStall*1000, queued.TTFTMs, queued.QueueMs, queued.RestoreMs, queuedStall*1000)
	}
}

func stallSeconds(b *testing.B, url string) float64 {
	m := scrapeB(b, url)
	return m["stockpot_kv_restore_stall_seconds_total"]
}
