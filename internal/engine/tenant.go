package engine

import (
	"fmt"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
)

// Tenants in the engine: the engine never authenticates anyone; the server derives each
// request's CacheSalt from its tenant (package tenant), so tenants' chains have different
// roots and share no block. Two things need more than the salt:
//
//   - Public prefixes. An operator marks blocks public (MarkPublic: blocks under the public
//     root, computed by a prewarm with the public salt). A request with PublicReads whose first
//     block is public is chained under the public root for as long as its blocks are public;
//     the first block that is not is hashed with its own root's bytes as the chain's extra
//     input (prefix.Chain's extra), so the chain continues in the tenant's namespace from
//     there: its parent is the last public block (an indexed block, so the prefix cache's tree
//     stays whole), but its hash, and every hash after it, depends on the tenant's root. A
//     tenant without PublicReads never takes the public root.
//   - Cache quotas. The blocks a request commits first are tagged with its tenant's owner
//     number (Request.Owner) in the prefix cache, whose eviction takes the blocks of an owner
//     over its limit (Request.DeviceQuotaBytes) first (prefix/quota.go); the tag goes down
//     with evicted blocks (prefix.Event.Owner), for the host tier's own per-owner budget.
//   - The audit. Each committed block remembers the tenant (Request.Tenant) of the request
//     that committed it first; a request reusing a block another tenant committed counts its
//     tokens in Usage.CrossTenantTokens. It is computed from who committed what, not from the
//     hashes, so it checks the isolation the hashes are meant to give: only public blocks may
//     ever be counted there.

// confineDivergence keeps a tenant's miss report (cache_report) to what is its own. The
// prefix cache explains a miss from the whole index: "cached under another root" would tell a
// tenant that another holds its guess of a prompt, and below a public prefix the children of a
// public block are every tenant's private continuations, whose tokens a "diverged" report
// would quote. So for a tenant, another root reads as new content, and a divergence at or
// inside a public prefix as new content at the block, with no cached tokens. Deeper in the
// tenant's own chain every child is its own, and the report is left whole.
func (c *Core) confineDivergence(s *seq, d prefix.Divergence) prefix.Divergence {
	if s.req.Tenant == "" {
		return d
	}
	switch {
	case d.Kind == prefix.DivergeOtherRoot,
		d.Kind == prefix.Diverged && s.root == c.publicRoot && !c.publicRoot.IsZero() && d.Block <= s.public:
		d.Kind, d.Cached, d.Offset = prefix.DivergeNoChild, nil, d.Block*c.cfg.BlockSize
	}
	return d
}

// MarkPublic records hashes, blocks chained from root (the public namespace's root), as
// public. Every call must give the same root.
func (c *Core) MarkPublic(root prefix.Hash, hashes []prefix.Hash) error {
	if !c.publicRoot.IsZero() && c.publicRoot != root {
		return fmt.Errorf("%w: public blocks under root %s, already %s", ErrInvalid, root.Short(), c.publicRoot.Short())
	}
	c.publicRoot = root
	if c.public == nil {
		c.public = map[prefix.Hash]struct{}{}
	}
	for _, h := range hashes {
		c.public[h] = struct{}{}
	}
	return nil
}

// PublicBlocks is how many blocks are marked public.
func (c *Core) PublicBlocks() int { return len(c.public) }

// splitChain decides the chain of a request whose own root is root: with PublicReads and a
// prompt whose first full block is public, the public root, the number of leading public
// blocks and the mark (root's bytes) that the first private block is hashed with; otherwise
// root, 0 and no mark.
func (c *Core) splitChain(req *Request, root prefix.Hash) (prefix.Hash, int, []byte) {
	if !req.PublicReads || len(c.public) == 0 || !c.cfg.PrefixCache {
		return root, 0, nil
	}
	B := c.cfg.BlockSize
	parent, n := c.publicRoot, 0
	for (n+1)*B <= len(req.Prompt) {
		h := prefix.Chain(parent, req.Prompt[n*B:(n+1)*B], nil)
		if _, ok := c.public[h]; !ok {
			break
		}
		parent, n = h, n+1
	}
	if n == 0 {
		return root, 0, nil
	}
	mark := root
	return c.publicRoot, n, mark[:]
}

// blockHash is the chain hash of s's block bi, whose parent is parent: the mark goes into
// the first block after a public prefix.
func (s *seq) blockHash(parent prefix.Hash, bi int, tokens []int32) prefix.Hash {
	if s.mark != nil && bi == s.public {
		return prefix.Chain(parent, tokens, s.mark)
	}
	return prefix.Chain(parent, tokens, nil)
}

// seqHashes returns the chain hashes of every full block of tokens in s's chain.
func (c *Core) seqHashes(s *seq, tokens []int32) []prefix.Hash {
	return c.appendSeqHashes(nil, s, tokens)
}

// appendSeqHashes appends seqHashes(s, tokens) to out.
func (c *Core) appendSeqHashes(out []prefix.Hash, s *seq, tokens []int32) []prefix.Hash {
	B := c.cfg.BlockSize
	if s.mark == nil {
		return prefix.AppendBlockHashes(out, s.root, tokens, B)
	}
	parent := s.root
	for bi := 0; (bi+1)*B <= len(tokens); bi++ {
		h := s.blockHash(parent, bi, tokens[bi*B:(bi+1)*B])
		out = append(out, h)
		parent = h
	}
	return out
}

// noteOwner records that s committed block b first (the audit's owner).
func (c *Core) noteOwner(s *seq, b kvcache.BlockID) {
	if s.req.Tenant == "" {
		delete(c.owners, b) // a no-op on a nil map
		return
	}
	if c.owners == nil {
		c.owners = map[kvcache.BlockID]string{}
	}
	c.owners[b] = s.req.Tenant
	if s.req.Owner != 0 {
		limit := 0
		if q := s.req.DeviceQuotaBytes; q > 0 && c.cfg.BlockBytes > 0 {
			limit = max(1, int(q/c.cfg.BlockBytes))
		}
		c.cache.setOwner(b, s.req.Owner, limit)
	}
}

// crossTenantTokens counts the tokens of blocks (reused by s) that another tenant committed.
func (c *Core) crossTenantTokens(s *seq, blocks []kvcache.BlockID) int {
	if s.req.Tenant == "" || c.owners == nil {
		return 0
	}
	n := 0
	for _, b := range blocks {
		if o, ok := c.owners[b]; ok && o != s.req.Tenant {
			n += c.cfg.BlockSize
		}
	}
	return n
}
