package offload

import (
	"context"
	"errors"
	"fmt"

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
