package redis

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"

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
// root's keys, so it never blocks Redis the way KEYS would. On a cluster each master is
// scanned (a SCAN cursor is one node's); a master that fails ends the listing with an error
// and what the others listed.
func (s *Store) Keys(ctx context.Context, root prefix.Hash) ([]tier.Key, error) {
	match := s.prefix + "*"
	if root != tier.AllRoots {
		match = s.prefix + hex.EncodeToString(root[:]) + ":*"
	}
	cc, ok := s.client.(*goredis.ClusterClient)
	if !ok {
		var out []tier.Key
		return out, s.scan(ctx, s.client, match, &out)
	}
	var mu sync.Mutex
	var out []tier.Key
	err := s.call(ctx, func(cctx context.Context) error {
		_, err := cc.ClusterSlots(cctx).Result() // fails fast when no seed answers
		return err
	})
	if err != nil {
		return nil, err
	}
	err = cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
		var mine []tier.Key
		err := s.scan(ctx, c, match, &mine)
		mu.Lock()
		defer mu.Unlock()
		out = append(out, mine...)
		if err == nil && len(out) >= maxListedKeys {
			err = fmt.Errorf("redis: over %d keys under the root; drop again for the rest", maxListedKeys)
		}
		return err
	})
	return out, err
}

// scan appends the keys matching match on one server (c) to *out, a page per call under the
// store's breaker and call timeout.
func (s *Store) scan(ctx context.Context, c goredis.Cmdable, match string, out *[]tier.Key) error {
	var cursor uint64
	for {
		var page []string
		err := s.call(ctx, func(ctx context.Context) error {
			var err error
			page, cursor, err = c.Scan(ctx, cursor, match, scanCount).Result()
			return err
		})
		if err != nil {
			return err
		}
		for _, name := range page {
			if k, ok := s.parseKey(name); ok {
				*out = append(*out, k)
			}
		}
		if cursor == 0 {
			return nil
		}
		if len(*out) >= maxListedKeys {
			return fmt.Errorf("redis: over %d keys under the root; drop again for the rest", maxListedKeys)
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
