package memstore

import (
	"bytes"
	"context"
	"sync"
	"time"

	"stockpot/internal/tier"
)

// Store is an unbounded in-memory tier.Store.
type Store struct {
	now                  func() time.Time
	tier.Indexed[[]byte] // Keys, Contains: s.mu.m under s.mu
	mu                   struct {
		sync.Mutex
		m     map[tier.Key][]byte
		pins  map[tier.Key]tier.PinInfo // a subset of m's keys; expired ones dropped by sweepLocked
		used  int64
		stats tier.Stats
	}
}

// New returns an empty Store whose pins expire by time.Now.
func New() *Store { return NewWithClock(time.Now) }

// NewWithClock returns an empty Store whose pins expire by now (a test clock).
func NewWithClock(now func() time.Time) *Store {
	s := &Store{now: now}
	s.Indexed = tier.Indexed[[]byte]{L: &s.mu, Index: func() (map[tier.Key][]byte, error) { return s.mu.m, nil }}
	s.mu.m = make(map[tier.Key][]byte)
	s.mu.pins = make(map[tier.Key]tier.PinInfo)
	return s
}

var (
	_ tier.Store  = (*Store)(nil)
	_ tier.Pinner = (*Store)(nil)
	_ tier.Lister = (*Store)(nil)
)

// sweepLocked drops the pins expired at now: a scan, obviously right (the store has no
// eviction, so an expired pin only stops being listed).
// REQUIRES: s.mu held.
func (s *Store) sweepLocked(now time.Time) {
	for k, p := range s.mu.pins {
		if !p.Expires.After(now) {
			delete(s.mu.pins, k)
		}
	}
}

// touchLocked refreshes k's pin, if any, to now + its TTL.
// REQUIRES: s.mu held; sweepLocked(now) done.
func (s *Store) touchLocked(k tier.Key, now time.Time) {
	if p, ok := s.mu.pins[k]; ok {
		p.Expires = now.Add(p.TTL)
		s.mu.pins[k] = p
	}
}

func (s *Store) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if v, ok := s.mu.m[k]; ok {
			out[i] = bytes.Clone(v)
			s.touchLocked(k, now)
			s.mu.stats.Hits++
		} else {
			s.mu.stats.Misses++
		}
	}
	return out, nil
}

func (s *Store) Put(ctx context.Context, items []tier.Item) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	for _, it := range items {
		s.mu.used -= int64(len(s.mu.m[it.Key]))
		s.mu.m[it.Key] = bytes.Clone(it.Value)
		s.mu.used += int64(len(it.Value))
		if it.PinTTL > 0 {
			s.mu.pins[it.Key] = tier.PinInfo{Key: it.Key, TTL: it.PinTTL, Expires: now.Add(it.PinTTL)}
		} else {
			s.touchLocked(it.Key, now) // a write-back keeps the pin (tier.Item.PinTTL)
		}
	}
	return nil
}

func (s *Store) Delete(ctx context.Context, keys []tier.Key) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.mu.used -= int64(len(s.mu.m[k]))
		delete(s.mu.m, k)
		delete(s.mu.pins, k)
	}
	return nil
}

func (s *Store) Stats() tier.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.now())
	st := s.mu.stats
	st.UsedBytes = s.mu.used
	st.Items = int64(len(s.mu.m))
	st.PinnedItems = int64(len(s.mu.pins))
	for k := range s.mu.pins {
		st.PinnedBytes += int64(len(s.mu.m[k]))
	}
	return st
}

// Pin implements tier.Pinner. Without a budget, a pin only changes what Pins lists.
func (s *Store) Pin(ctx context.Context, keys []tier.Key, ttl time.Duration) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweepLocked(now)
	out := make([]bool, len(keys))
	for i, k := range keys {
		if _, out[i] = s.mu.m[k]; !out[i] {
			continue
		}
		if ttl > 0 {
			s.mu.pins[k] = tier.PinInfo{Key: k, TTL: ttl, Expires: now.Add(ttl)}
		} else {
			delete(s.mu.pins, k)
		}
	}
	return out, nil
}

// Pins implements tier.Pinner.
func (s *Store) Pins() []tier.PinInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(s.now())
	out := make([]tier.PinInfo, 0, len(s.mu.pins))
	for _, p := range s.mu.pins {
		out = append(out, p)
	}
	return out
}
