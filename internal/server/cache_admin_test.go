package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// fakeCacheAdmin records what the cache admin API asked of the engine.
type fakeCacheAdmin struct {
	poolBlocks, blockSize int
	prewarmed             []engine.Request
	limit                 int
	drops                 []string // "salt=S" or "all"
	pins                  []engine.PinInfo
}

func (f *fakeCacheAdmin) Pins() []engine.PinInfo { return f.pins }

func (f *fakeCacheAdmin) Unpin(match func(engine.PinInfo) bool) int {
	kept, n := f.pins[:0:0], 0
	for _, p := range f.pins {
		if match(p) {
			n++
			continue
		}
		kept = append(kept, p)
	}
	f.pins = kept
	return n
}

func (f *fakeCacheAdmin) Root(salt string) prefix.Hash { return prefix.Root([]byte("id"), salt) }

func (f *fakeCacheAdmin) Prewarm(_ context.Context, req *engine.Request) (engine.Usage, error) {
	f.prewarmed = append(f.prewarmed, *req)
	n := len(req.Prompt)
	u := engine.Usage{PromptTokens: n, DeviceTokens: n / 2, ComputedTokens: n - n/2}
	for _, p := range req.Pins {
		u.Pins = append(u.Pins, engine.PinResult{TTL: p.TTL, Requested: p.Tokens, Pinned: p.Tokens / f.blockSize * f.blockSize})
	}
	return u, nil
}

func (f *fakeCacheAdmin) Residency(limit int) engine.Residency {
	f.limit = limit
	p := engine.CachedPrefix{Root: prefix.Hash{1}, Hash: prefix.Hash{2}, Depth: 1, Tokens: 64, Bytes: 2048, Hits: 3}
	return engine.Residency{
		Pool:  engine.PoolResidency{Blocks: f.poolBlocks, Used: 1, Cached: 2, Free: f.poolBlocks - 3, BlockBytes: 1024, BlockSize: f.blockSize},
		Roots: []engine.RootResidency{{Root: prefix.Hash{1}, Blocks: 3}}, ByHits: []engine.CachedPrefix{p}, ByBytes: []engine.CachedPrefix{p},
	}
}

func (f *fakeCacheAdmin) DropCache(salt string, all bool) engine.Dropped {
	if all {
		f.drops = append(f.drops, "all")
		return engine.Dropped{Blocks: 5, Busy: 1}
	}
	f.drops = append(f.drops, "salt="+salt)
	return engine.Dropped{Root: prefix.Root([]byte("id"), salt), Blocks: 2}
}

func (f *fakeCacheAdmin) PoolFits(n int) error {
	if need := (n + 1 + f.blockSize - 1) / f.blockSize; need > f.poolBlocks {
		return fmt.Errorf("%w: %d tokens need %d blocks, the pool holds %d", engine.ErrPromptTooLong, n, need, f.poolBlocks)
	}
	return nil
}

func newAdminServer(t *testing.T, mod func(*Config)) (*Server, *fakeCacheAdmin, *[]prefix.Hash) {
	s, fa, drops := newAdminServerTiers(t, mod)
	return s, fa, &drops.roots
}

// tierDrops records the lower-tier drops the server asked for.
type tierDrops struct {
	roots []prefix.Hash
	only  [][]kvtier.Tier // each call's tier filter (nil: every tier)
}

func newAdminServerTiers(t *testing.T, mod func(*Config)) (*Server, *fakeCacheAdmin, *tierDrops) {
	t.Helper()
	fa := &fakeCacheAdmin{poolBlocks: 4, blockSize: 16}
	drops := &tierDrops{}
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) {
		c.AdminKeys, c.APIKeys, c.CacheAdmin, c.BlockSize = []string{"adm"}, []string{"api"}, fa, 16
		c.TierStats = func() []kvtier.Stat {
			return []kvtier.Stat{{Tier: kvtier.Host, UsedBytes: 4096, CapacityBytes: 1 << 20, Items: 4, Evictions: 7}}
		}
		c.TierDrop = func(_ context.Context, root prefix.Hash, only ...kvtier.Tier) (kvtier.Counts, error) {
			drops.roots = append(drops.roots, root)
			drops.only = append(drops.only, only)
			var c kvtier.Counts
			if len(only) == 0 || slices.Contains(only, kvtier.Host) {
				c[kvtier.Host] = 3
			}
			return c, errors.Join(errors.New("remote tier: down"))
		}
		if mod != nil {
			mod(c)
		}
	})
	return s, fa, drops
}

const adminAuth = "Bearer adm"

// TestCacheAdminAuth: 403 without an admin key configured and for the API key, 401 with none
// or a wrong one; the admin key works without the API key.
func TestCacheAdminAuth(t *testing.T) {
	off, _, _ := newAdminServer(t, func(c *Config) { c.AdminKeys = nil })
	on, _, _ := newAdminServer(t, nil)
	for _, c := range []struct {
		s      *Server
		auth   string
		status int
	}{
		{off, "Bearer api", http.StatusForbidden},
		{off, "", http.StatusForbidden},
		{on, "", http.StatusUnauthorized},
		{on, "Bearer wrong", http.StatusUnauthorized},
		{on, "Bearer api", http.StatusForbidden},
		{on, adminAuth, http.StatusOK},
	} {
		for _, r := range [][2]string{{"GET", "/v1/cache"}, {"POST", "/v1/cache/prewarm"}, {"DELETE", "/v1/cache?all=1"}} {
			var hdr []string
			if c.auth != "" {
				hdr = []string{"Authorization", c.auth}
			}
			rec := do(c.s.Handler(), r[0], r[1], `{"prompt":"hi"}`, hdr...)
			if rec.Code != c.status {
				t.Errorf("%s %s with %q: HTTP %d, want %d (%s)", r[0], r[1], c.auth, rec.Code, c.status, rec.Body)
			}
			if c.status != 200 {
				if e := decode[api.ErrorBody](t, rec); e.Error.Message == "" {
					t.Errorf("%s %s: no OpenAI error body: %s", r[0], r[1], rec.Body)
				}
			}
		}
	}
	if rec := do(on.Handler(), "GET", "/v1/cache", "", "x-api-key", "adm"); rec.Code != 200 {
		t.Errorf("x-api-key admin: HTTP %d", rec.Code)
	}
	noEngine, _, _ := newAdminServer(t, func(c *Config) { c.CacheAdmin = nil })
	if rec := do(noEngine.Handler(), "GET", "/v1/cache", "", "Authorization", adminAuth); rec.Code != http.StatusNotImplemented {
		t.Errorf("without an engine admin: HTTP %d, want 501", rec.Code)
	}
}

func TestPrewarmEndpoint(t *testing.T) {
	s, fa, _ := newAdminServer(t, func(c *Config) { c.ContextLength = 200 })
	rec := do(s.Handler(), "POST", "/v1/cache/prewarm", `{"prompt":"abcdefghij","cache_salt":"t1","pin":{"ttl":"1h"}}`, "Authorization", adminAuth)
	if rec.Code != 200 {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	got := decode[PrewarmResponse](t, rec)
	if want := (PrewarmResponse{Object: "cache.prewarm", PromptTokens: 11, CachedTokens: 5, ComputedTokens: 6, Blocks: 0}); got != want {
		t.Errorf("response %+v, want %+v", got, want)
	}
	if r := fa.prewarmed[0]; len(r.Prompt) != 11 || r.Prompt[0] != fakeBOS || r.CacheSalt != "t1" {
		t.Errorf("engine request %+v: want BOS + 10 tokens under salt t1", r)
	}
	// Messages with tools, rendered by the template without the generation prompt.
	fa.poolBlocks = 100
	rec = do(s.Handler(), "POST", "/v1/cache/prewarm", `{"messages":[{"role":"system","content":"sys"}],"tools":[{"type":"function","function":{"name":"f"}}]}`, "Authorization", adminAuth)
	if rec.Code != 200 {
		t.Fatalf("messages: HTTP %d %s", rec.Code, rec.Body)
	}
	want := fakeTok{}.Encode("<s><|tool|>", false, true)
	if p := fa.prewarmed[1].Prompt; !slices.Equal(p[:len(want)], want) || strings.HasSuffix(fakeTok{}.Decode(p), "<|assistant|>") {
		t.Errorf("rendered prompt %q", fakeTok{}.Decode(p))
	}
	fa.poolBlocks = 4 // 63 tokens and the generated position
	// A token prompt as given.
	if rec := do(s.Handler(), "POST", "/v1/cache/prewarm", `{"prompt":[5,6,7]}`, "Authorization", adminAuth); rec.Code != 200 || !slices.Equal(fa.prewarmed[2].Prompt, []int32{5, 6, 7}) {
		t.Errorf("token prompt: HTTP %d, %v", rec.Code, fa.prewarmed[2].Prompt)
	}
	for _, c := range []struct{ body, want string }{
		{`{"prompt":"` + strings.Repeat("a", 199) + `"}`, "prewarm larger than the context"},
		{`{"prompt":"` + strings.Repeat("a", 250) + `"}`, "prewarm larger than the context"},
		{`{"prompt":[` + strings.TrimSuffix(strings.Repeat("5,", 200), ",") + `]}`, "prewarm larger than the context"},
		{`{"prompt":"` + strings.Repeat("a", 70) + `"}`, "prewarm larger than the pool"},
		{`{"prompt":[300]}`, "vocabulary"},
		{`{"prompt":"x","pin":{"ttl":"2h"}}`, "unknown pin.ttl"},
		{`{"model":"other","prompt":"x"}`, "other"},
		{`{}`, "prompt"},
		{`[`, "JSON"},
	} {
		rec := do(s.Handler(), "POST", "/v1/cache/prewarm", c.body, "Authorization", adminAuth)
		if rec.Code/100 != 4 || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("%.40s: HTTP %d %s, want a 4xx saying %q", c.body, rec.Code, rec.Body, c.want)
		}
	}
	if len(fa.prewarmed) != 3 {
		t.Errorf("%d prewarms reached the engine, want 3", len(fa.prewarmed))
	}
}

func TestCacheGetEndpoint(t *testing.T) {
	s, fa, _ := newAdminServer(t, nil)
	rec := do(s.Handler(), "GET", "/v1/cache?limit=7", "", "Authorization", adminAuth)
	if rec.Code != 200 {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	got := decode[CacheResponse](t, rec)
	if fa.limit != 7 || got.Limit != 7 || got.BlockSize != 16 {
		t.Errorf("limit %d/%d, block size %d", fa.limit, got.Limit, got.BlockSize)
	}
	if len(got.Tiers) != 2 || got.Tiers[0].Tier != "device" || got.Tiers[0].Blocks != 3 || got.Tiers[0].Bytes != 3*1024 ||
		got.Tiers[0].CapacityBytes != 4*1024 || *got.Tiers[0].FreeBlocks != 1 {
		t.Errorf("device tier %+v", got.Tiers)
	}
	if h := got.Tiers[1]; h.Tier != "host" || h.Blocks != 4 || h.Bytes != 4096 || h.CapacityBytes != 1<<20 || *h.Evictions != 7 {
		t.Errorf("host tier %+v", h)
	}
	if len(got.Top.ByHits) != 1 || got.Top.ByHits[0].Hits != 3 || got.Top.ByHits[0].Tokens != 64 || len(got.Top.ByHits[0].Hash) != 64 {
		t.Errorf("by hits %+v", got.Top.ByHits)
	}
	if got.Pins == nil || !strings.Contains(rec.Body.String(), `"pins":[]`) {
		t.Errorf("pins must be present (empty): %s", rec.Body)
	}
	if rec := do(s.Handler(), "GET", "/v1/cache", "", "Authorization", adminAuth); rec.Code != 200 || fa.limit != defaultCacheLimit {
		t.Errorf("default limit: HTTP %d, limit %d", rec.Code, fa.limit)
	}
	for _, l := range []string{"0", "-1", "x", "1001"} {
		if rec := do(s.Handler(), "GET", "/v1/cache?limit="+l, "", "Authorization", adminAuth); rec.Code != 400 {
			t.Errorf("limit=%s: HTTP %d, want 400", l, rec.Code)
		}
	}
}

func TestCacheDeleteEndpoint(t *testing.T) {
	s, fa, tierDrops := newAdminServer(t, nil)
	rec := do(s.Handler(), "DELETE", "/v1/cache?salt=t1", "", "Authorization", adminAuth)
	if rec.Code != 200 {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	got := decode[CacheDropResponse](t, rec)
	if got.DroppedBlocks != 2 || got.BusyBlocks != 0 || got.Tiers["host"] != 3 || len(got.TierErrors) != 1 {
		t.Errorf("drop by salt: %+v", got)
	}
	if (*tierDrops)[0] != prefix.Root([]byte("id"), "t1") {
		t.Error("the tiers were not dropped under the salt's root")
	}
	rec = do(s.Handler(), "DELETE", "/v1/cache?all=1", "", "Authorization", adminAuth)
	if got := decode[CacheDropResponse](t, rec); rec.Code != 200 || got.DroppedBlocks != 5 || got.BusyBlocks != 1 || (*tierDrops)[1] != (prefix.Hash{}) {
		t.Errorf("drop all: HTTP %d %+v", rec.Code, got)
	}
	if !slices.Equal(fa.drops, []string{"salt=t1", "all"}) {
		t.Errorf("engine drops %v", fa.drops)
	}
	for _, c := range []struct {
		q      string
		status int
	}{
		{"", 400}, {"?salt=a&all=1", 400}, {"?all=0", 400}, {"?salt=" + strings.Repeat("s", 300), 400}, {"?pin=p1", 400}, {"?pin=" + strings.Repeat("ab", 32), 404},
	} {
		if rec := do(s.Handler(), "DELETE", "/v1/cache"+c.q, "", "Authorization", adminAuth); rec.Code != c.status {
			t.Errorf("DELETE /v1/cache%.30s: HTTP %d, want %d", c.q, rec.Code, c.status)
		}
	}
	if len(fa.drops) != 2 {
		t.Errorf("bad drops reached the engine: %v", fa.drops)
	}
}

// TestCacheDeleteOneTier: ?tier=device drops the working pool alone (unpinning it, the lower
// tiers untouched), ?tier=host that lower tier alone (the pool and its pins untouched), with
// ?all=1 or ?salt=S; an unknown tier name, a tier the server lacks and ?tier= with ?pin= are
// 400s in the API's error shape that reach neither the engine nor the tiers.
func TestCacheDeleteOneTier(t *testing.T) {
	s, fa, drops := newAdminServerTiers(t, nil)
	fa.pins = []engine.PinInfo{{Root: prefix.Hash{9}, Hash: prefix.Hash{10}}}

	rec := do(s.Handler(), "DELETE", "/v1/cache?all=1&tier=host", "", "Authorization", adminAuth)
	got := decode[CacheDropResponse](t, rec)
	if rec.Code != 200 || got.Tier != "host" || got.DroppedBlocks != 0 || got.UnpinnedBlocks != 0 || got.Tiers["host"] != 3 {
		t.Errorf("drop host: HTTP %d %+v", rec.Code, got)
	}
	if len(fa.drops) != 0 || len(fa.pins) != 1 {
		t.Errorf("a host drop touched the pool: drops %v, pins %v", fa.drops, fa.pins)
	}
	if len(drops.only) != 1 || !slices.Equal(drops.only[0], []kvtier.Tier{kvtier.Host}) || drops.roots[0] != (prefix.Hash{}) {
		t.Errorf("tier drops %v under %v, want [host] under the zero root", drops.only, drops.roots)
	}

	rec = do(s.Handler(), "DELETE", "/v1/cache?all=1&tier=device", "", "Authorization", adminAuth)
	got = decode[CacheDropResponse](t, rec)
	if rec.Code != 200 || got.Tier != "device" || got.DroppedBlocks != 5 || got.UnpinnedBlocks != 1 || len(got.Tiers) != 0 {
		t.Errorf("drop device: HTTP %d %+v", rec.Code, got)
	}
	if !slices.Equal(fa.drops, []string{"all"}) || len(drops.only) != 1 {
		t.Errorf("a device drop: engine drops %v, tier drops %v (want the pool only)", fa.drops, drops.only)
	}

	rec = do(s.Handler(), "DELETE", "/v1/cache?salt=t1&tier=host", "", "Authorization", adminAuth)
	if got := decode[CacheDropResponse](t, rec); rec.Code != 200 || got.Tiers["host"] != 3 || drops.roots[1] != prefix.Root([]byte("id"), "t1") {
		t.Errorf("drop a salt's host blocks: HTTP %d %+v, root %x", rec.Code, got, drops.roots[1])
	}

	// Without tier= the pool and every lower tier go, as before.
	rec = do(s.Handler(), "DELETE", "/v1/cache?all=1", "", "Authorization", adminAuth)
	if got := decode[CacheDropResponse](t, rec); rec.Code != 200 || got.Tier != "" || got.DroppedBlocks != 5 || got.Tiers["host"] != 3 || drops.only[2] != nil {
		t.Errorf("drop all: HTTP %d %+v, filter %v", rec.Code, got, drops.only[2])
	}

	before, beforeTiers := len(fa.drops), len(drops.only)
	for _, c := range []struct{ q, want string }{
		{"?all=1&tier=gpu", `tier must be one of device, host, disk and remote, got \"gpu\"`},
		{"?all=1&tier=", `got \"\"`},
		{"?all=1&tier=disk", "this server has no disk tier (it has device, host)"},
		{"?pin=" + strings.Repeat("ab", 32) + "&tier=host", "not ?pin=ID"},
	} {
		rec := do(s.Handler(), "DELETE", "/v1/cache"+c.q, "", "Authorization", adminAuth)
		body := rec.Body.String()
		if rec.Code != 400 || !strings.Contains(body, c.want) || !strings.Contains(body, `"param":"tier"`) || !strings.Contains(body, `"type":"invalid_request_error"`) {
			t.Errorf("DELETE /v1/cache%s: HTTP %d %s, want 400 with %s", c.q, rec.Code, body, c.want)
		}
	}
	if len(fa.drops) != before || len(drops.only) != beforeTiers {
		t.Errorf("a refused drop reached the engine or the tiers: %v %v", fa.drops, drops.only)
	}

	// A server without lower tiers knows only the device.
	bare, fb, _ := newAdminServerTiers(t, func(c *Config) { c.TierStats, c.TierDrop = nil, nil })
	if rec := do(bare.Handler(), "DELETE", "/v1/cache?all=1&tier=host", "", "Authorization", adminAuth); rec.Code != 400 || !strings.Contains(rec.Body.String(), "(it has device)") {
		t.Errorf("host drop without tiers: HTTP %d %s", rec.Code, rec.Body)
	}
	if rec := do(bare.Handler(), "DELETE", "/v1/cache?all=1&tier=device", "", "Authorization", adminAuth); rec.Code != 200 || !slices.Equal(fb.drops, []string{"all"}) {
		t.Errorf("device drop without tiers: HTTP %d %s, drops %v", rec.Code, rec.Body, fb.drops)
	}
}
