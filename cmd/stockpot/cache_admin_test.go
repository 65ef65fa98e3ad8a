package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/server"
)

// adminCall sends an admin request with key and decodes the JSON answer into out.
func adminCall(t *testing.T, method, url, key string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, b)
		}
	}
	if resp.StatusCode != 200 {
		t.Logf("%s %s: HTTP %d %s", method, url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// TestServeCacheAdmin runs the cache admin API against a real engine with a host tier: a
// prewarm makes the next request's prefix cached, GET /v1/cache shows the pool, the host tier
// and the chain, and DELETE /v1/cache by salt empties the pool and the host tier of that
// tenant, so the same prompt then computes everything again.
func TestServeCacheAdmin(t *testing.T) {
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, tiers: offload.Config{HostBytes: 64 << 20}, engine: engine.Config{BlockSize: 16, KVMemory: 70 * 8192, PrefixCache: true, MaxBatchTokens: 256, MaxRunning: 4, Prefetch: engine.PrefetchWait}, server: server.Config{AdminKeys: []string{"adm"}}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	defer func() { ts.Close(); inst.Close() }()

	if code := adminCall(t, "GET", ts.URL+"/v1/cache", "", nil, nil); code != 401 {
		t.Errorf("no key: HTTP %d, want 401", code)
	}
	text := longText(700) // 22 blocks: within the pin budget (half the pool)
	var pw struct {
		PromptTokens   int `json:"prompt_tokens"`
		CachedTokens   int `json:"cached_tokens"`
		ComputedTokens int `json:"computed_tokens"`
		Blocks         int `json:"blocks"`
		PinnedTokens   int `json:"pinned_tokens"`
	}
	if code := adminCall(t, "POST", ts.URL+"/v1/cache/prewarm", "adm", map[string]any{"prompt": text, "pin": map[string]any{"ttl": "1h"}}, &pw); code != 200 {
		t.Fatalf("prewarm: HTTP %d", code)
	}
	if pw.ComputedTokens != pw.PromptTokens || pw.Blocks != pw.PromptTokens/16 || pw.PinnedTokens != pw.Blocks*16 {
		t.Errorf("prewarm %+v: want every token computed into %d blocks, all pinned", pw, pw.PromptTokens/16)
	}
	warm := completeText(t, ts.URL, text)
	if c, want := *warm.usage.PromptTokensDetails.CachedTokens, (warm.usage.PromptTokens-1)/16*16; c != want {
		t.Errorf("after the prewarm: %d cached tokens, want %d", c, want)
	}
	// A prompt over the pool (70 blocks of 16) is refused before the engine sees it.
	var big struct{}
	if code := adminCall(t, "POST", ts.URL+"/v1/cache/prewarm", "adm", map[string]any{"prompt": longText(3000)}, &big); code != 400 {
		t.Errorf("a prewarm over the pool: HTTP %d, want 400", code)
	}

	for i := range 3 { // push other prompts down to the host tier; the pinned one stays
		completeText(t, ts.URL, fmt.Sprint(i, longText(1000)))
	}
	var res struct {
		Tiers []struct {
			Tier   string
			Blocks int64
		}
		TopPrefixes struct {
			ByBytes []struct{ Tokens int } `json:"by_bytes"`
		} `json:"top_prefixes"`
		Pins []struct {
			ID, Tier       string
			Blocks, Tokens int
			TTL            float64 `json:"ttl_seconds"`
		}
	}
	if code := adminCall(t, "GET", ts.URL+"/v1/cache?limit=3", "adm", nil, &res); code != 200 {
		t.Fatalf("GET /v1/cache: HTTP %d", code)
	}
	if len(res.Tiers) != 2 || res.Tiers[0].Tier != "device" || res.Tiers[0].Blocks == 0 || res.Tiers[1].Tier != "host" || res.Tiers[1].Blocks == 0 {
		t.Errorf("tiers %+v: want device and host, both holding blocks", res.Tiers)
	}
	if n := len(res.TopPrefixes.ByBytes); n == 0 || n > 3 || res.TopPrefixes.ByBytes[0].Tokens == 0 {
		t.Errorf("top prefixes by bytes %+v (limit 3)", res.TopPrefixes.ByBytes)
	}
	// The prewarm's pin kept its prefix in the pool through that traffic, and is listed: one
	// chain in the pool, and its blocks pinned in the host tier too (pins go down the tiers).
	if len(res.Pins) == 0 || res.Pins[0].Tier != "device" || res.Pins[0].Tokens != pw.PinnedTokens || res.Pins[0].TTL != 3600 {
		t.Fatalf("pins %+v, want the prewarm's %d-token 1h pin first", res.Pins, pw.PinnedTokens)
	}
	for _, p := range res.Pins[1:] {
		if p.Tier != "host" || p.TTL != 3600 || p.Blocks != 1 {
			t.Errorf("pin %+v: want the host tier's copies of the 1h pin's blocks", p)
		}
	}
	var un struct {
		UnpinnedBlocks int `json:"unpinned_blocks"`
	}
	if code := adminCall(t, "DELETE", ts.URL+"/v1/cache?pin="+res.Pins[0].ID, "adm", nil, &un); code != 200 || un.UnpinnedBlocks != res.Pins[0].Blocks {
		t.Errorf("unpin: HTTP %d, %+v, want %d blocks", code, un, res.Pins[0].Blocks)
	}
	if n := len(inst.engine.Pins()); n != 0 {
		t.Errorf("%d blocks still pinned after the unpin", n)
	}
	if code := adminCall(t, "DELETE", ts.URL+"/v1/cache?pin="+res.Pins[0].ID, "adm", nil, &un); code != 404 {
		t.Errorf("unpin twice: HTTP %d, want 404", code)
	}
	var after struct{ Pins []any }
	if code := adminCall(t, "GET", ts.URL+"/v1/cache", "adm", nil, &after); code != 200 || len(after.Pins) != 0 {
		t.Errorf("after the unpin: HTTP %d, pins %v, want none in any tier", code, after.Pins)
	}

	var dr struct {
		DroppedBlocks int `json:"dropped_blocks"`
		BusyBlocks    int `json:"busy_blocks"`
		Tiers         map[string]int
	}
	if code := adminCall(t, "DELETE", ts.URL+"/v1/cache?salt=", "adm", nil, &dr); code != 200 {
		t.Fatalf("DELETE: HTTP %d", code)
	}
	if dr.DroppedBlocks == 0 || dr.BusyBlocks != 0 || dr.Tiers["host"] == 0 {
		t.Errorf("drop of the unsalted tenant: %+v, want pool and host blocks dropped", dr)
	}
	cold := completeText(t, ts.URL, text)
	if c := *cold.usage.PromptTokensDetails.CachedTokens; c != 0 {
		t.Errorf("after the drop: %d cached tokens (%v), want 0", c, cold.usage.Cache)
	}
	if err := inst.engine.CheckInvariants(); err != nil {
		t.Error(err)
	}
}
