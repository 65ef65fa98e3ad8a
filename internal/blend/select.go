package blend

import (
	"fmt"
	"math"
)

// Placement is one chunk as the engine found it for a prompt: where it sits and how many of
// its leading tokens have cached K/V (its full blocks under ChunkRoot; 0 when none).
type Placement struct {
	Chunk
	Cached int // <= Len(); a multiple of the block size except where the chunk ends
}

// Copy moves chunk K/V into the prompt: prompt positions [Dst, Dst+N) take the cached K/V
// of chunk positions [Src, Src+N) of Placements[Chunk], keys re-rotated by Dst−Src.
type Copy struct {
	Chunk     int
	Src, Dst  int
	N         int
	Recompute int // how many of the N positions, from Dst, are then recomputed
}

// Range is a span [Lo, Hi) of prompt positions.
type Range struct{ Lo, Hi int }

// Selection is what a blend does to positions [from, n) of a prompt: the copies, applied
// first, then the recompute ranges in position order. Every position in [from, n) is either
// copied (and not recomputed), or recomputed; the last, n−1, is always recomputed.
type Selection struct {
	Copies    []Copy
	Recompute []Range
	// Blended counts the positions whose K/V come from a chunk and stay (copied, not
	// recomputed); Recomputed the copied positions recomputed afterwards.
	Blended, Recomputed int
	// Exact is the first position whose K/V may differ from a full prefill's: the first
	// blended one (n when none is). Positions before it are exact.
	Exact int
}

// SelectEPIC plans EPIC over positions [from, n) of a prompt of n tokens: each placed chunk
// that ends past from and has cached tokens is copied, then its first ⌈f·len⌉ tokens
// recomputed (at least the ones past its cached part); every other position is recomputed.
// A chunk the exact prefix reaches into (Start < from < End) has only its part past from
// copied (chunk positions from−Start on) and only the part of its head past from
// recomputed: the head's positions before from are the prefix's exact K/V already. places
// must be sorted by start and disjoint (Spec.Validate, Normalize).
func SelectEPIC(from, n int, places []Placement, f float64) Selection {
	if from < 0 || from > n || f < 0 || f > 1 || math.IsNaN(f) {
		panic(fmt.Sprintf("blend: SelectEPIC from %d n %d f %v", from, n, f))
	}
	sel := Selection{Exact: n}
	pos := from // positions < pos are planned
	addRange := func(lo, hi int) {
		if lo >= hi {
			return
		}
		if k := len(sel.Recompute); k > 0 && sel.Recompute[k-1].Hi == lo {
			sel.Recompute[k-1].Hi = hi
			return
		}
		sel.Recompute = append(sel.Recompute, Range{lo, hi})
	}
	for i, p := range places {
		if p.End <= from || p.Cached <= 0 || p.End > n {
			continue // in the exact prefix, or nothing cached: computed as usual
		}
		if p.Cached > p.Len() {
			panic(fmt.Sprintf("blend: placement %d caches %d of %d tokens", i, p.Cached, p.Len()))
		}
		// Chunk-relative offsets from here: o is where the chunk leaves the exact prefix (0
		// unless the prefix reaches into it), rc the end of its recomputed head, cached the
		// end of its copied part.
		o := max(from-p.Start, 0)
		addRange(pos, p.Start+o)
		r := min(int(math.Ceil(f*float64(p.Len()))), p.Len())
		// The copied part is the cached one, less a last token that must be recomputed.
		cached := p.Cached
		if p.Start+cached >= n {
			cached = n - 1 - p.Start
		}
		rc := max(min(r, cached), o)
		if cached > o {
			sel.Copies = append(sel.Copies, Copy{Chunk: i, Src: o, Dst: p.Start + o, N: cached - o, Recompute: rc - o})
			sel.Recomputed += rc - o
			sel.Blended += cached - rc
			if cached > rc && sel.Exact == n {
				sel.Exact = p.Start + rc
			}
		}
		addRange(p.Start+o, p.Start+rc)
		addRange(p.Start+max(cached, rc), p.End)
		pos = p.End
	}
	addRange(pos, n)
	if k := len(sel.Recompute); n > from && (k == 0 || sel.Recompute[k-1].Hi != n) {
		panic("blend: the last prompt position is not recomputed") // the cut above ensures it
	}
	return sel
}
