package offload

import (
	"context"
	"errors"
	"fmt"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// DropRoot deletes every block under root from each tier (tier.AllRoots: every block of this
// identity), for the cache admin's DELETE /v1/cache, and reports how many it deleted per tier.
// A store that cannot list its keys (not a tier.Lister) is skipped with an error naming it;
// the other tiers are still dropped. Blocks still queued for write-back when the drop runs may
// land after it: a caller that must see nothing left drops again once the pool is idle.
func (t *Tiers) DropRoot(ctx context.Context, root prefix.Hash) (kvtier.Counts, error) {
	var out kvtier.Counts
	var errs []error
	for _, tr := range t.tiers {
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
