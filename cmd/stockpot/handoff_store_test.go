package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestHandoffStorePath: the store path of a handoff. A prefill replica and a decode replica
// (real serve processes) share one real Redis, the prefill writing every computed block
// through. When the prefill's transfer cannot be pulled, the decode restores the prompt from
// the remote tier instead, counts the failed pull, and answers as one replica does:
//   - kill -9: the prefill answers the prefill request, its blocks reach Redis, and it is
//     killed before the decode pulls;
//   - an expired lease: a prefill whose --handoff-lease is 200ms answers, and the decode is
//     asked only once that prefill's /metrics counts the lease expired.
func TestHandoffStorePath(t *testing.T) {
	const model = "synthetic:tiny-llama-spm"
	bin := buildStockpot(t)
	redisURL := "redis://" + startRedis(t) + "/0"
	common := []string{"--model", model, "--threads", "1", "--kv-memory", "32MiB",
		"--remote-cache", redisURL, "--remote-write", "through", "--remote-call-timeout", "1m"}
	both := startStockpot(t, bin, "--model", model, "--threads", "1", "--kv-memory", "32MiB")
	killed := startStockpot(t, bin, append([]string{"--role", "prefill"}, common...)...)
	leased := startStockpot(t, bin, append([]string{"--role", "prefill", "--handoff-lease", "200ms"}, common...)...)
	decode := startStockpot(t, bin, append([]string{"--role", "decode", "--prefill-peer", killed.url, "--prefill-peer", leased.url}, common...)...)

	// decodeAfter sends body, with the prefill's kv_transfer_params, to the decode and checks
	// it against the one replica: the same text, nothing pulled, the prompt from Redis.
	decodeAfter := func(name string, kv json.RawMessage, body map[string]any) {
		t.Helper()
		want := generate(t, both.url, "/v1/completions", body)
		d := map[string]any{"kv_transfer_params": kv}
		for k, v := range body {
			d[k] = v
		}
		got := generate(t, decode.url, "/v1/completions", d)
		if got.Status != 200 || want.Status != 200 {
			t.Fatalf("%s: decode HTTP %d (%s), one replica HTTP %d (%s)", name, got.Status, got.Body, want.Status, want.Body)
		}
		if got.Text != want.Text {
			t.Errorf("%s: the decode answered %q, one replica %q", name, got.Text, want.Text)
		}
		if num(got.Cache, "transfer_tokens") != 0 || num(got.Cache, "remote_tokens") == 0 {
			t.Errorf("%s: usage.cache %v: want nothing by transfer and the prompt from the remote tier", name, got.Cache)
		}
	}
	failedPulls := func() float64 {
		return scrape(t, decode.url)[`stockpot_kv_transfer_failures_total{reason="pull"}`]
	}

	// kill -9 after the prefill answered, once its blocks are in Redis.
	body := map[string]any{"prompt": strings.Repeat("The prefill dies after answering; the stock is in the store. ", 10),
		"max_tokens": 10, "temperature": 0, "ignore_eos": true}
	p := generate(t, killed.url, "/v1/completions", prefillBody(body))
	if p.Status != 200 || len(p.KV) == 0 || string(p.KV) == "null" {
		t.Fatalf("prefill: HTTP %d, kv_transfer_params %s: %s", p.Status, p.KV, p.Body)
	}
	storeWait(t, "the prefill's write-through to Redis", func() bool {
		m := scrape(t, killed.url)
		return m[`stockpot_kv_offload_write_seconds_count{tier="remote"}`] >= 1 && m[`stockpot_kv_offload_queue_depth{tier="remote"}`] == 0
	})
	killed.kill()
	decodeAfter("prefill killed", p.KV, body)
	if n := failedPulls(); n < 1 {
		t.Errorf("failed pulls counted %v after the prefill was killed, want 1", n)
	}

	// The lease expires before the decode pulls.
	body = map[string]any{"prompt": strings.Repeat("The lease runs out before the decode comes; the store still has it. ", 10),
		"max_tokens": 10, "temperature": 0, "ignore_eos": true}
	p = generate(t, leased.url, "/v1/completions", prefillBody(body))
	if p.Status != 200 || len(p.KV) == 0 || string(p.KV) == "null" {
		t.Fatalf("prefill: HTTP %d, kv_transfer_params %s: %s", p.Status, p.KV, p.Body)
	}
	storeWait(t, "the lease to expire and the write-through to finish", func() bool {
		m := scrape(t, leased.url)
		return m["stockpot_kv_transfer_leases_expired_total"] >= 1 &&
			m[`stockpot_kv_offload_write_seconds_count{tier="remote"}`] >= 1 && m[`stockpot_kv_offload_queue_depth{tier="remote"}`] == 0
	})
	decodeAfter("lease expired", p.KV, body)
	if n := failedPulls(); n < 2 {
		t.Errorf("failed pulls counted %v after the expired lease, want 2", n)
	}
}

// storeWait polls cond until it holds, failing the test after a generous deadline.
func storeWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
