package engine

import (
	"slices"
	"testing"
	"time"

	"stockpot/internal/prefix"
)

// pinTree is a pinned system prompt (blocks a, b) with two pinned branches (c; d, e), in the
// shape Engine.Pins reports them (each block with its parent and depth).
func pinTree(now time.Time) []PinInfo {
	root := prefix.Hash{9}
	blk := func(h, parent byte, depth int, ttl time.Duration, exp time.Duration) PinInfo {
		return PinInfo{Root: root, Hash: prefix.Hash{h}, Parent: prefix.Hash{parent}, Depth: depth,
			PrefixTokens: (depth + 1) * 16, TTL: ttl, Expires: now.Add(exp)}
	}
	return []PinInfo{
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

// TestPinChains: one chain per leaf, deepest first, each from depth 0, with the earliest
// expiry and the longest TTL along it.
func TestPinChains(t *testing.T) {
	now := time.Unix(1e9, 0)
	got := PinChains(pinTree(now))
	if len(got) != 2 {
		t.Fatalf("%d chains, want 2: %+v", len(got), got)
	}
	e, c := got[0], got[1]
	if e.Leaf != (prefix.Hash{'e'}) || e.Head != (prefix.Hash{'a'}) || e.Blocks != 4 || e.Tokens != 64 || !e.Expires.Equal(now.Add(40*time.Minute)) || e.TTL != time.Hour {
		t.Errorf("chain to e: %+v", e)
	}
	if c.Leaf != (prefix.Hash{'c'}) || c.Blocks != 3 || c.Tokens != 48 || !c.Expires.Equal(now.Add(5*time.Minute)) {
		t.Errorf("chain to c: %+v", c)
	}
}

// TestUnpinSet: a leaf's id unpins its branch up to the shared part; a shared block's id
// unpins it and everything below (Unpin does the below); an unknown id nothing.
func TestUnpinSet(t *testing.T) {
	pins := pinTree(time.Unix(1e9, 0))
	for _, tc := range []struct {
		id   byte
		want string
	}{{'e', "ed"}, {'c', "c"}, {'d', "d"}, {'b', "b"}, {'z', ""}} {
		if got := UnpinSet(pins, prefix.Hash{tc.id}); !slices.Equal(got, hashes(tc.want)) {
			t.Errorf("unpin %c: %v, want %q", tc.id, got, tc.want)
		}
	}
	// A single chain: its leaf's id unpins all of it.
	lone := append(pins[:2:2], pins[3:]...) // a, b, d, e
	if got := UnpinSet(lone, prefix.Hash{'e'}); !slices.Equal(got, hashes("edba")) {
		t.Errorf("unpin the leaf of a lone chain: %v, want edba", got)
	}
}
