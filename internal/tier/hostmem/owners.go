package hostmem

// Per-owner budgets (tier.OwnerLimiter): a tenant's cache_bytes for the host tier. Each entry
// remembers the owner of the block (tier.Item.Owner, the tenant whose request committed it);
// while an owner holds more bytes than its limit, making room evicts that owner's least
// recently used unpinned entry first, and only then the store's least recently used. Pinned
// entries are never evicted, as always.
//
// Why a scan from the LRU's back: it runs only while some owner is over its limit, and stops
// at that owner's oldest entry; a list per owner would cost every Get and Put of every owner
// to speed up the rare case.

// victimLocked is the unpinned entry to evict next: the least recently used of an owner over
// its limit, else the least recently used.
// REQUIRES: s.mu held; the LRU list not empty.
func (s *Store) victimLocked() *entry {
	back := s.mu.lru.Back()
	if !s.mu.owners.AnyOver() {
		return back.Value
	}
	if n := s.mu.lru.Oldest(func(e *entry) bool { return s.mu.owners.Over(e.owner) }); n != nil {
		return n.Value
	}
	return back.Value
}
