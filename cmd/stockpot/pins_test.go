package main

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/offload"
)

// TestPinsSurviveRestart: a prompt pinned with prompt_cache_retention "24h" on serve with a
// disk tier, a graceful stop, a start on the same directory: the next request restores the
// prefix from disk and the pool pins it again, with the pin's 24h TTL and no more time left
// than it had.
func TestPinsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	to := offload.Config{DiskDir: dir, DiskBytes: 1 << 30}
	prompt := longText(1200)
	inst, url, stop := tieredInstance(t, "synthetic:tiny-llama-spm", to)
	code, out := post(t, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2, "prompt_cache_retention": "24h"})
	if code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	var r struct{ Usage apiUsage }
	if err := jsonUnmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	pinnedTokens := r.Usage.Cache["pinned_tokens"]
	before := inst.engine.Pins()
	if pinnedTokens == 0 || pinnedTokens != r.Usage.PromptTokens/16*16 || len(before) != pinnedTokens/16 {
		t.Fatalf("pinned %d tokens (%d blocks) of a %d-token prompt", pinnedTokens, len(before), r.Usage.PromptTokens)
	}
	stopped := time.Now()
	stop() // graceful: the pool, pins included, is written back

	inst, url, stop = tieredInstance(t, "synthetic:tiny-llama-spm", to)
	defer stop()
	if n := len(inst.engine.Pins()); n != 0 {
		t.Fatalf("%d pins in the fresh pool before any request", n)
	}
	warm := completeText(t, url, prompt+" and one more question")
	if warm.usage.Cache["disk_tokens"] == 0 {
		t.Errorf("after the restart nothing came from disk: %v", warm.usage.Cache)
	}
	after := inst.engine.Pins()
	if len(after) != len(before) {
		t.Fatalf("after the restart %d blocks are pinned, want %d", len(after), len(before))
	}
	for i, p := range after {
		if p.Hash != before[i].Hash || p.TTL != 24*time.Hour || p.Expires.After(stopped.Add(24*time.Hour+time.Minute)) || !p.Expires.After(time.Now().Add(23*time.Hour)) {
			t.Errorf("block %d re-pinned %+v, want the kept 24h pin", i, p)
		}
	}
}

// TestPinsRedisTTL: with a Redis tier, a prompt pinned for 24h reaches Redis off the request
// path with its retention as the key TTL, on the block and on its pin record.
func TestPinsRedisTTL(t *testing.T) {
	addr := startRedis(t)
	defer stopRedis(t)
	to := offload.Config{RemoteURL: "redis://" + addr + "/0", Remote: testRemote}
	inst, url, stop := tieredInstance(t, "synthetic:tiny-llama-spm", to)
	defer stop()
	code, out := post(t, url+"/v1/completions", map[string]any{"prompt": longText(600), "max_tokens": 2, "prompt_cache_retention": "24h"})
	if code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	blocks := len(inst.engine.Pins())
	if blocks == 0 {
		t.Fatal("nothing pinned")
	}
	rc := goredis.NewClient(&goredis.Options{Addr: addr})
	defer rc.Close()
	ctx := context.Background()
	var pinKeys []string
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		keys, err := rc.Keys(ctx, "*:pin").Result()
		if err != nil {
			t.Fatal(err)
		}
		if pinKeys = keys; len(keys) >= blocks {
			break
		}
	}
	if len(pinKeys) != blocks {
		t.Fatalf("%d pin records in Redis, want one per pinned block (%d)", len(pinKeys), blocks)
	}
	for _, k := range pinKeys {
		block := strings.TrimSuffix(strings.TrimPrefix(k, "{"), "}:pin")
		for _, name := range []string{k, block} {
			ttl, err := rc.PTTL(ctx, name).Result()
			if err != nil || ttl < 23*time.Hour+59*time.Minute || ttl > 24*time.Hour {
				t.Errorf("%s: TTL %v (%v), want the 24h retention", name, ttl, err)
			}
		}
	}
}
