package server

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/prefix"
)

// pinTree is a pinned system prompt (blocks a, b) with two pinned branches (c; d, e), in the
// shape Engine.Pins reports them (each block with its parent and depth).
func pinTree(now time.Time) []engine.PinInfo {
	root := prefix.Hash{9}
	blk := func(h, parent byte, depth int, ttl time.Duration, exp time.Duration) engine.PinInfo {
		return engine.PinInfo{Root: root, Hash: prefix.Hash{h}, Parent: prefix.Hash{parent}, Depth: depth,
			PrefixTokens: (depth + 1) * 16, TTL: ttl, Expires: now.Add(exp)}
	}
	return []engine.PinInfo{
		blk('a', 9, 0, time.Hour, time.Hour), blk('b', 'a', 1, time.Hour, 50*time.Minute),
		blk('c', 'b', 2, 5*time.Minute, 5*time.Minute),
		blk('d', 'b', 2, time.Hour, time.Hour), blk('e', 'd', 3, time.Hour, 40*time.Minute),
	}
}

func hashes(s string) []prefix.Hash {
	var out []prefix.Hash
	for _, c := range s {
		out = append(out, prefix.Hash{byte(c)})
	}
	return out
}

// TestCacheAdminPins: prewarm passes its pin to the engine and reports what was pinned; GET
// lists the pool's chains and the tiers' pinned blocks; DELETE ?pin= unpins a chain in the pool
// and the same blocks in the tiers (404 for an unknown id, 400 for a malformed one); DELETE
// ?salt= unpins that tenant before dropping it.
func TestCacheAdminPins(t *testing.T) {
	var tierUnpinned [][]prefix.Hash
	s, fa, _ := newAdminServer(t, func(c *Config) {
		c.ContextLength = 1000
		c.TierPins = func() []TierPin {
			return []TierPin{{Tier: 2, Hash: prefix.Hash{'x'}, TTL: time.Hour, Expires: time.Unix(2e9, 0)}}
		}
		c.TierUnpin = func(_ context.Context, hs []prefix.Hash) (int, error) {
			tierUnpinned = append(tierUnpinned, hs)
			if slices.Contains(hs, prefix.Hash{'x'}) {
				return 1, nil
			}
			return 0, nil
		}
	})
	fa.poolBlocks = 100
	rec := do(s.Handler(), "POST", "/v1/cache/prewarm", `{"prompt":"`+strings.Repeat("a", 40)+`","pin":{"ttl":"1h","strict":true}}`, "Authorization", adminAuth)
	if rec.Code != 200 {
		t.Fatalf("prewarm: HTTP %d %s", rec.Code, rec.Body)
	}
	if r := fa.prewarmed[0]; len(r.Pins) != 1 || r.Pins[0].Tokens != 41 || r.Pins[0].TTL != time.Hour || !r.PinStrict {
		t.Errorf("engine request pins %+v strict %v", r.Pins, r.PinStrict)
	}
	if got := decode[PrewarmResponse](t, rec); got.PinnedTokens != 32 {
		t.Errorf("pinned_tokens %d, want 32 (whole blocks of 41 tokens)", got.PinnedTokens)
	}

	fa.pins = pinTree(time.Unix(1e9, 0))
	rec = do(s.Handler(), "GET", "/v1/cache", "", "Authorization", adminAuth)
	got := decode[CacheResponse](t, rec)
	if len(got.Pins) != 3 || got.Pins[0].Tier != "device" || got.Pins[0].ID != (prefix.Hash{'e'}).String() ||
		got.Pins[0].Tokens != 64 || got.Pins[0].Blocks != 4 || got.Pins[2].Tier != "disk" || got.Pins[2].Blocks != 1 {
		t.Errorf("pins %+v", got.Pins)
	}

	id := func(c byte) string { return prefix.Hash{c}.String() }
	rec = do(s.Handler(), "DELETE", "/v1/cache?pin="+id('e'), "", "Authorization", adminAuth)
	un := decode[CacheUnpinResponse](t, rec)
	if rec.Code != 200 || un.UnpinnedBlocks != 2 || len(fa.pins) != 3 || !slices.Equal(tierUnpinned[0], hashes("ed")) {
		t.Errorf("unpin e: HTTP %d %+v, pool left %d, tiers asked %v", rec.Code, un, len(fa.pins), tierUnpinned)
	}
	// Only the tiers know x (kept across a restart): unpinned there.
	if rec := do(s.Handler(), "DELETE", "/v1/cache?pin="+id('x'), "", "Authorization", adminAuth); rec.Code != 200 || decode[CacheUnpinResponse](t, rec).TierUnpinned != 1 {
		t.Errorf("unpin a tier-only pin: HTTP %d %s", rec.Code, rec.Body)
	}
	if rec := do(s.Handler(), "DELETE", "/v1/cache?pin="+id('q'), "", "Authorization", adminAuth); rec.Code != http.StatusNotFound {
		t.Errorf("unknown pin: HTTP %d, want 404", rec.Code)
	}
	if rec := do(s.Handler(), "DELETE", "/v1/cache?pin=zz", "", "Authorization", adminAuth); rec.Code != http.StatusBadRequest {
		t.Errorf("malformed pin id: HTTP %d, want 400", rec.Code)
	}
	// Dropping everything unpins what is left first.
	rec = do(s.Handler(), "DELETE", "/v1/cache?all=1", "", "Authorization", adminAuth)
	if d := decode[CacheDropResponse](t, rec); d.UnpinnedBlocks != 3 || len(fa.pins) != 0 {
		t.Errorf("drop all: %+v, pins left %d", d, len(fa.pins))
	}
}
