package engine

import (
	"testing"
)

// intList converts a token list to ints (the scripts' pin-owners=(…)).
func intList(v []int32) []int {
	if len(v) == 0 {
		return nil
	}
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}

// TestPinTableOwners checks the owners' accounting against a brute-force oracle: random
// reservations, pins and drops by random owners, each admitted exactly when the oracle says
// the invariant (Σ max(use, share) <= budget, use <= cap) still holds after it.
func TestPinTableOwners(t *testing.T) {
	for _, tc := range []struct {
		budget int
		caps   []int
	}{
		{12, nil},
		{12, []int{0, 0}},
		{12, []int{2, 0, 5}},
		{7, []int{1, 1, 1, 1, 1, 1, 1, 1}},
		{20, []int{-1, 30}},
	} {
		p := newPinTable(tc.budget, 4, tc.caps)
		n := len(tc.caps) + 1
		// The oracle's own view: use by owner, shares recomputed from the rule.
		share := make([]int, n)
		limit := make([]int, n)
		for o := range n {
			limit[o] = tc.budget
			if o > 0 && tc.caps[o-1] != 0 {
				limit[o] = min(max(tc.caps[o-1], 0), tc.budget)
			}
			share[o] = min(limit[o], tc.budget/n)
		}
		use := make([]int, n)
		fits := func(o, k int) bool {
			if use[o]+k > limit[o] {
				return false
			}
			held := 0
			for x := range n {
				u := use[x]
				if x == o {
					u += k
				}
				held += max(u, share[x])
			}
			return held <= tc.budget
		}
		seed := uint64(len(tc.caps)*131 + tc.budget)
		next := func(m int) int { // a fixed xorshift: the same sequence every run
			seed ^= seed << 13
			seed ^= seed >> 7
			seed ^= seed << 17
			return int(seed % uint64(m))
		}
		for step := range 2000 {
			o, k := next(n+1), 1+next(3) // o == n: an owner the table does not know (charged as 0)
			slot := o
			if o == n {
				slot = 0
			}
			if next(3) == 0 && use[slot] > 0 { // give some back
				k = min(k, use[slot])
				p.charge(uint16(o), -k)
				use[slot] -= k
			} else {
				got := p.room(uint16(o), k) == ""
				if want := fits(slot, k); got != want {
					t.Fatalf("budget %d caps %v step %d: owner %d +%d admitted %v, oracle %v (use %v)", tc.budget, tc.caps, step, o, k, got, want, use)
				}
				if got {
					p.charge(uint16(o), k)
					use[slot] += k
				}
			}
			held := 0
			for x := range n {
				held += max(use[x], share[x])
				if p.use[x] != use[x] {
					t.Fatalf("step %d: owner %d use %d, oracle %d", step, x, p.use[x], use[x])
				}
			}
			if held != p.held || held > tc.budget {
				t.Fatalf("step %d: held %d, oracle %d, budget %d", step, p.held, held, tc.budget)
			}
			// The guarantee: every owner can still take what is left of its share.
			for x := range n {
				if left := share[x] - use[x]; left > 0 && p.room(uint16(x), left) != "" {
					t.Fatalf("step %d: owner %d cannot take the %d blocks left of its share (use %v)", step, x, left, use)
				}
			}
		}
	}
}
