package server

import (
	"context"
	"encoding/hex"
	"net/http"
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

// cachePins fills GET /v1/cache's pins: the pool's pinned chains, then the lower tiers' pinned
// blocks, at most limit rows of each.
func (s *Server) cachePins(limit int) []CachePin {
	out := []CachePin{}
	for i, c := range engine.PinChains(s.cfg.CacheAdmin.Pins()) {
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
	set := engine.UnpinSet(s.cfg.CacheAdmin.Pins(), h)
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
