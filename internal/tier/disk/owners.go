package disk

import "stockpot/internal/tier"

// Per-owner budgets (tier.OwnerLimiter): a tenant's cache_bytes for the disk tier. Entries
// remember the owner of the block they were written for (tier.Item.Owner); while an owner
// holds more bytes than its limit, eviction takes that owner's least recently used entry of
// the classes it may take from (shadowed copies, then sole copies when the Put allows), before
// the class's own least recently used. Pins are never evicted, as always. Owners are not
// written to disk: after a restart the blocks found have no owner (they count for nobody
// until rewritten), so a budget bounds what a tenant writes from then on.

var _ tier.OwnerLimiter = (*Store)(nil) // through the embedded tier.Guarded

// overOwnerVictimLocked returns the least recently used entry of an owner over its limit in
// the shadowed list, then (when sole allows) in the sole list; def when there is none.
// REQUIRES: s.mu held.
func (s *Store) overOwnerVictimLocked(sole bool, def *entry) *entry {
	if n := s.mu.shadowed.Oldest(s.overOwner); n != nil {
		return n.Value
	}
	if sole {
		if n := s.mu.sole.Oldest(s.overOwner); n != nil {
			return n.Value
		}
	}
	return def
}

// overOwner reports whether e's owner is over its limit (no owner has none).
// REQUIRES: s.mu held.
func (s *Store) overOwner(e *entry) bool { return s.mu.owners.Over(e.owner) }
