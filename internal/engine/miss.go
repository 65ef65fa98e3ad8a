package engine

import (
	"stockpot/internal/miss"
	"stockpot/internal/prefix"
)

// diverger is the optional ability of a blockCache to say where a prompt left the cached
// chains (the adapter over *prefix.Cache has it; test fakes need not).
type diverger interface {
	diverge(root prefix.Hash, hashes []prefix.Hash, tokens []int32, matched int) prefix.Divergence
}

func (a cacheAdapter) diverge(root prefix.Hash, hashes []prefix.Hash, tokens []int32, matched int) prefix.Divergence {
	return a.c.Diverge(root, hashes, tokens, matched, miss.MaxCachedTokens)
}

// missEvidence is the miss of s at its first admission, which reused `reused` blocks (device
// hits and restored blocks): nil when it reused all it could, or without a prefix cache. It
// reads the hashes the match computed, no more of the prompt.
func (c *Core) missEvidence(s *seq, reused int) *miss.Evidence {
	d, ok := c.cache.(diverger)
	if !ok || !c.cfg.PrefixCache || len(s.hashes) != s.prompt/c.cfg.BlockSize {
		return nil
	}
	return miss.FromDivergence(c.confineDivergence(s, d.diverge(s.root, s.hashes, s.tokens[:s.prompt], reused)), c.cfg.BlockSize)
}
