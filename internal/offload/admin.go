package offload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// DropRoot deletes every block under root from each tier (tier.AllRoots: every block of this
// identity), for the cache admin's DELETE /v1/cache, and reports how many it deleted per tier.
// only, when given, limits the drop to those tiers (DELETE /v1/cache?tier=disk): the others
// keep their copies, so a benchmark can make the next tier down the first that holds a prefix
// and time a restore from it. A tier named in only that this Tiers lacks is an error
// (ErrNoSuchTier), not a silent no-op: the caller asked to drop something that is not there.
// A store that cannot list its keys (not a tier.Lister) is skipped with an error naming it;
// the other tiers are still dropped. Blocks still queued for write-back when the drop runs may
// land after it: a caller that must see nothing left drops again once the pool is idle.
func (t *Tiers) DropRoot(ctx context.Context, root prefix.Hash, only ...kvtier.Tier) (kvtier.Counts, error) {
	var out kvtier.Counts
	var errs []error
	for _, o := range only {
		if !t.Has(o) {
			errs = append(errs, fmt.Errorf("%w: %s", ErrNoSuchTier, o))
		}
	}
	for _, tr := range t.tiers {
		if len(only) > 0 && !slices.Contains(only, tr.Tier) {
			continue
		}
		l, ok := tr.Store.(tier.Lister)
		if !ok {
			errs = append(errs, fmt.Errorf("%s tier: cannot list its blocks", tr.Tier))
			continue
		}
		keys, err := l.Keys(ctx, root)
		if err == nil && len(keys) > 0 {
			err = tr.Store.Delete(ctx, keys)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s tier: %w", tr.Tier, err))
			continue
		}
		out[tr.Tier] += uint64(len(keys))
	}
	return out, errors.Join(errs...)
}

// ErrNoSuchTier: a drop named a tier this server was not started with.
var ErrNoSuchTier = errors.New("no such tier on this server")

// Has reports whether k is one of the lower tiers this Tiers opened (Device never is: the
// working pool is the engine's).
func (t *Tiers) Has(k kvtier.Tier) bool {
	for _, tr := range t.tiers {
		if tr.Tier == k {
			return true
		}
	}
	return false
}

// TierPin is one pin a lower tier holds (tier.Pinner stores only).
type TierPin struct {
	Tier    kvtier.Tier
	Root    prefix.Hash
	Hash    prefix.Hash
	TTL     time.Duration
	Expires time.Time
}

// Pins lists the unexpired pins of every tier that honours pins, in tier order.
func (t *Tiers) Pins() []TierPin {
	var out []TierPin
	for _, tr := range t.tiers {
		p, ok := tr.Store.(tier.Pinner)
		if !ok {
			continue
		}
		for _, pi := range p.Pins() {
			out = append(out, TierPin{Tier: tr.Tier, Root: pi.Key.Root, Hash: pi.Key.Hash, TTL: pi.TTL, Expires: pi.Expires})
		}
	}
	return out
}

// Unpin unpins, in every tier that honours pins, the pinned blocks whose hash is in hashes
// (they stay stored, unpinned); it returns how many it unpinned, summed over the tiers.
func (t *Tiers) Unpin(ctx context.Context, hashes []prefix.Hash) (int, error) {
	want := make(map[prefix.Hash]bool, len(hashes))
	for _, h := range hashes {
		want[h] = true
	}
	n := 0
	var errs []error
	for _, tr := range t.tiers {
		p, ok := tr.Store.(tier.Pinner)
		if !ok {
			continue
		}
		var keys []tier.Key
		for _, pi := range p.Pins() {
			if want[pi.Key.Hash] {
				keys = append(keys, pi.Key)
			}
		}
		if len(keys) == 0 {
			continue
		}
		held, err := p.Pin(ctx, keys, 0)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s tier: %w", tr.Tier, err))
		}
		for _, h := range held {
			if h {
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}
