package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/server"
	"stockpot/internal/tenant"
)

// TestTenantPinShares is the probe's reproduction: one tenant pins as much as it can for 24h
// (a prompt longer than the whole pin budget), and another tenant then still pins its share;
// a tenant with a cache_bytes quota pins no more than it. Each short pin says why in
// usage.cache.pin_limit, and stockpot_tenant_pins_limited_total counts it.
func TestTenantPinShares(t *testing.T) {
	const blockSize = 16
	// The block size in bytes, from an instance of the same model, to size the budget and
	// the quota in blocks.
	probe, err := newInstance(serveOptions{model: "synthetic:tiny-llama-spm", threads: 1, engine: engine.Config{BlockSize: blockSize, KVMemory: 64 << 20, PrefixCache: true, MaxBatchTokens: 256, MaxRunning: 4, Prefetch: engine.PrefetchWait}})
	if err != nil {
		t.Fatal(err)
	}
	blockBytes := probe.engine.Stats().KVBlockBytes
	probe.Close()

	// Budget 12 blocks among acme, globex, capped (cache_bytes: 2 blocks) and the operator:
	// shares of 12/4 = 3 blocks, capped's 2; 1 block is nobody's.
	src := fmt.Sprintf(`tenants:
  - name: acme
    keys: ["%s"]
  - name: globex
    keys: ["%s"]
  - name: capped
    keys: ["%s"]
    quotas: {cache_bytes: %d}
`, tenant.HashKey("key-acme"), tenant.HashKey("key-globex"), tenant.HashKey("key-capped"), 2*blockBytes)
	ts, err := tenant.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, tiers: offload.Config{}, engine: engine.Config{BlockSize: blockSize, KVMemory: 64 << 20, PrefixCache: true, Dedup: true, MaxBatchTokens: 256, MaxRunning: 8, Prefetch: engine.PrefetchWait, PinBudget: 12 * blockBytes}, server: server.Config{Tenants: ts, PublicMetrics: true}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(inst)
	defer func() { srv.Close(); inst.Close() }()
	if got := inst.engine.Stats().PinBudgetBlocks; got != 12 {
		t.Fatalf("pin budget %d blocks, want 12", got)
	}

	type usage struct {
		PromptTokens int `json:"prompt_tokens"`
		Cache        struct {
			Pinned    int    `json:"pinned_tokens"`
			Requested int    `json:"pin_requested_tokens"`
			Limit     string `json:"pin_limit"`
		} `json:"cache"`
	}
	pin := func(key, prompt string) usage {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1, "prompt_cache_retention": "24h"})
		req, _ := http.NewRequest("POST", srv.URL+"/v1/completions", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", key, resp.StatusCode, out)
		}
		var r struct{ Usage usage }
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		return r.Usage
	}
	// acme asks for far more than the budget: its share and the free block, no more.
	a := pin("key-acme", "acme: "+longText(1500))
	if a.Cache.Requested < 12*blockSize || a.Cache.Pinned != 4*blockSize || a.Cache.Limit != engine.PinLimitOtherShares {
		t.Fatalf("acme pinned %d of %d tokens (limit %q), want %d (its share and the free block), limited by other_tenants_shares",
			a.Cache.Pinned, a.Cache.Requested, a.Cache.Limit, 4*blockSize)
	}
	// acme again, another prompt: nothing is left to it.
	if a2 := pin("key-acme", "acme again: "+longText(600)); a2.Cache.Pinned != 0 || a2.Cache.Limit != engine.PinLimitOtherShares {
		t.Fatalf("acme's second pin: %d tokens (limit %q), want 0", a2.Cache.Pinned, a2.Cache.Limit)
	}
	// globex still pins its share (before shares: 0 of what it asked).
	g := pin("key-globex", "globex: "+longText(1500))
	if g.Cache.Pinned != 3*blockSize || g.Cache.Limit != engine.PinLimitOtherShares {
		t.Fatalf("globex pinned %d of %d tokens (limit %q), want its share of %d", g.Cache.Pinned, g.Cache.Requested, g.Cache.Limit, 3*blockSize)
	}
	// capped pins up to its cache_bytes quota, and says so.
	c := pin("key-capped", "capped: "+longText(1500))
	if c.Cache.Pinned != 2*blockSize || c.Cache.Limit != engine.PinLimitTenantQuota {
		t.Fatalf("capped pinned %d of %d tokens (limit %q), want its quota's %d", c.Cache.Pinned, c.Cache.Requested, c.Cache.Limit, 2*blockSize)
	}
	if n := len(inst.engine.Pins()); n != 4+3+2 {
		t.Fatalf("%d blocks pinned, want 9 (the operator's share of 3 is still free)", n)
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`stockpot_tenant_pins_limited_total{reason="other_tenants_shares",tenant="acme"} 2`,
		`stockpot_tenant_pins_limited_total{reason="other_tenants_shares",tenant="globex"} 1`,
		`stockpot_tenant_pins_limited_total{reason="tenant_quota",tenant="capped"} 1`,
	} {
		if !strings.Contains(string(m), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
