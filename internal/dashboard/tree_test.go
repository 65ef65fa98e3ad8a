package dashboard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/prefix"
)

func h(s string) prefix.Hash {
	var x prefix.Hash
	copy(x[:], s)
	return x
}

func render(ns []*Node, depth int, b *strings.Builder) {
	for _, n := range ns {
		fmt.Fprintf(b, "%s%s blocks=%d first=%d tokens=%d hits=%d pinned=%d subtree=%d more=%d\n",
			strings.Repeat("  ", depth), n.Hash, n.Blocks, n.FirstBlock, n.Tokens, n.Hits, n.Pinned, n.Subtree, n.MoreBelow)
		render(n.Children, depth+1, b)
	}
}

// TestTree: a shared prefix of three blocks is one node, its two branches its children, an
// unrelated prompt its own root; runs without a branch merge, the busiest come first, and
// maxChildren cuts the rest (counted).
func TestTree(t *testing.T) {
	root := h("root")
	blocks := []Block{ // any order
		{Hash: h("b2"), Parent: h("a3"), Depth: 3, Hits: 1},
		{Hash: h("a1"), Parent: root, Depth: 0, Hits: 9, Pinned: true},
		{Hash: h("a2"), Parent: h("a1"), Depth: 1, Hits: 9, Pinned: true},
		{Hash: h("a3"), Parent: h("a2"), Depth: 2, Hits: 7},
		{Hash: h("c1"), Parent: h("a3"), Depth: 3, Hits: 2},
		{Hash: h("c2"), Parent: h("c1"), Depth: 4, Hits: 2},
		{Hash: h("d1"), Parent: root, Depth: 0},
		{Hash: h("e1"), Parent: h("a3"), Depth: 3},
	}
	var b strings.Builder
	render(Tree(blocks, 16, 10, 2), 0, &b)
	want := []string{
		fmt.Sprintf("%s blocks=3 first=0 tokens=48 hits=9 pinned=2 subtree=7 more=1", h("a1").Short()),
		fmt.Sprintf("  %s blocks=2 first=3 tokens=80 hits=2 pinned=0 subtree=2 more=0", h("c1").Short()),
		fmt.Sprintf("  %s blocks=1 first=3 tokens=64 hits=1 pinned=0 subtree=1 more=0", h("b2").Short()),
		fmt.Sprintf("%s blocks=1 first=0 tokens=16 hits=0 pinned=0 subtree=1 more=0", h("d1").Short()),
	}
	if got := strings.TrimSpace(b.String()); got != strings.Join(want, "\n") {
		t.Errorf("tree:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if got := Tree(blocks, 16, 1, 2); len(got) != 1 {
		t.Errorf("maxRoots 1: %d roots", len(got))
	}
	if got := Tree(nil, 16, 10, 2); len(got) != 0 {
		t.Errorf("empty: %d roots", len(got))
	}
}

// TestFlatten: counters and gauges by value, histograms as _sum and _count, labels sorted,
// NaN as null, other families left out.
func TestFlatten(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_x_total", Help: "x"}, []string{"tier", "a"})
	c.WithLabelValues("host", "1").Add(3)
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stockpot_rate", Help: "r"}, func() float64 { return nan() })
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "stockpot_h_seconds", Help: "h"})
	hist.Observe(0.5)
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "go_other", Help: "o"})
	reg.MustRegister(c, g, hist, other)
	m, err := Flatten(reg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{`stockpot_x_total{a="1",tier="host"}`: 3.0, "stockpot_rate": nil, "stockpot_h_seconds_sum": 0.5, "stockpot_h_seconds_count": 1.0}
	if fmt.Sprint(m) != fmt.Sprint(want) {
		t.Errorf("flatten: %v\nwant %v", m, want)
	}
}

func nan() float64 { var z float64; return z / z }
