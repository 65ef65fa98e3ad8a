package grammar

import (
	"sort"
	"unicode/utf8"
)

// Character classes are sets of Unicode scalar values; the compiler turns each into
// alternatives of byte-range sequences, one per run of characters whose UTF-8 encodings share
// a shape, so the automaton only ever sees bytes and never admits invalid UTF-8.

const (
	surrogateLo = 0xD800
	surrogateHi = 0xDFFF
)

// normalize sorts ranges, merges overlaps and removes surrogates and out-of-range values.
func normalize(rs []runeRange) []runeRange {
	var in []runeRange
	for _, r := range rs {
		lo, hi := max(r.lo, 0), min(r.hi, utf8.MaxRune)
		if lo > hi {
			continue
		}
		if lo < surrogateLo && hi > surrogateHi {
			in = append(in, runeRange{lo, surrogateLo - 1}, runeRange{surrogateHi + 1, hi})
			continue
		}
		if lo >= surrogateLo && hi <= surrogateHi {
			continue
		}
		if lo >= surrogateLo && lo <= surrogateHi {
			lo = surrogateHi + 1
		}
		if hi >= surrogateLo && hi <= surrogateHi {
			hi = surrogateLo - 1
		}
		in = append(in, runeRange{lo, hi})
	}
	sort.Slice(in, func(i, j int) bool { return in[i].lo < in[j].lo })
	var out []runeRange
	for _, r := range in {
		if n := len(out); n > 0 && r.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, r.hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// complement returns every scalar value not in rs.
func complement(rs []runeRange) []runeRange {
	rs = normalize(rs)
	var out []runeRange
	next := rune(0)
	for _, r := range rs {
		if r.lo > next {
			out = append(out, runeRange{next, r.lo - 1})
		}
		next = r.hi + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, runeRange{next, utf8.MaxRune})
	}
	return normalize(out)
}

// byteSeq is one UTF-8 shape: the i-th byte lies in [lo[i], hi[i]].
type byteSeq struct {
	lo, hi [utf8.UTFMax]byte
	n      int
}

// utf8Seqs splits normalized ranges into byte-range sequences.
func utf8Seqs(rs []runeRange) []byteSeq {
	var out []byteSeq
	for _, r := range rs {
		for _, b := range [...]rune{0x7F, 0x7FF, 0xFFFF, utf8.MaxRune} {
			lo, hi := r.lo, min(r.hi, b)
			if lo <= hi {
				out = splitSameLength(lo, hi, out)
			}
			r.lo = max(r.lo, b+1)
			if r.lo > r.hi {
				break
			}
		}
	}
	return out
}

// splitSameLength handles lo..hi whose encodings have the same length: it cuts the range where
// a continuation byte would otherwise not run over its full 0x80..0xBF span.
func splitSameLength(lo, hi rune, out []byteSeq) []byteSeq {
	n := utf8.RuneLen(lo)
	for i := 1; i < n; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m == hi&^m {
			continue
		}
		if lo&m != 0 {
			out = splitSameLength(lo, lo|m, out)
			return splitSameLength((lo|m)+1, hi, out)
		}
		if hi&m != m {
			out = splitSameLength(lo, (hi&^m)-1, out)
			return splitSameLength(hi&^m, hi, out)
		}
	}
	var a, b [utf8.UTFMax]byte
	utf8.EncodeRune(a[:], lo)
	utf8.EncodeRune(b[:], hi)
	return append(out, byteSeq{lo: a, hi: b, n: n})
}
