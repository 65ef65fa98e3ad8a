package tier

import (
	"context"
	"sync"

	"stockpot/internal/prefix"
)

// Lister is a store that lists the keys it holds under one chain root, so that a tenant's
// blocks (root = prefix.Root(identity, salt)) can be dropped by the cache admin API
// (DELETE /v1/cache?salt=S). Every store of this repository is one; the listing is a
// snapshot: keys Put meanwhile may be missing from it.
type Lister interface {
	// Keys returns the keys held under root; the zero root lists every key the store holds for
	// its identity (a store is namespaced by identity, so that is "everything of this model").
	Keys(ctx context.Context, root prefix.Hash) ([]Key, error)
}

// AllRoots is the root that makes Lister.Keys list every key (no real root is zero: roots are
// SHA-256 digests).
var AllRoots prefix.Hash

// KeysUnder lists m's keys under root (AllRoots: every key); the in-process stores' Keys.
func KeysUnder[V any](m map[Key]V, root prefix.Hash) []Key {
	out := make([]Key, 0, len(m))
	for k := range m {
		if root == AllRoots || k.Root == root {
			out = append(out, k)
		}
	}
	return out
}

// Indexed gives an in-process store (memstore, hostmem, disk) its Lister.Keys and its
// Store.Contains, both answered from the store's index map under the store's lock: a store
// embeds one that points at its own mutex and index. Neither touches the LRU order (a probe
// is not a use).
type Indexed[V any] struct {
	L sync.Locker
	// Index returns the store's map. It runs with L held; an error (ErrClosed) answers instead.
	Index func() (map[Key]V, error)
}

// Keys implements Lister.
func (x Indexed[V]) Keys(ctx context.Context, root prefix.Hash) ([]Key, error) {
	return read(ctx, x, func(m map[Key]V) []Key { return KeysUnder(m, root) })
}

// Contains implements Store.Contains.
func (x Indexed[V]) Contains(ctx context.Context, keys []Key) ([]bool, error) {
	return read(ctx, x, func(m map[Key]V) []bool {
		out := make([]bool, len(keys))
		for i, k := range keys {
			_, out[i] = m[k]
		}
		return out
	})
}

// read checks ctx, then runs f over x's index under x's lock.
func read[V, R any](ctx context.Context, x Indexed[V], f func(map[Key]V) R) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	x.L.Lock()
	defer x.L.Unlock()
	m, err := x.Index()
	if err != nil {
		return zero, err
	}
	return f(m), nil
}

// Each calls fn with the value of every key that m holds, in the order of keys, and reports
// which keys m holds: the in-process stores' Delete and Pin.
func Each[V any](m map[Key]V, keys []Key, fn func(V)) []bool {
	held := make([]bool, len(keys))
	for i, k := range keys {
		var v V
		if v, held[i] = m[k]; held[i] {
			fn(v)
		}
	}
	return held
}
