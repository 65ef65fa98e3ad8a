package redis

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

var _ tier.Lister = (*Store)(nil)

// maxListedKeys bounds one Keys call: a drop larger than this many blocks (a million, some
// GiB of K/V) is done in several calls.
const maxListedKeys = 1 << 20

// scanCount is the SCAN COUNT hint: keys Redis examines per call, each call under the breaker
// and the call timeout.
const scanCount = 1000

// Keys implements tier.Lister with SCAN over the store's key prefix (its identity), matching
// root's keys, so it never blocks Redis the way KEYS would.
func (s *Store) Keys(ctx context.Context, root prefix.Hash) ([]tier.Key, error) {
	match := s.prefix + "*"
	if root != tier.AllRoots {
		match = s.prefix + hex.EncodeToString(root[:]) + ":*"
	}
	var out []tier.Key
	var cursor uint64
	for {
		var page []string
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			page, cursor, err = s.client.Scan(ctx, cursor, match, scanCount).Result()
			return err
		})
		if err != nil {
			return out, err
		}
		for _, name := range page {
			if k, ok := s.parseKey(name); ok {
				out = append(out, k)
			}
		}
		if cursor == 0 {
			return out, nil
		}
		if len(out) >= maxListedKeys {
			return out, fmt.Errorf("redis: over %d keys under the root; drop again for the rest", maxListedKeys)
		}
	}
}

// parseKey inverts key: PREFIX<root hex>:<hash hex>.
func (s *Store) parseKey(name string) (tier.Key, bool) {
	rest, ok := strings.CutPrefix(name, s.prefix)
	if !ok || len(rest) != 64+1+64 || rest[64] != ':' {
		return tier.Key{}, false
	}
	var k tier.Key
	if _, err := hex.Decode(k.Root[:], []byte(rest[:64])); err != nil {
		return tier.Key{}, false
	}
	if _, err := hex.Decode(k.Hash[:], []byte(rest[65:])); err != nil {
		return tier.Key{}, false
	}
	return k, true
}
