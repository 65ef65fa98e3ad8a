package blend

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// DefaultCheckLayer is the layer at which CacheBlend measures how far a chunk token's cached
// K/V is from the K/V it has in the prompt. Layer 0's K/V of a token depend only on its
// embedding and, for keys, its position, so after re-rotation they never deviate (beyond
// rounding): layer 1 is the first whose K/V see the other tokens, and the cheapest to reach
// (the measuring pass runs layer 0 and layer 1's projections only).
const DefaultCheckLayer = 1

// CacheBlendCount is how many of n copied positions CacheBlend recomputes at fraction f:
// ⌈f·n⌉ (the formula SelectEPIC uses per chunk), at most n.
func CacheBlendCount(n int, f float64) int {
	if n < 0 || f < 0 || f > 1 || math.IsNaN(f) {
		panic(fmt.Sprintf("blend: CacheBlendCount n %d f %v", n, f))
	}
	return min(int(math.Ceil(f*float64(n))), n)
}

// SelectCacheBlend picks CacheBlend's recompute set for one request: of the positions its
// copies place (copies in order, each its N positions from Dst), the CacheBlendCount(n, f)
// whose deviation is largest, returned ascending. dev[i] is the deviation of the i-th
// copied position in that order (len(dev) == Σ N). Ties go to the earlier position, and a
// NaN deviation ranks above every number (something broke there: recompute it), so the set
// is a function of (copies, dev, f) alone.
//
// The set is per request, not per chunk: the later a chunk sits, the more context it missed
// when cached, and a per-request budget follows the deviation wherever it is.
func SelectCacheBlend(copies []Copy, dev []float32, f float64) []int {
	n := 0
	for _, c := range copies {
		n += c.N
	}
	if len(dev) != n {
		panic(fmt.Sprintf("blend: SelectCacheBlend with %d deviations for %d copied positions", len(dev), n))
	}
	k := CacheBlendCount(n, f)
	if k == 0 {
		return nil
	}
	type cand struct {
		pos int
		dev float32
	}
	cands := make([]cand, 0, n)
	for _, c := range copies {
		for j := range c.N {
			cands = append(cands, cand{c.Dst + j, dev[len(cands)]})
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		an, bn := a.dev != a.dev, b.dev != b.dev // NaN first
		switch {
		case an != bn:
			if an {
				return -1
			}
			return 1
		case !an && a.dev != b.dev:
			return cmp.Compare(b.dev, a.dev) // larger first
		}
		return cmp.Compare(a.pos, b.pos)
	})
	picked := make([]int, k)
	for i := range picked {
		picked[i] = cands[i].pos
	}
	slices.Sort(picked)
	return picked
}

// RecomputePositions is CacheBlend's recompute list: every position of sel.Recompute (the
// positions no chunk covers, the last prompt position among them) and the picked ones,
// ascending, each once. The engine runs them in this order, so a token is computed after
// every position before it holds its final K/V (copied or recomputed). With every copied
// position picked it is [from, n): a full prefill's order.
func RecomputePositions(sel Selection, picked []int) []int {
	n := len(picked)
	for _, r := range sel.Recompute {
		n += r.Hi - r.Lo
	}
	out := make([]int, 0, n)
	i := 0
	for _, r := range sel.Recompute {
		for ; i < len(picked) && picked[i] < r.Lo; i++ {
			out = append(out, picked[i])
		}
		for p := r.Lo; p < r.Hi; p++ {
			out = append(out, p)
		}
		for ; i < len(picked) && picked[i] < r.Hi; i++ { // a picked position in a range: once
		}
	}
	out = append(out, picked[i:]...)
	return out
}
