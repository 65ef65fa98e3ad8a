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

// Present reports, for each key, whether m holds it; the in-process stores' Contains.
func Present[V any](m map[Key]V, keys []Key) []bool {
	out := make([]bool, len(keys))
	for i, k := range keys {
		_, out[i] = m[k]
	}
	return out
}

// Locked is how an in-process store reads its index for Keys and Contains: the context
// checked first, then read run under the store's lock l.
func Locked[R any](ctx context.Context, l sync.Locker, read func() (R, error)) (R, error) {
	if err := ctx.Err(); err != nil {
		var zero R
		return zero, err
	}
	l.Lock()
	defer l.Unlock()
	return read()
}
