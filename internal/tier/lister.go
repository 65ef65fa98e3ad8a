package tier

import (
	"context"

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
