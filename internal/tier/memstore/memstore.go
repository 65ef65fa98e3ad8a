package memstore

import (
	"bytes"
	"context"
	"sync"

	"stockpot/internal/tier"
)

// Store is an unbounded in-memory tier.Store.
type Store struct {
	mu struct {
		sync.Mutex
		m     map[tier.Key][]byte
		used  int64
		stats tier.Stats
	}
}

// New returns an empty Store.
func New() *Store {
	s := &Store{}
	s.mu.m = make(map[tier.Key][]byte)
	return s
}

var _ tier.Store = (*Store)(nil)

func (s *Store) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([][]byte, len(keys))
	for i, k := range keys {
		if v, ok := s.mu.m[k]; ok {
			out[i] = bytes.Clone(v)
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
	for _, it := range items {
		s.mu.used -= int64(len(s.mu.m[it.Key]))
		s.mu.m[it.Key] = bytes.Clone(it.Value)
		s.mu.used += int64(len(it.Value))
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
	}
	return nil
}

func (s *Store) Contains(ctx context.Context, keys []tier.Key) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(keys))
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
	st.Items = int64(len(s.mu.m))
	return st
}
