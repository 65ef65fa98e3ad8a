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

// ownerBudgets holds the owners' bytes and limits. Protected by Store.mu.
type ownerBudgets struct {
	used  map[uint16]int64
	limit map[uint16]int64
	over  int // owners with used > limit
}

func (o *ownerBudgets) isOver(owner uint16) bool {
	l, ok := o.limit[owner]
	return ok && o.used[owner] > l
}

func (o *ownerBudgets) track(owner uint16, was bool) {
	switch now := o.isOver(owner); {
	case now && !was:
		o.over++
	case !now && was:
		o.over--
	}
}

// add counts d bytes (negative: taken away) for owner; owner 0 is not tracked.
func (o *ownerBudgets) add(owner uint16, d int64) {
	if owner == 0 {
		return
	}
	if o.used == nil {
		o.used = map[uint16]int64{}
	}
	was := o.isOver(owner)
	o.used[owner] += d
	if o.used[owner] == 0 {
		delete(o.used, owner)
	}
	o.track(owner, was)
}

// SetOwnerLimit implements tier.OwnerLimiter.
func (s *Store) SetOwnerLimit(owner uint16, bytes int64) {
	if owner == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o := &s.mu.owners
	if o.limit == nil {
		o.limit = map[uint16]int64{}
	}
	was := o.isOver(owner)
	if bytes <= 0 {
		delete(o.limit, owner)
	} else {
		o.limit[owner] = bytes
	}
	o.track(owner, was)
}

// OwnerBytes is what owner's entries take now (entry overhead included).
func (s *Store) OwnerBytes(owner uint16) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.owners.used[owner]
}

// victimLocked is the unpinned entry to evict next: the least recently used of an owner over
// its limit, else the least recently used.
// REQUIRES: s.mu held; the LRU list not empty.
func (s *Store) victimLocked() *entry {
	back := s.mu.lru.Back()
	if s.mu.owners.over == 0 {
		return back.Value
	}
	for n := back; n != nil; n = s.mu.lru.Prev(n) {
		if o := n.Value.owner; o != 0 && s.mu.owners.isOver(o) {
			return n.Value
		}
	}
	return back.Value
}
