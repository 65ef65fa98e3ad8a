package redis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// MemoryPolicy is one Redis server's eviction settings, as CONFIG GET reports them: what
// decides whether a full Redis evicts blocks (and which: see the package doc, Pins) or
// refuses writes (noeviction).
type MemoryPolicy struct {
	Addr      string // the server's address (a cluster has one row per master)
	Policy    string // maxmemory-policy: noeviction, allkeys-lru, volatile-ttl, ...
	MaxMemory int64  // maxmemory in bytes; 0: no limit
	Err       error  // CONFIG GET failed (a managed Redis may rename or forbid CONFIG)
}

// MemoryPolicies reads maxmemory and maxmemory-policy from the server, or from every master
// of a cluster, each call under the store's call timeout (not under its breaker: an operator's
// question, not the request path). Read-only.
func (s *Store) MemoryPolicies(ctx context.Context) []MemoryPolicy {
	if cc, ok := s.client.(*goredis.ClusterClient); ok {
		var (
			mu  sync.Mutex
			out []MemoryPolicy // protected by mu: ForEachMaster calls fn on every master at once
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			p := s.memoryPolicy(ctx, c, c.Options().Addr)
			mu.Lock()
			out = append(out, p)
			mu.Unlock()
			return nil
		})
		slices.SortFunc(out, func(a, b MemoryPolicy) int { return strings.Compare(a.Addr, b.Addr) })
		if err != nil && len(out) == 0 {
			out = append(out, MemoryPolicy{Err: err})
		}
		return out
	}
	addr := ""
	if c, ok := s.client.(*goredis.Client); ok {
		addr = c.Options().Addr
	}
	return []MemoryPolicy{s.memoryPolicy(ctx, s.client, addr)}
}

// memoryPolicy asks one server.
func (s *Store) memoryPolicy(ctx context.Context, c goredis.Cmdable, addr string) MemoryPolicy {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	p := MemoryPolicy{Addr: addr}
	m, err := c.ConfigGet(ctx, "maxmemory*").Result()
	if err != nil {
		p.Err = err
		return p
	}
	p.Policy = m["maxmemory-policy"]
	if v, ok := m["maxmemory"]; ok {
		p.MaxMemory, _ = strconv.ParseInt(v, 10, 64)
	}
	return p
}
