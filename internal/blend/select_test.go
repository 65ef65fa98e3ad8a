package blend

import (
	"fmt"
	"reflect"
	"testing"
)

func TestSelectEPIC(t *testing.T) {
	for _, tc := range []struct {
		name    string
		from, n int
		places  []Placement
		f       float64
		want    Selection
	}{
		{
			name: "system prompt, two chunks, question", from: 16, n: 100,
			places: []Placement{{Chunk{20, 52}, 32}, {Chunk{52, 90}, 32}}, f: 0.25,
			want: Selection{
				Copies:    []Copy{{Chunk: 0, Dst: 20, N: 32, Recompute: 8}, {Chunk: 1, Dst: 52, N: 32, Recompute: 10}},
				Recompute: []Range{{16, 28}, {52, 62}, {84, 100}},
				Blended:   24 + 22, Recomputed: 18, Exact: 28,
			},
		},
		{
			name: "fraction 1 recomputes everything", from: 0, n: 40,
			places: []Placement{{Chunk{8, 40}, 32}}, f: 1,
			want: Selection{Copies: []Copy{{Chunk: 0, Dst: 8, N: 31, Recompute: 31}}, Recompute: []Range{{0, 40}},
				Recomputed: 31, Exact: 40},
		},
		{
			name: "fraction 0 at position 0: everything but the tail blended", from: 0, n: 40,
			places: []Placement{{Chunk{0, 36}, 32}}, f: 0,
			want: Selection{Copies: []Copy{{Chunk: 0, Dst: 0, N: 32}}, Recompute: []Range{{32, 40}}, Blended: 32, Exact: 0},
		},
		{
			name: "chunk inside the exact prefix is left to it", from: 48, n: 60,
			places: []Placement{{Chunk{16, 48}, 32}}, f: 0,
			want: Selection{Recompute: []Range{{48, 60}}, Exact: 60},
		},
		{
			name: "chunk the prefix reaches into: its part past from copied", from: 32, n: 60,
			places: []Placement{{Chunk{16, 48}, 32}}, f: 0,
			want: Selection{Copies: []Copy{{Chunk: 0, Src: 16, Dst: 32, N: 16}}, Recompute: []Range{{48, 60}}, Blended: 16, Exact: 32},
		},
		{
			name: "prefix inside the head: the head's rest recomputed", from: 32, n: 80,
			places: []Placement{{Chunk{20, 68}, 48}}, f: 0.5,
			want: Selection{Copies: []Copy{{Chunk: 0, Src: 12, Dst: 32, N: 36, Recompute: 12}}, Recompute: []Range{{32, 44}, {68, 80}},
				Blended: 24, Recomputed: 12, Exact: 44},
		},
		{
			name: "prefix past the head and the cached part: computed", from: 56, n: 80,
			places: []Placement{{Chunk{20, 68}, 32}}, f: 0.5,
			want: Selection{Recompute: []Range{{56, 80}}, Exact: 80},
		},
		{
			name: "uncached chunk computed as usual", from: 0, n: 60,
			places: []Placement{{Chunk{10, 20}, 0}}, f: 0,
			want: Selection{Recompute: []Range{{0, 60}}, Exact: 60},
		},
		{
			name: "chunk at the end keeps the last token computed", from: 0, n: 32,
			places: []Placement{{Chunk{0, 32}, 32}}, f: 0,
			want: Selection{Copies: []Copy{{Chunk: 0, Dst: 0, N: 31}}, Recompute: []Range{{31, 32}}, Blended: 31, Exact: 0},
		},
	} {
		have := SelectEPIC(tc.from, tc.n, tc.places, tc.f)
		if !reflect.DeepEqual(have, tc.want) {
			t.Errorf("%s:\nhave %+v\nwant %+v", tc.name, have, tc.want)
		}
	}
}

// TestSelectEPICCovers checks, by brute force over small layouts, that every position past
// from is copied-and-kept or recomputed, exactly one of the two, and the last recomputed.
func TestSelectEPICCovers(t *testing.T) {
	for n := 1; n <= 24; n++ {
		for from := 0; from <= n; from++ {
			for s := 0; s < n; s++ {
				for e := s + 1; e <= n; e++ {
					for cached := 0; cached <= e-s; cached += 4 {
						for _, f := range []float64{0, 0.3, 1} {
							sel := SelectEPIC(from, n, []Placement{{Chunk{s, e}, cached}}, f)
							if err := coverage(sel, from, n); err != nil {
								t.Fatalf("from %d n %d chunk [%d,%d) cached %d f %v: %v (%+v)", from, n, s, e, cached, f, err, sel)
							}
						}
					}
				}
			}
		}
	}
}

func coverage(sel Selection, from, n int) error {
	kept := make([]int, n)
	for _, c := range sel.Copies {
		for p := c.Dst + c.Recompute; p < c.Dst+c.N; p++ {
			kept[p]++
		}
	}
	last := -1
	for _, r := range sel.Recompute {
		if r.Lo < last || r.Lo >= r.Hi {
			return fmt.Errorf("range %v out of order", r)
		}
		last = r.Hi
		for p := r.Lo; p < r.Hi; p++ {
			kept[p] += 10
		}
	}
	blended := 0
	for p := from; p < n; p++ {
		switch kept[p] {
		case 1:
			blended++
		case 10:
		default:
			return fmt.Errorf("position %d covered %d", p, kept[p])
		}
	}
	if n > from && kept[n-1] != 10 {
		return fmt.Errorf("last position not recomputed")
	}
	if blended != sel.Blended {
		return fmt.Errorf("blended %d, counted %d", blended, sel.Blended)
	}
	return nil
}
