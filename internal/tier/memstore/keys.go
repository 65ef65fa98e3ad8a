package memstore

import (
	"context"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

var _ tier.Lister = (*Store)(nil)

// Keys implements tier.Lister over the store's index.
func (s *Store) Keys(ctx context.Context, root prefix.Hash) ([]tier.Key, error) {
	return tier.Locked(ctx, &s.mu, func() ([]tier.Key, error) {
		return tier.KeysUnder(s.mu.m, root), nil
	})
}
