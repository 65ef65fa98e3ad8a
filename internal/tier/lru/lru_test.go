package lru

import (
	"slices"
	"testing"
)

func order(l *List[int]) []int {
	var out []int
	for n := l.Front(); n != nil; n = l.Next(n) {
		out = append(out, n.Value)
	}
	return out
}

// TestListAgainstSlice checks the list against a slice kept in the same order (the oracle).
func TestListAgainstSlice(t *testing.T) {
	var l List[int]
	if l.Back() != nil || l.Front() != nil || l.Len() != 0 {
		t.Fatal("zero list not empty")
	}
	nodes := make([]*Node[int], 8)
	for i := range nodes {
		nodes[i] = &Node[int]{Value: i}
	}
	var want []int // front first
	in := map[int]bool{}
	ops := []struct {
		op string
		v  int
	}{{"push", 0}, {"push", 1}, {"push", 2}, {"touch", 0}, {"push", 3}, {"remove", 1}, {"touch", 3},
		{"push", 4}, {"remove", 0}, {"touch", 2}, {"push", 1}, {"evict", 0}, {"evict", 0}, {"push", 0}}
	for i, o := range ops {
		switch o.op {
		case "push":
			l.PushFront(nodes[o.v])
			want = append([]int{o.v}, want...)
			in[o.v] = true
		case "touch":
			l.MoveToFront(nodes[o.v])
			want = append([]int{o.v}, slices.DeleteFunc(want, func(x int) bool { return x == o.v })...)
		case "remove":
			l.Remove(nodes[o.v])
			want = slices.DeleteFunc(want, func(x int) bool { return x == o.v })
			in[o.v] = false
		case "evict":
			b := l.Back()
			if b.Value != want[len(want)-1] {
				t.Fatalf("op %d: back %d, want %d", i, b.Value, want[len(want)-1])
			}
			l.Remove(b)
			want = want[:len(want)-1]
		}
		if got := order(&l); !slices.Equal(got, want) || l.Len() != len(want) {
			t.Fatalf("op %d (%s %d): order %v len %d, want %v", i, o.op, o.v, got, l.Len(), want)
		}
	}
}

func TestMisusePanics(t *testing.T) {
	var l List[int]
	n := &Node[int]{}
	l.PushFront(n)
	for name, f := range map[string]func(){
		"push twice":      func() { l.PushFront(n) },
		"remove detached": func() { l.Remove(&Node[int]{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
