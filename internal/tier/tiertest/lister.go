package tiertest

import (
	"context"
	"slices"
	"testing"

	"stockpot/internal/tier"
)

// testLister: a store that is a tier.Lister lists exactly the keys under a root, every key
// under AllRoots, and nothing after they are deleted (the cache admin's drop by salt).
func testLister(t *testing.T, s tier.Store, _ Options) {
	l, ok := s.(tier.Lister)
	if !ok {
		t.Fatalf("%T is not a tier.Lister", s)
	}
	ctx := context.Background()
	a := Chain(identityA, rootA, SmallLayout, 3, 41)
	b := Chain(identityA, rootSalt, SmallLayout, 2, 42)
	mustPut(t, s, append(Items(a), Items(b)...))
	less := func(x, y tier.Key) int {
		if c := slices.Compare(x.Root[:], y.Root[:]); c != 0 {
			return c
		}
		return slices.Compare(x.Hash[:], y.Hash[:])
	}
	check := func(what string, have []tier.Key, err error, want []tier.Key) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		slices.SortFunc(have, less)
		want = slices.Clone(want)
		slices.SortFunc(want, less)
		if !slices.Equal(have, want) {
			t.Errorf("%s: have %v, want %v", what, have, want)
		}
	}
	keys, err := l.Keys(ctx, rootSalt)
	check("Keys(salted root)", keys, err, Keys(b))
	keys, err = l.Keys(ctx, tier.AllRoots)
	check("Keys(AllRoots)", keys, err, append(Keys(a), Keys(b)...))
	if err := s.Delete(ctx, Keys(b)); err != nil {
		t.Fatal(err)
	}
	keys, err = l.Keys(ctx, rootSalt)
	check("Keys after Delete", keys, err, nil)
	keys, err = l.Keys(ctx, rootA)
	check("Keys(other root) after Delete", keys, err, Keys(a))
}
