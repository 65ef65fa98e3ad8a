package engine

import (
	"slices"
	"time"

	"stockpot/internal/prefix"
)

// PinChain is one pinned prefix of the working pool: the run of pinned blocks from the start
// of a prompt (Head, depth 0) to a pinned block no other pinned block extends (Leaf).
type PinChain struct {
	Root, Head, Leaf prefix.Hash
	Blocks, Tokens   int
	TTL              time.Duration
	Expires          time.Time     // the earliest expiry along the chain: when it first gets shorter
	hashes           []prefix.Hash // leaf first
}

// PinChains groups the pool's pinned blocks (Engine.Pins: each pinned block, parents pinned
// whenever a child is) into chains, one per leaf, deepest first. A block shared by several
// chains (a pinned system prompt with pinned branches) is in each.
func PinChains(pins []PinInfo) []PinChain {
	byHash := make(map[prefix.Hash]PinInfo, len(pins))
	extended := make(map[prefix.Hash]bool, len(pins))
	for _, p := range pins {
		byHash[p.Hash] = p
	}
	for _, p := range pins {
		if _, ok := byHash[p.Parent]; ok && p.Depth > 0 {
			extended[p.Parent] = true
		}
	}
	var out []PinChain
	for _, leaf := range pins {
		if extended[leaf.Hash] {
			continue
		}
		c := PinChain{Root: leaf.Root, Leaf: leaf.Hash, Tokens: leaf.PrefixTokens, TTL: leaf.TTL, Expires: leaf.Expires}
		for p, ok := leaf, true; ok; p, ok = byHash[p.Parent] {
			c.hashes = append(c.hashes, p.Hash)
			c.Head, c.Blocks = p.Hash, c.Blocks+1
			c.TTL = max(c.TTL, p.TTL)
			if p.Expires.Before(c.Expires) {
				c.Expires = p.Expires
			}
			if p.Depth == 0 {
				break
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b PinChain) int {
		if a.Tokens != b.Tokens {
			return b.Tokens - a.Tokens
		}
		return slices.Compare(a.Leaf[:], b.Leaf[:])
	})
	return out
}

// UnpinSet is what unpinning the pinned block id takes (DELETE /v1/cache?pin=ID): the chain ending at
// id, up to (not including) the first block another pinned chain still needs; for a block in
// the middle of a chain, that block and everything pinned after it (Unpin's rule).
func UnpinSet(pins []PinInfo, id prefix.Hash) []prefix.Hash {
	byHash := make(map[prefix.Hash]PinInfo, len(pins))
	kids := make(map[prefix.Hash]int, len(pins))
	for _, p := range pins {
		byHash[p.Hash] = p
	}
	for _, p := range pins {
		if _, ok := byHash[p.Parent]; ok && p.Depth > 0 {
			kids[p.Parent]++
		}
	}
	p, ok := byHash[id]
	if !ok {
		return nil
	}
	out := []prefix.Hash{id}
	if kids[id] > 0 {
		return out // a block inside chains: it and what is below (Unpin)
	}
	for p.Depth > 0 {
		parent, ok := byHash[p.Parent]
		if !ok || kids[parent.Hash] != 1 {
			break // the rest is shared with another pinned chain
		}
		out, p = append(out, parent.Hash), parent
	}
	return out
}
