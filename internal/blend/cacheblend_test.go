package blend

import (
	"math"
	"reflect"
	"testing"
)

func TestSelectCacheBlend(t *testing.T) {
	nan := float32(math.NaN())
	two := []Copy{{Chunk: 0, Dst: 10, N: 4}, {Chunk: 1, Dst: 20, N: 3}} // positions 10..13, 20..22
	for _, tc := range []struct {
		name   string
		copies []Copy
		dev    []float32
		f      float64
		want   []int
	}{
		{"fraction 0 picks nothing", two, []float32{1, 2, 3, 4, 5, 6, 7}, 0, nil},
		{"fraction 1 picks every copied position", two, []float32{1, 2, 3, 4, 5, 6, 7}, 1, []int{10, 11, 12, 13, 20, 21, 22}},
		{"largest across chunks, ascending", two, []float32{0.5, 9, 0.1, 0.2, 3, 0.3, 8}, 0.4, []int{11, 20, 22}}, // ⌈2.8⌉ = 3
		{"ceil: one of seven at 0.1", two, []float32{0.5, 9, 0.1, 0.2, 3, 0.3, 8}, 0.1, []int{11}},
		{"ties go to the earlier position", two, []float32{1, 2, 2, 1, 2, 1, 1}, 0.3, []int{11, 12, 20}},
		{"NaN ranks first", two, []float32{1, 2, nan, 1, 5, 1, 1}, 0.2, []int{12, 20}},
		{"all equal: the first k", two, []float32{0, 0, 0, 0, 0, 0, 0}, 0.5, []int{10, 11, 12, 13}},
		{"no copies", nil, nil, 0.5, nil},
	} {
		have := SelectCacheBlend(tc.copies, tc.dev, tc.f)
		if !reflect.DeepEqual(have, tc.want) {
			t.Errorf("%s: have %v, want %v", tc.name, have, tc.want)
		}
		if n := len(tc.dev); len(have) != CacheBlendCount(n, tc.f) {
			t.Errorf("%s: %d picked, want ⌈%v·%d⌉ = %d", tc.name, len(have), tc.f, n, CacheBlendCount(n, tc.f))
		}
	}
}

func TestCacheBlendCount(t *testing.T) {
	for _, tc := range []struct {
		n    int
		f    float64
		want int
	}{{0, 0.5, 0}, {10, 0, 0}, {10, 1, 10}, {20, 0.15, 3}, {21, 0.15, 4}, {100, 0.15, 15}, {7, 0.01, 1}} {
		if have := CacheBlendCount(tc.n, tc.f); have != tc.want {
			t.Errorf("CacheBlendCount(%d, %v) = %d, want %d", tc.n, tc.f, have, tc.want)
		}
	}
}

func TestRecomputePositions(t *testing.T) {
	// System prompt [0,16) exact, chunk [20,52) cached 32, chunk [52,90) cached 32, question.
	sel := SelectEPIC(16, 100, []Placement{{Chunk{20, 52}, 32}, {Chunk{52, 90}, 32}}, 0)
	for _, tc := range []struct {
		name   string
		picked []int
		want   []int
	}{
		{"none picked: the uncovered positions", nil, concat(span(16, 20), span(84, 100))},
		{"picked merged in order", []int{21, 50, 53, 83}, concat(span(16, 20), []int{21, 50, 53, 83}, span(84, 100))},
		{"all picked: the whole suffix", span(20, 84), span(16, 100)},
	} {
		have := RecomputePositions(sel, tc.picked)
		if !reflect.DeepEqual(have, tc.want) {
			t.Errorf("%s:\nhave %v\nwant %v", tc.name, have, tc.want)
		}
	}
	// A picked position inside a range (the engine never picks one: picks are copied
	// positions) still appears once.
	if have, want := RecomputePositions(Selection{Recompute: []Range{{0, 3}}}, []int{1, 5}), []int{0, 1, 2, 5}; !reflect.DeepEqual(have, want) {
		t.Errorf("picked inside a range: have %v, want %v", have, want)
	}
}

func span(lo, hi int) []int {
	out := make([]int, 0, hi-lo)
	for p := lo; p < hi; p++ {
		out = append(out, p)
	}
	return out
}

func concat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
