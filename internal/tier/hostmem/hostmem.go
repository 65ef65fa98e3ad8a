package hostmem

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
}

// DefaultConfig returns a 1 GiB budget.
func DefaultConfig() Config { return Config{CapacityBytes: 1 << 30} }

func (c Config) validate() (Config, error) {
	if c.CapacityBytes <= 0 {
		return c, fmt.Errorf("hostmem: capacity %d bytes must be > 0", c.CapacityBytes)
	}
	return c, nil
}

type entry struct {
	key   tier.Key
	value []byte           // never written by the store (see package doc)
	node  lru.Node[*entry] // in Store.mu.lru; protected by Store.mu
}

func newEntry(key tier.Key, value []byte) *entry {
	e := &entry{key: key, value: value}
	e.node.Value = e
	return e
}

func (e *entry) size() int64 { return int64(len(e.value)) + entryOverhead }

// Store is the host-RAM tier.
type Store struct {
	cfg Config
	mu  struct {
		sync.Mutex
		m     map[tier.Key]*entry
		lru   lru.List[*entry] // front: the most recent
		used  int64
		stats tier.Stats
		spill func([]tier.Item) // see SpillTo; nil: evictions are dropped
	}
}

var (
	_ tier.Store   = (*Store)(nil)
	_ tier.Spiller = (*Store)(nil)
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
	s.mu.m = make(map[tier.Key]*entry)
	return s, nil
}

// REQUIRES: s.mu held.
func (s *Store) removeLocked(e *entry) {
	s.mu.lru.Remove(&e.node)
	delete(s.mu.m, e.key)
	s.mu.used -= e.size()
}

func (s *Store) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
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
		s.mu.lru.MoveToFront(&e.node)
		out[i] = e.value
	}
	return out, nil
}

// Put stores items, evicting least recently used entries to make room. An
// item over the whole budget is skipped and reported (ErrTooLarge) after the
// others are stored.
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
	for _, it := range items {
		e := newEntry(it.Key, it.Value)
		if e.size() > s.cfg.CapacityBytes {
			errs = append(errs, tier.TooLarge(it.Key, e.size(), s.cfg.CapacityBytes))
			continue
		}
		if old, ok := s.mu.m[it.Key]; ok {
			s.removeLocked(old)
		}
		for s.mu.used+e.size() > s.cfg.CapacityBytes {
			victim := s.mu.lru.Back().Value // used > 0: not empty
			s.removeLocked(victim)
			s.mu.stats.Evictions++
			if spill != nil {
				spilled = append(spilled, tier.Item{Key: victim.key, Value: victim.value})
			}
		}
		s.mu.m[it.Key] = e
		s.mu.lru.PushFront(&e.node)
		s.mu.used += e.size()
	}
	return errors.Join(errs...)
}

func (s *Store) Delete(ctx context.Context, keys []tier.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if e, ok := s.mu.m[k]; ok {
			s.removeLocked(e)
		}
	}
	return nil
}

// Contains does not touch the LRU order: a probe is not a use.
func (s *Store) Contains(ctx context.Context, keys []tier.Key) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		_, out[i] = s.mu.m[k]
	}
	return out, nil
}

func (s *Store) Stats() tier.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	st.UsedBytes = s.mu.used
	st.CapacityBytes = s.cfg.CapacityBytes
	st.Items = int64(len(s.mu.m))
	return st
}
