package hostmem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"stockpot/internal/tier"
	"stockpot/internal/tier/lru"
)

// entryOverhead approximates the bytes one entry costs besides its value:
// the map slot and key (2x32 bytes + map overhead) and the entry struct with
// its list links and slice header. Counting it keeps the budget honest for
// small values; for real K/V blocks (tens of KiB to MiB) it is noise.
const entryOverhead = 192

// Config configures a Store.
type Config struct {
	// CapacityBytes is the byte budget (--host-cache). Must be > 0.
	CapacityBytes int64
	// Now is the clock of pin expiry; nil is time.Now. Tests set a test clock.
	Now func() time.Time
}

// DefaultConfig returns a 1 GiB budget.
func DefaultConfig() Config { return Config{CapacityBytes: 1 << 30} }

func (c Config) validate() (Config, error) {
	if c.CapacityBytes <= 0 {
		return c, fmt.Errorf("hostmem: capacity %d bytes must be > 0", c.CapacityBytes)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

type entry struct {
	key   tier.Key
	owner uint16           // tier.Item.Owner (owners.go); 0: none
	value []byte           // never written by the store (see package doc)
	node  lru.Node[*entry] // in Store.mu.lru, or in Store.mu.pins while pinned; protected by Store.mu
}

func newEntry(key tier.Key, value []byte) *entry {
	e := &entry{key: key, value: value}
	e.node.Value = e
	return e
}

func (e *entry) size() int64 { return int64(len(e.value)) + entryOverhead }

// Store is the host-RAM tier.
type Store struct {
	cfg                  Config
	tier.Guarded         // SetOwnerLimit, OwnerBytes: s.mu.owners under s.mu (owners.go)
	tier.Indexed[*entry] // Keys, Contains: s.mu.m under s.mu
	mu                   struct {
		sync.Mutex
		m    map[tier.Key]*entry
		lru  lru.List[*entry] // the unpinned entries; front: the most recent
		pins lru.Pins[*entry] // the pinned entries, by expiry; never evicted
		used int64            // every entry's size, pinned or not
		// pinned is the pinned entries' share of used: what no eviction can free.
		pinned int64
		stats  tier.Stats
		spill  func([]tier.Item) // see SpillTo; nil: evictions are dropped
		// owners: per-owner bytes and limits (owners.go).
		owners tier.OwnerBudgets
	}
}

var (
	_ tier.Store   = (*Store)(nil)
	_ tier.Spiller = (*Store)(nil)
	_ tier.Pinner  = (*Store)(nil)
	_ tier.Lister  = (*Store)(nil)

	_ tier.OwnerLimiter = (*Store)(nil)
)

// SpillTo implements tier.Spiller: fn gets the items each Put evicted.
func (s *Store) SpillTo(fn func([]tier.Item)) {
	s.mu.Lock()
	s.mu.spill = fn
	s.mu.Unlock()
}

// New returns an empty Store.
func New(cfg Config) (*Store, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg}
	s.Guarded = tier.Guarded{L: &s.mu, B: &s.mu.owners}
	s.Indexed = tier.Indexed[*entry]{L: &s.mu, Index: func() (map[tier.Key]*entry, error) { return s.mu.m, nil }}
	s.mu.m = make(map[tier.Key]*entry)
	return s, nil
}

// REQUIRES: s.mu held.
func (s *Store) removeLocked(e *entry) {
	if s.mu.pins.Pinned(&e.node) {
		s.unpinLocked(e)
	} else {
		s.mu.lru.Remove(&e.node)
	}
	delete(s.mu.m, e.key)
	s.mu.used -= e.size()
	s.mu.owners.Add(e.owner, -e.size())
}

// pinLocked pins e (or repins it) for ttl from now.
// REQUIRES: s.mu held; e indexed; ttl > 0.
func (s *Store) pinLocked(e *entry, ttl time.Duration, now time.Time) {
	if !s.mu.pins.Pinned(&e.node) {
		s.mu.lru.Remove(&e.node)
		s.mu.pinned += e.size()
	}
	s.mu.pins.Pin(&e.node, ttl, now)
}

// unpinLocked takes e out of the pins; the caller links it into the LRU list or drops it.
// REQUIRES: s.mu held; e pinned.
func (s *Store) unpinLocked(e *entry) {
	s.mu.pins.Unpin(&e.node)
	s.mu.pinned -= e.size()
}

// expiredLocked turns a pin that expired into the least recent unpinned entry (lru.Pins
// expires them earliest first; one comparison when none has expired, the heap's top).
// REQUIRES: s.mu held.
func (s *Store) expiredLocked(n *lru.Node[*entry]) {
	s.mu.pinned -= n.Value.size()
	s.mu.lru.PushBack(n)
}

// nowLocked reads the clock and sweeps, if there are pins; without pins it returns the zero
// time and costs nothing (the clock is read only when a pin needs it).
// REQUIRES: s.mu held.
func (s *Store) nowLocked() time.Time {
	now, _ := s.mu.pins.ExpireNow(s.cfg.Now, s.expiredLocked)
	return now
}

// Sweep unpins the expired pins now and returns how many. Every operation sweeps first, so
// calling it is needed only to bring Stats up to date on an idle store; it is cheap.
func (s *Store) Sweep() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, n := s.mu.pins.ExpireNow(s.cfg.Now, s.expiredLocked)
	return n
}

func (s *Store) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowLocked() // no pin is expired at now after this
	// Last to first: a batch is a prefix in order, so its head ends the most recent and
	// eviction takes the chain from its tail (a chain without its head is useless).
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		e, ok := s.mu.m[k]
		if !ok {
			s.mu.stats.Misses++
			continue
		}
		s.mu.stats.Hits++
		if s.mu.pins.Pinned(&e.node) {
			s.mu.pins.Touch(&e.node, now) // a use refreshes the pin
		} else {
			s.mu.lru.MoveToFront(&e.node)
		}
		out[i] = e.value
	}
	return out, nil
}

// Put stores items, evicting least recently used unpinned entries to make room. An item over
// the whole budget is skipped and reported (ErrTooLarge) after the others are stored; one
// that would fit only by evicting a pin is declined (Stats.Declined; an overwrite so declined
// keeps the old value). An item with PinTTL is stored pinned; one without keeps the pin of
// the value it replaces (refreshed: a write-back is a use).
func (s *Store) Put(ctx context.Context, items []tier.Item) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var errs []error
	var spilled []tier.Item
	s.mu.Lock()
	spill := s.mu.spill
	defer func() {
		s.mu.Unlock()
		if len(spilled) > 0 {
			spill(spilled) // outside the lock: fn may queue work that reads this store
		}
	}()
	now := s.nowLocked()
	for _, it := range items {
		e := newEntry(it.Key, it.Value)
		e.owner = it.Owner
		if e.size() > s.cfg.CapacityBytes {
			errs = append(errs, tier.TooLarge(it.Key, e.size(), s.cfg.CapacityBytes))
			continue
		}
		ttl, keep := it.PinTTL, s.mu.pinned // keep: the bytes no eviction frees
		old, ok := s.mu.m[it.Key]
		if ok && s.mu.pins.Pinned(&old.node) {
			keep -= old.size()
			if ttl <= 0 {
				ttl, _ = s.mu.pins.TTL(&old.node)
			}
		}
		if keep+e.size() > s.cfg.CapacityBytes {
			s.mu.stats.Declined++ // only pins would make room
			continue
		}
		if ok {
			s.removeLocked(old)
		}
		for s.mu.used+e.size() > s.cfg.CapacityBytes {
			victim := s.victimLocked() // used > 0: not empty
			s.removeLocked(victim)
			s.mu.stats.Evictions++
			if spill != nil {
				spilled = append(spilled, tier.Item{Key: victim.key, Value: victim.value, Owner: victim.owner})
			}
		}
		s.mu.m[it.Key] = e
		s.mu.lru.PushFront(&e.node)
		s.mu.used += e.size()
		s.mu.owners.Add(e.owner, e.size())
		if ttl > 0 {
			if now.IsZero() { // the first pin: nowLocked did not read the clock
				now = s.cfg.Now()
			}
			s.pinLocked(e, ttl, now)
		}
	}
	return errors.Join(errs...)
}

// Pin implements tier.Pinner: the keys held are pinned for ttl from now (ttl <= 0: unpinned,
// as the most recent unpinned entries).
func (s *Store) Pin(ctx context.Context, keys []tier.Key, ttl time.Duration) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Now()
	s.mu.pins.Expire(now, s.expiredLocked)
	return tier.Each(s.mu.m, keys, func(e *entry) {
		switch {
		case ttl > 0:
			s.pinLocked(e, ttl, now)
		case s.mu.pins.Pinned(&e.node):
			s.unpinLocked(e)
			s.mu.lru.PushFront(&e.node)
		}
	}), nil
}

// Pins implements tier.Pinner.
func (s *Store) Pins() []tier.PinInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nowLocked()
	return s.mu.pins.Infos(entryKey)
}

func (s *Store) Delete(ctx context.Context, keys []tier.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tier.Each(s.mu.m, keys, s.removeLocked)
	return nil
}

func (s *Store) Stats() tier.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nowLocked()
	st := s.mu.stats
	st.PinnedItems, st.PinnedBytes = int64(s.mu.pins.Len()), s.mu.pinned
	st.UsedBytes = s.mu.used
	st.CapacityBytes = s.cfg.CapacityBytes
	st.Items = int64(len(s.mu.m))
	return st
}

// entryKey is the key of e, for lru.Pins.Infos.
func entryKey(e *entry) tier.Key { return e.key }
