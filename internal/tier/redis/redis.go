package redis

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/tier"
)

// Config configures a Store.
type Config struct {
	// IdentityDigest is the identity.Descriptor digest of the served model;
	// it is part of every key. Must be nonzero.
	IdentityDigest [32]byte
	// KeyPrefix starts every key. Default "stockpot".
	KeyPrefix string
	// TTL of every written block (--remote-cache-ttl). Default 24h. Unless NoReadRefresh, a
	// read pushes an unpinned block's TTL out to TTL again (see the package doc, "TTLs").
	TTL time.Duration
	// NoReadRefresh leaves an unpinned block's TTL as its write set it: it expires TTL after
	// it was last written, however often it is read (--remote-cache-ttl-refresh=false).
	NoReadRefresh bool
	// UsageEvery is the least time between two measurements of what the store holds in
	// Redis (Stats' UsedBytes, Items and CapacityBytes; see usage.go). Default 10s.
	UsageEvery time.Duration
	// CallTimeout bounds each batch call. Default 250ms: a remote read that
	// takes longer is usually slower than recomputing the prefix.
	CallTimeout time.Duration
	// BreakerFailures consecutive failed calls open the breaker. Default 5.
	BreakerFailures int
	// BreakerCooldown is how long an open breaker skips Redis. Default 5s.
	BreakerCooldown time.Duration
	// Now is the clock of this process's view of the pins (Pins) and of the breakers'
	// cool-downs; nil is time.Now. Redis expires keys by its own clock.
	Now func() time.Time
	// Password, when set, is what Open AUTHs with (--remote-cache-password-file), in place
	// of any password in the URL: a secret kept out of the command line.
	Password string
	// RootCAs, when set, are the CAs a rediss:// server's certificate is checked against
	// (--remote-cache-ca-file), in place of the system's: a Redis with its own CA. Open
	// refuses it for a redis:// URL (there is no TLS to apply it to).
	RootCAs *x509.CertPool
}

// DefaultConfig returns the defaults above; IdentityDigest must be set.
func DefaultConfig() Config {
	return Config{KeyPrefix: "stockpot", TTL: 24 * time.Hour, CallTimeout: 250 * time.Millisecond,
		BreakerFailures: 5, BreakerCooldown: 5 * time.Second, UsageEvery: 10 * time.Second}
}

func (c Config) validate() (Config, error) {
	d := DefaultConfig()
	if c.IdentityDigest == [32]byte{} {
		return c, errors.New("redis: Config.IdentityDigest is zero")
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = d.KeyPrefix
	}
	if c.TTL <= 0 {
		c.TTL = d.TTL
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = d.CallTimeout
	}
	if c.UsageEvery <= 0 {
		c.UsageEvery = d.UsageEvery
	}
	if c.BreakerFailures <= 0 {
		c.BreakerFailures = d.BreakerFailures
	}
	if c.BreakerCooldown <= 0 {
		c.BreakerCooldown = d.BreakerCooldown
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Store is the Redis tier. Safe for concurrent use.
type Store struct {
	cfg     Config
	client  goredis.UniversalClient
	owned   bool // Close closes client
	cluster bool // batch reads as pipelined per-key script calls rather than one call
	prefix  string
	breaker breaker // the store's: a whole call failed (on a cluster: no master answered)

	nodes struct { // on a cluster, a breaker per master (by address); see perNode
		sync.Mutex
		m map[string]*breaker
	}

	mu struct {
		sync.Mutex
		hits, misses uint64
		skipped      uint64                    // keys of a cluster batch whose master was skipped or failed
		pins         map[tier.Key]tier.PinInfo // this process's view; see Pins
	}

	usage usageState // the last measurement of what Redis holds (usage.go)
}

var (
	_ tier.Store  = (*Store)(nil)
	_ tier.Pinner = (*Store)(nil)
)

// New returns a Store over client (a *redis.Client, *redis.ClusterClient or
// any UniversalClient). The caller keeps ownership of client. For the
// breaker to see failures promptly, configure the client with MaxRetries -1
// (Open does).
func New(client goredis.UniversalClient, cfg Config) (*Store, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	_, cluster := client.(*goredis.ClusterClient)
	s := &Store{cfg: cfg, client: client, cluster: cluster,
		prefix: cfg.KeyPrefix + ":" + hex.EncodeToString(cfg.IdentityDigest[:]) + ":"}
	s.breaker.failures, s.breaker.cooldown, s.breaker.now = cfg.BreakerFailures, cfg.BreakerCooldown, cfg.Now
	s.mu.pins = make(map[tier.Key]tier.PinInfo)
	s.nodes.m = make(map[string]*breaker)
	return s, nil
}

// Open connects to a redis:// or rediss:// URL (--remote-cache) with
// retries (of commands and of dials) off and the dial, read and write timeouts set to CallTimeout.
// A redis+cluster:// or rediss+cluster:// URL names a Redis Cluster: its host and each
// addr=host:port query value are seed nodes (redis+cluster://10.0.0.1:6379?addr=10.0.0.2:6379);
// the client learns the slot map from them and follows MOVED and ASK.
// Nothing is sent until the first call: a Redis that is down at start is a
// tier that misses, not a failure to start.
func Open(url string, cfg Config) (*Store, error) {
	vcfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if rest, ok := strings.CutPrefix(url, "redis+cluster://"); ok {
		return openCluster("redis://"+rest, cfg, vcfg)
	}
	if rest, ok := strings.CutPrefix(url, "rediss+cluster://"); ok {
		return openCluster("rediss://"+rest, cfg, vcfg)
	}
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if opts.TLSConfig, opts.Password, err = credentials(opts.TLSConfig, opts.Password, vcfg); err != nil {
		return nil, err
	}
	opts.MaxRetries = -1
	opts.DialerRetries = 1 // one dial attempt per call: the breaker decides about retrying
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = vcfg.CallTimeout, vcfg.CallTimeout, vcfg.CallTimeout
	opts.PoolTimeout = vcfg.CallTimeout
	s, err := New(goredis.NewClient(opts), cfg)
	if err != nil {
		return nil, err
	}
	s.owned = true
	return s, nil
}

// openCluster is Open for a cluster URL (scheme already rewritten for go-redis).
func openCluster(url string, cfg, vcfg Config) (*Store, error) {
	opts, err := goredis.ParseClusterURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	if opts.TLSConfig, opts.Password, err = credentials(opts.TLSConfig, opts.Password, vcfg); err != nil {
		return nil, err
	}
	opts.MaxRetries = -1
	opts.DialerRetries = 1
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = vcfg.CallTimeout, vcfg.CallTimeout, vcfg.CallTimeout
	opts.PoolTimeout = vcfg.CallTimeout
	opts.ContextTimeoutEnabled = true // CallTimeout bounds redirects and retries of a dead master
	s, err := New(goredis.NewClusterClient(opts), cfg)
	if err != nil {
		return nil, err
	}
	s.owned = true
	return s, nil
}

// credentials applies cfg's Password and RootCAs to what the URL gave (its TLS config, nil
// for redis://, and its password).
func credentials(tc *tls.Config, password string, cfg Config) (*tls.Config, string, error) {
	if cfg.Password != "" {
		password = cfg.Password
	}
	if cfg.RootCAs != nil {
		if tc == nil {
			return nil, "", errors.New("redis: a CA file is set but the URL is redis://, without TLS: use rediss://")
		}
		tc = tc.Clone()
		tc.RootCAs = cfg.RootCAs
	}
	return tc, password, nil
}

// Close closes the client if Open made it.
func (s *Store) Close() error {
	s.usage.close()
	if s.owned {
		return s.client.Close()
	}
	return nil
}

func (s *Store) key(k tier.Key) string {
	var b [64 + 1 + 64]byte
	hex.Encode(b[:64], k.Root[:])
	b[64] = ':'
	hex.Encode(b[65:], k.Hash[:])
	return s.prefix + string(b[:])
}

// call runs fn under the breaker and the call timeout.
func (s *Store) call(ctx context.Context, fn func(ctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.breaker.allow(); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	err := fn(cctx)
	if err != nil && ctx.Err() != nil {
		s.breaker.release() // the caller gave up: no verdict on Redis
		return fmt.Errorf("redis: %w", ctx.Err())
	}
	if errors.Is(err, tier.ErrUnavailable) {
		s.breaker.release() // every cluster master's breaker is open: they have the verdicts
		return err
	}
	s.breaker.done(err == nil)
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Get reads the blocks and their pin records in one round trip and refreshes the pins in
// it: those this process knows in the same pipeline, those it finds that it did not know
// (another replica's) in a second call (see the package doc).
func (s *Store) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	if len(keys) == 0 {
		return make([][]byte, 0), ctx.Err()
	}
	now := s.cfg.Now()
	touch := !s.cfg.NoReadRefresh // every key's TTL is refreshed in the read's pipeline
	var known []tier.Key          // pinned as far as this process knows: refreshed in the read's pipeline
	var knownSet map[tier.Key]bool
	if touch {
		known = keys
	}
	s.mu.Lock()
	if !touch && len(s.mu.pins) > 0 {
		for _, k := range keys {
			if p, ok := s.mu.pins[k]; ok && p.Expires.After(now) {
				if knownSet == nil {
					knownSet = map[tier.Key]bool{}
				}
				known, knownSet[k] = append(known, k), true
			}
		}
	}
	s.mu.Unlock()
	var out [][]byte
	var pinTTL []time.Duration
	err := s.call(ctx, func(ctx context.Context) error {
		var err error
		if out, pinTTL, err = s.read(ctx, keys, known); err != nil {
			return err
		}
		var found []tier.Key // pinned, but not by what this process knew: refresh now
		for i, k := range keys {
			if !touch && out[i] != nil && pinTTL[i] > 0 && !knownSet[k] {
				found = append(found, k)
			}
		}
		if len(found) > 0 { // best effort, as every refresh: a failed one fails no read
			s.runPairs(ctx, refreshScript, found)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var hits uint64
	found := make([]bool, len(keys))
	for i, v := range out {
		if found[i] = v != nil; found[i] {
			hits++
		}
	}
	s.mu.Lock()
	s.mu.hits += hits
	s.mu.misses += uint64(len(keys)) - hits
	s.notePinsLocked(keys, pinTTL, found, now)
	s.mu.Unlock()
	return out, nil
}

// Put writes each block with the default TTL, as a pipeline of SETs. A pinned item (PinTTL,
// or a key this process knows pinned: a write-back keeps the pin) also gets its pin record,
// and a TTL of at least the pin's.
func (s *Store) Put(ctx context.Context, items []tier.Item) error {
	if len(items) == 0 {
		return ctx.Err()
	}
	now := s.cfg.Now()
	pinTTL := make([]time.Duration, len(items))
	s.mu.Lock()
	for i, it := range items {
		pinTTL[i] = it.PinTTL
		if p, ok := s.mu.pins[it.Key]; ok && pinTTL[i] <= 0 && p.Expires.After(now) {
			pinTTL[i] = p.TTL
		}
	}
	s.mu.Unlock()
	set := func(p goredis.Pipeliner, i int, cmds []goredis.Cmder) []goredis.Cmder {
		it := items[i]
		if pinTTL[i] <= 0 {
			return append(cmds, p.Set(ctx, s.key(it.Key), it.Value, s.cfg.TTL))
		}
		return append(cmds, p.Set(ctx, s.key(it.Key), it.Value, max(s.cfg.TTL, pinTTL[i])),
			p.Set(ctx, s.pinKey(it.Key), ms(pinTTL[i]), pinTTL[i]))
	}
	var partial error // on a cluster: the items of masters that failed
	done := make([]bool, len(items))
	err := s.call(ctx, func(ctx context.Context) error {
		if s.cluster {
			keys := make([]tier.Key, len(items))
			for i, it := range items {
				keys[i] = it.Key
			}
			groups := s.groupBySlot(keys)
			per := make([][]goredis.Cmder, len(items)) // each item's commands
			answered, err := s.perNodeOK(ctx, keys, groups, writeOK, func(p goredis.Pipeliner, gi int) []goredis.Cmder {
				var cmds []goredis.Cmder
				for _, i := range groups[gi].idx {
					n := len(cmds)
					cmds = set(p, i, cmds)
					per[i] = cmds[n:]
				}
				return cmds
			})
			if err != nil {
				return err
			}
			var refused []error // a full master answered and refused these (see below)
			for gi, g := range groups {
				for _, i := range g.idx {
					done[i] = answered[gi] && !slices.ContainsFunc(per[i], func(c goredis.Cmder) bool { return isOOM(c.Err()) })
					if answered[gi] && !done[i] {
						refused = append(refused, fmt.Errorf("%w: redis: a full cluster master refused the write", tier.ErrNoSpace))
					}
				}
			}
			// One error per failed item, flat (the writer counts them by reason).
			if u, ok := unanswered(groups, answered, "write").(interface{ Unwrap() []error }); ok {
				refused = append(u.Unwrap(), refused...)
			}
			partial = errors.Join(refused...)
			return nil
		}
		per := make([][]goredis.Cmder, len(items))
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i := range items {
				per[i] = set(p, i, nil)
			}
			return nil
		})
		if isOOM(err) {
			// A full Redis (maxmemory with noeviction) answered every command and refused
			// some: the server is up, so the call succeeds for the breaker (reads still work;
			// opening it would skip them), and each refused item is one ErrNoSpace.
			var refused []error
			for i, cmds := range per {
				done[i] = true
				for _, c := range cmds {
					if cerr := c.Err(); cerr != nil {
						if !isOOM(cerr) {
							return err // something else went wrong too: the batch failed
						}
						refused = append(refused, fmt.Errorf("%w: redis: %v", tier.ErrNoSpace, cerr))
						done[i] = false
						break
					}
				}
			}
			partial = errors.Join(refused...)
			return nil
		}
		for i := range done {
			done[i] = true
		}
		return err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	for i, it := range items {
		if pinTTL[i] > 0 && done[i] {
			s.mu.pins[it.Key] = tier.PinInfo{Key: it.Key, TTL: pinTTL[i], Expires: now.Add(pinTTL[i])}
		}
	}
	s.mu.Unlock()
	return partial
}

// Delete removes the blocks and their pin records.
func (s *Store) Delete(ctx context.Context, keys []tier.Key) error {
	if len(keys) == 0 {
		return ctx.Err()
	}
	var partial error
	err := s.call(ctx, func(ctx context.Context) error {
		if s.cluster { // one DEL per slot: a multi-key DEL spanning slots fails on a cluster
			groups := s.groupBySlot(keys)
			answered, err := s.perNode(ctx, keys, groups, func(p goredis.Pipeliner, gi int) []goredis.Cmder {
				names := make([]string, 0, 2*len(groups[gi].idx))
				for _, i := range groups[gi].idx {
					names = append(names, s.key(keys[i]), s.pinKey(keys[i]))
				}
				return []goredis.Cmder{p.Del(ctx, names...)}
			})
			if err == nil {
				partial = unanswered(groups, answered, "delete")
			}
			return err
		}
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for _, k := range keys {
				p.Del(ctx, s.key(k))
				p.Del(ctx, s.pinKey(k))
			}
			return nil
		})
		return err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	for _, k := range keys {
		delete(s.mu.pins, k)
	}
	s.mu.Unlock()
	return partial
}

func (s *Store) Contains(ctx context.Context, keys []tier.Key) ([]bool, error) {
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out, ctx.Err()
	}
	err := s.call(ctx, func(ctx context.Context) error {
		cmds := make([]*goredis.IntCmd, len(keys))
		if s.cluster { // a key of a master that failed is not held, as far as a reader can tell
			groups := s.groupBySlot(keys)
			answered, err := s.perNode(ctx, keys, groups, func(p goredis.Pipeliner, gi int) []goredis.Cmder {
				var out []goredis.Cmder
				for _, i := range groups[gi].idx {
					cmds[i] = p.Exists(ctx, s.key(keys[i]))
					out = append(out, cmds[i])
				}
				return out
			})
			if err != nil {
				return err
			}
			for gi, g := range groups {
				for _, i := range g.idx {
					out[i] = answered[gi] && cmds[i].Val() > 0
				}
			}
			return nil
		}
		_, err := s.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			for i, k := range keys {
				cmds[i] = p.Exists(ctx, s.key(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i, c := range cmds {
			out[i] = c.Val() > 0
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Stats returns this process's hits and misses, the pins of its view (PinnedItems; see
// Pins and the package doc), and the last measurement of what Redis holds under this
// store's prefix (UsedBytes, Items; CapacityBytes is the servers' maxmemory, 0 for none),
// starting a new one when it is older than Config.UsageEvery (see usage.go).
func (s *Store) Stats() tier.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.cfg.Now())
	u := s.maybeMeasure()
	return tier.Stats{Hits: s.mu.hits, Misses: s.mu.misses, PinnedItems: int64(len(s.mu.pins)),
		UsedBytes: u.Bytes, Items: u.Blocks, CapacityBytes: u.MaxMemory}
}

// BreakerOpen reports whether calls are being skipped now: the store's breaker is open, or on
// a cluster some master's.
func (s *Store) BreakerOpen() bool { return s.BreakerStats().Open > 0 }

// BreakerStats are the counters of the store's circuit breakers: its own (a whole call
// failed) and, on a cluster, one per master.
type BreakerStats struct {
	Open        int    // breakers open now
	Opens       uint64 // closed → open
	Recoveries  uint64 // open → closed: a probe after the cool-down succeeded
	FailedCalls uint64 // calls (on a cluster: a master's share of a batch) that failed
	// SkippedKeys are keys of cluster batches not answered because their master's breaker
	// was open or its share failed while others answered: misses for Get, not held for
	// Contains, an error each for Put and Delete.
	SkippedKeys uint64
}

// BreakerStats returns the breakers' counters.
func (s *Store) BreakerStats() BreakerStats {
	var out BreakerStats
	add := func(c breakerCounts) {
		if c.open {
			out.Open++
		}
		out.Opens += c.opens
		out.Recoveries += c.recoveries
		out.FailedCalls += c.failed
	}
	add(s.breaker.counts())
	s.nodes.Lock()
	for _, b := range s.nodes.m {
		add(b.counts())
	}
	s.nodes.Unlock()
	s.mu.Lock()
	out.SkippedKeys = s.mu.skipped
	s.mu.Unlock()
	return out
}
