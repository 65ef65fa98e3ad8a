package server

import (
	"context"
	"encoding/hex"
	"net/http"
	"slices"
	"time"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// TierPin is one pin a lower tier holds (Config.TierPins): a block, not a chain, since the
// tiers keep no parent links.
type TierPin struct {
	Tier    kvtier.Tier
	Root    prefix.Hash
	Hash    prefix.Hash
	TTL     time.Duration
	Expires time.Time
}

// pinChain is one pinned prefix of the working pool: the run of pinned blocks from the start
// of a prompt (Head, depth 0) to a pinned block no other pinned block extends (Leaf).
type pinChain struct {
	Root, Head, Leaf prefix.Hash
	Blocks, Tokens   int
	TTL              time.Duration
	Expires          time.Time // the earliest expiry along the chain: when it first gets shorter
	hashes           []prefix.Hash
}

// pinChains groups the pool's pinned blocks (engine.Pins: each pinned block, parents pinned
// whenever a child is) into chains, one per leaf, deepest first. A block shared by several
// chains (a pinned system prompt with pinned branches) is in each.
func pinChains(pins []engine.PinInfo) []pinChain {
	byHash := make(map[prefix.Hash]engine.PinInfo, len(pins))
	extended := make(map[prefix.Hash]bool, len(pins))
	for _, p := range pins {
		byHash[p.Hash] = p
	}
	for _, p := range pins {
		if _, ok := byHash[p.Parent]; ok && p.Depth > 0 {
			extended[p.Parent] = true
		}
	}
	var out []pinChain
	for _, leaf := range pins {
		if extended[leaf.Hash] {
			continue
		}
		c := pinChain{Root: leaf.Root, Leaf: leaf.Hash, Tokens: leaf.PrefixTokens, TTL: leaf.TTL, Expires: leaf.Expires}
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
	slices.SortFunc(out, func(a, b pinChain) int {
		if a.Tokens != b.Tokens {
			return b.Tokens - a.Tokens
		}
		return slices.Compare(a.Leaf[:], b.Leaf[:])
	})
	return out
}

// unpinSet is what DELETE /v1/cache?pin=ID unpins for the pinned block id: the chain ending at
// id, up to (not including) the first block another pinned chain still needs; for a block in
// the middle of a chain, that block and everything pinned after it (engine.Unpin's rule).
func unpinSet(pins []engine.PinInfo, id prefix.Hash) []prefix.Hash {
	byHash := make(map[prefix.Hash]engine.PinInfo, len(pins))
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
		return out // a block inside chains: it and what is below (engine.Unpin)
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

// cachePins fills GET /v1/cache's pins: the pool's pinned chains, then the lower tiers' pinned
// blocks, at most limit rows of each.
func (s *Server) cachePins(limit int) []CachePin {
	out := []CachePin{}
	for i, c := range pinChains(s.cfg.CacheAdmin.Pins()) {
		if i == limit {
			break
		}
		out = append(out, CachePin{ID: hex.EncodeToString(c.Leaf[:]), Tier: kvtier.Device.String(), Root: hex.EncodeToString(c.Root[:]),
			Head: hex.EncodeToString(c.Head[:]), Blocks: c.Blocks, Tokens: c.Tokens, TTL: c.TTL.Seconds(), Expires: c.Expires})
	}
	if s.cfg.TierPins == nil {
		return out
	}
	n := 0
	for _, p := range s.cfg.TierPins() {
		if n == limit {
			break
		}
		n++
		out = append(out, CachePin{ID: hex.EncodeToString(p.Hash[:]), Tier: p.Tier.String(), Root: hex.EncodeToString(p.Root[:]),
			Blocks: 1, TTL: p.TTL.Seconds(), Expires: p.Expires})
	}
	return out
}

// CacheUnpinResponse is the answer of DELETE /v1/cache?pin=ID.
type CacheUnpinResponse struct {
	Object         string   `json:"object"` // "cache.unpinned"
	Pin            string   `json:"pin"`
	UnpinnedBlocks int      `json:"unpinned_blocks"` // in the working pool (the tiers follow, off the request path)
	TierUnpinned   int      `json:"tier_unpinned"`   // pinned blocks unpinned in the lower tiers now
	TierErrors     []string `json:"tier_errors,omitempty"`
}

// handleUnpin serves DELETE /v1/cache?pin=ID: the pinned chain ending at block ID (a pin's id
// from GET /v1/cache) becomes ordinary cached blocks, evicted as any other, in the pool and
// the tiers. 404 when no tier has a pin on ID.
func (s *Server) handleUnpin(w http.ResponseWriter, r *http.Request, id string) {
	var h prefix.Hash
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != len(h) {
		writeError(w, api.Invalid("pin", "pin must be a pin id from GET /v1/cache (%d hex digits), got %s", 2*len(h), api.Quote(id)))
		return
	}
	copy(h[:], b)
	set := unpinSet(s.cfg.CacheAdmin.Pins(), h)
	out := CacheUnpinResponse{Object: "cache.unpinned", Pin: id}
	if len(set) > 0 {
		want := make(map[prefix.Hash]bool, len(set))
		for _, x := range set {
			want[x] = true
		}
		out.UnpinnedBlocks = s.cfg.CacheAdmin.Unpin(func(p engine.PinInfo) bool { return want[p.Hash] })
	} else {
		set = []prefix.Hash{h} // only the tiers may know it (a pin kept across a restart)
	}
	if s.cfg.TierUnpin != nil {
		n, err := s.cfg.TierUnpin(r.Context(), set)
		out.TierUnpinned = n
		if err != nil {
			for _, e := range unjoin(err) {
				out.TierErrors = append(out.TierErrors, e.Error())
			}
		}
	}
	if out.UnpinnedBlocks == 0 && out.TierUnpinned == 0 && len(out.TierErrors) == 0 {
		writeError(w, &api.Error{Status: http.StatusNotFound, Type: api.TypeInvalidRequest, Code: "pin_not_found", Param: "pin",
			Message: "no pin " + id + " in the working pool or the tiers (it may have expired)"})
		return
	}
	s.cfg.Logger.Info("cache unpinned", "pin", id, "blocks", out.UnpinnedBlocks, "tier_blocks", out.TierUnpinned)
	writeJSON(w, http.StatusOK, out)
}

// TierUnpinner is Config.TierUnpin's type: unpin these blocks in every tier that pins.
type TierUnpinner = func(ctx context.Context, hashes []prefix.Hash) (int, error)
