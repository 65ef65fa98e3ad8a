package offload

import (
	"testing"

	"stockpot/internal/prefix"
)

// TestWantsBlockData: the tiers ask the engine for a block's bytes (and so its checkpoint's
// encoding) exactly for the events BlockEvents writes down: an eviction, a computed block's
// commit under write-through (or selective with no reuse required), the reuse that qualifies
// a block under selective, and never a restored block, a removal, or a block past the cap.
func TestWantsBlockData(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		ev   prefix.Event
		want bool
	}{
		{"evicted", func(*Config) {}, prefix.Event{Kind: prefix.Evicted}, true},
		{"stored/through", func(c *Config) { c.RemoteWrite = WriteThrough }, prefix.Event{Kind: prefix.Stored}, true},
		{"stored/back", func(c *Config) { c.RemoteWrite = WriteBack }, prefix.Event{Kind: prefix.Stored}, false},
		{"stored/selective", func(c *Config) { c.RemoteWrite, c.Admission.MinHits = WriteSelective, 0 }, prefix.Event{Kind: prefix.Stored}, true},
		{"stored/selective/hits", func(c *Config) { c.RemoteWrite, c.Admission.MinHits = WriteSelective, 2 }, prefix.Event{Kind: prefix.Stored}, false},
		{"reused/qualifies", func(c *Config) { c.RemoteWrite, c.Admission.MinHits = WriteSelective, 2 }, prefix.Event{Kind: prefix.Reused, Hits: 2}, true},
		{"reused/again", func(c *Config) { c.RemoteWrite, c.Admission.MinHits = WriteSelective, 2 }, prefix.Event{Kind: prefix.Reused, Hits: 3}, false},
		{"stored/restored", func(c *Config) { c.RemoteWrite = WriteThrough }, prefix.Event{Kind: prefix.Stored, Restored: true}, false},
		{"removed", func(*Config) {}, prefix.Event{Kind: prefix.Removed}, false},
		{"evicted/no-offload", func(*Config) {}, prefix.Event{Kind: prefix.Evicted, NoOffload: true}, false},
		{"evicted/past-cap", func(c *Config) { c.MaxOffloadTokens = 4 * c.Layout.BlockSize }, prefix.Event{Kind: prefix.Evicted, Depth: 4}, false},
		{"evicted/within-cap", func(c *Config) { c.MaxOffloadTokens = 4 * c.Layout.BlockSize }, prefix.Event{Kind: prefix.Evicted, Depth: 3}, true},
	} {
		ts := newTestTiers(t, nil, tc.mod)
		if got := ts.WantsBlockData(tc.ev); got != tc.want {
			t.Errorf("%s: WantsBlockData = %v, want %v", tc.name, got, tc.want)
		}
	}
}
