package redis

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Usage is what Redis holds for this store's identity, measured from Redis itself (Measure):
// not what this replica wrote, since Redis is shared, evicts and expires on its own.
type Usage struct {
	// Blocks is the number of block keys under the store's prefix (its model), counted by
	// SCAN; pin records are not blocks and are not counted.
	Blocks int64
	// Bytes is the sum of those keys' value lengths (STRLEN, pipelined per SCAN page): the
	// encoded records' bytes, what the host and disk tiers count as their UsedBytes. Redis's
	// own overhead per key (its dict entry, the key name, the expiry) is not in it; see
	// UsedMemory.
	Bytes int64
	// UsedMemory and MaxMemory are the servers' INFO memory used_memory and maxmemory,
	// summed over a cluster's masters: every key of the server, not only this model's.
	// MaxMemory 0 is no limit.
	UsedMemory, MaxMemory int64
	At                    time.Time // when the measurement ended (Config.Now); zero: none yet
}

// usageState is the last measurement and the one in flight.
type usageState struct {
	mu struct {
		sync.Mutex
		last    Usage
		started time.Time // the last measurement's start; zero: none yet
		running bool
		cancel  context.CancelFunc // of the one running; nil when none
		closed  bool
	}
	wg sync.WaitGroup
}

// close cancels a measurement in flight and waits for it.
func (u *usageState) close() {
	u.mu.Lock()
	u.mu.closed = true
	if u.mu.cancel != nil {
		u.mu.cancel()
	}
	u.mu.Unlock()
	u.wg.Wait()
}

// maybeMeasure returns the last measurement and starts a new one, in the background, when
// the last started Config.UsageEvery ago or more and none is running: Stats (a /metrics
// scrape, GET /v1/cache) never waits on a SCAN of a shared keyspace. At most one
// measurement runs at a time; with the breaker open none starts (Redis is known down).
func (s *Store) maybeMeasure() Usage {
	u := &s.usage
	u.mu.Lock()
	defer u.mu.Unlock()
	last := u.mu.last
	now := s.cfg.Now()
	if u.mu.closed || u.mu.running || (!u.mu.started.IsZero() && now.Sub(u.mu.started) < s.cfg.UsageEvery) || s.breaker.counts().open {
		return last
	}
	// Bounded as a whole: each page of the SCAN is one short call; a keyspace too large to
	// count in this time keeps the previous measurement.
	ctx, cancel := context.WithTimeout(context.Background(), max(time.Minute, 20*s.cfg.CallTimeout))
	u.mu.started, u.mu.running, u.mu.cancel = now, true, cancel
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer cancel()
		m, err := s.Measure(ctx)
		u.mu.Lock()
		defer u.mu.Unlock()
		u.mu.running, u.mu.cancel = false, nil
		if err == nil {
			u.mu.last = m
		}
	}()
	return last
}

// Measure counts the store's block keys and their bytes in Redis (SCAN over the prefix, a
// pipelined STRLEN per page; every master of a cluster) and reads INFO memory. It bypasses
// the breaker (it is no request's read) and is bounded by ctx; each page by CallTimeout.
// A key that expires between its SCAN page and its STRLEN counts 0 bytes.
func (s *Store) Measure(ctx context.Context) (Usage, error) {
	var out Usage
	var mu sync.Mutex
	one := func(ctx context.Context, c *goredis.Client) error {
		m, err := s.measureNode(ctx, c)
		mu.Lock()
		defer mu.Unlock()
		out.Blocks, out.Bytes = out.Blocks+m.Blocks, out.Bytes+m.Bytes
		out.UsedMemory, out.MaxMemory = out.UsedMemory+m.UsedMemory, out.MaxMemory+m.MaxMemory
		return err
	}
	var err error
	switch c := s.client.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, one)
	case *goredis.Client:
		err = one(ctx, c)
	default: // a ring or another UniversalClient: count the keys through it, no INFO
		err = s.measureKeys(ctx, c, &out)
	}
	out.At = s.cfg.Now()
	return out, err
}

// measureNode is Measure on one server.
func (s *Store) measureNode(ctx context.Context, c *goredis.Client) (Usage, error) {
	var out Usage
	if err := s.measureKeys(ctx, c, &out); err != nil {
		return out, err
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	info, err := c.Info(cctx, "memory").Result()
	if err != nil {
		return out, err
	}
	out.UsedMemory, out.MaxMemory = infoField(info, "used_memory"), infoField(info, "maxmemory")
	return out, nil
}

// measureKeys adds the block keys matching the store's prefix on c, and their lengths, to out.
func (s *Store) measureKeys(ctx context.Context, c goredis.Cmdable, out *Usage) error {
	match := s.prefix + "*" // pin records start with '{': not matched
	var cursor uint64
	for {
		var page []string
		var lens []*goredis.IntCmd
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
			defer cancel()
			var err error
			if page, cursor, err = c.Scan(cctx, cursor, match, scanCount).Result(); err != nil || len(page) == 0 {
				return err
			}
			lens = make([]*goredis.IntCmd, len(page))
			_, err = c.Pipelined(cctx, func(p goredis.Pipeliner) error {
				for i, name := range page {
					lens[i] = p.StrLen(cctx, name)
				}
				return nil
			})
			return err
		}()
		if err != nil {
			return err
		}
		for i, name := range page {
			if _, ok := s.parseKey(name); ok {
				out.Blocks++
				out.Bytes += lens[i].Val()
			}
		}
		if cursor == 0 {
			return nil
		}
	}
}

// infoField returns the integer value of field in an INFO reply ("field:value" lines); 0
// when absent or not a number.
func infoField(info, field string) int64 {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}
