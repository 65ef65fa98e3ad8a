package tier

import "sync"

// OwnerBudgets is the accounting behind OwnerLimiter, shared by the stores that keep
// per-owner budgets (hostmem, disk): each owner's bytes, its limit, and how many owners are
// over theirs (so a store checks one number on the hot path). Owner 0 (none) is never counted.
// Not safe for concurrent use: the store's mutex protects it.
type OwnerBudgets struct {
	used  map[uint16]int64
	limit map[uint16]int64
	over  int // owners with used > limit
}

// Over reports whether owner holds more than its limit.
func (o *OwnerBudgets) Over(owner uint16) bool {
	l, ok := o.limit[owner]
	return ok && o.used[owner] > l
}

// AnyOver reports whether some owner holds more than its limit.
func (o *OwnerBudgets) AnyOver() bool { return o.over > 0 }

// OverCount is how many owners hold more than their limits.
func (o *OwnerBudgets) OverCount() int { return o.over }

// Used is what owner's items take now.
func (o *OwnerBudgets) Used(owner uint16) int64 { return o.used[owner] }

// Limit is owner's limit (0: none).
func (o *OwnerBudgets) Limit(owner uint16) int64 { return o.limit[owner] }

// Limited reports whether any owner has a limit.
func (o *OwnerBudgets) Limited() bool { return len(o.limit) > 0 }

func (o *OwnerBudgets) track(owner uint16, was bool) {
	switch now := o.Over(owner); {
	case now && !was:
		o.over++
	case !now && was:
		o.over--
	}
}

// Add counts d bytes (negative: taken away) for owner.
func (o *OwnerBudgets) Add(owner uint16, d int64) {
	if owner == 0 {
		return
	}
	if o.used == nil {
		o.used = map[uint16]int64{}
	}
	was := o.Over(owner)
	o.used[owner] += d
	if o.used[owner] == 0 {
		delete(o.used, owner)
	}
	o.track(owner, was)
}

// SetLimit sets owner's limit (bytes <= 0: none).
func (o *OwnerBudgets) SetLimit(owner uint16, bytes int64) {
	if owner == 0 {
		return
	}
	if o.limit == nil {
		o.limit = map[uint16]int64{}
	}
	was := o.Over(owner)
	if bytes <= 0 {
		delete(o.limit, owner)
	} else {
		o.limit[owner] = bytes
	}
	o.track(owner, was)
}

// Guarded is an OwnerBudgets behind the lock of the store that holds it. A store embeds one
// (pointing at its own mutex and budgets) and so implements OwnerLimiter's SetOwnerLimit, and
// its OwnerBytes, once for every store.
type Guarded struct {
	L sync.Locker
	B *OwnerBudgets
}

// SetOwnerLimit implements OwnerLimiter.
func (g Guarded) SetOwnerLimit(owner uint16, bytes int64) {
	g.L.Lock()
	defer g.L.Unlock()
	g.B.SetLimit(owner, bytes)
}

// OwnerBytes is what owner's items take now.
func (g Guarded) OwnerBytes(owner uint16) int64 {
	g.L.Lock()
	defer g.L.Unlock()
	return g.B.Used(owner)
}
