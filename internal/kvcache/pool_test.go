package kvcache

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestPool runs testdata/pool.txt. Commands:
//
//	new blocks=N
//	alloc n=N          -> the ids, or the error
//	ref id=N / unref id=N / release id=N / unref-release id=N
//	                   -> the new count, or "panic: ..."
//
// Every command prints the pool state afterwards and checks invariants.
func TestPool(t *testing.T) {
	var p *Pool
	datadriven.RunTest(t, "testdata/pool.txt", func(t *testing.T, d *datadriven.TestData) (out string) {
		var b strings.Builder
		defer func() {
			if r := recover(); r != nil {
				fmt.Fprintf(&b, "panic: %v\n", r)
			}
			if p != nil {
				if err := p.CheckInvariants(); err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				fmt.Fprintf(&b, "free=%d referenced=%d cached=%d freelist=%v", p.Free(), p.Referenced(), p.Cached(), p.FreeList())
			}
			out = b.String()
		}()
		id := func() BlockID {
			var v int
			d.ScanArgs(t, "id", &v)
			return BlockID(v)
		}
		switch d.Cmd {
		case "new":
			var n int
			d.ScanArgs(t, "blocks", &n)
			p = NewPool(n)
		case "alloc":
			var n int
			d.ScanArgs(t, "n", &n)
			ids, err := p.AllocN(nil, n)
			if err != nil {
				fmt.Fprintf(&b, "error: %v\n", err)
			} else {
				fmt.Fprintf(&b, "got %v\n", ids)
			}
		case "ref":
			i := id()
			p.Ref(i)
			fmt.Fprintf(&b, "ref %d -> %d\n", i, p.RefCount(i))
		case "unref":
			i := id()
			fmt.Fprintf(&b, "ref %d -> %d\n", i, p.Unref(i))
		case "release":
			p.Release(id())
		case "unref-release":
			p.UnrefRelease(id())
		default:
			t.Fatalf("unknown command %q", d.Cmd)
		}
		return ""
	})
}

func TestBlockTable(t *testing.T) {
	tb := NewBlockTable(4)
	if got := tb.Needed(9); got != 3 {
		t.Fatalf("Needed(9) = %d, want 3", got)
	}
	tb.Append(7, 3, 5)
	for _, tc := range []struct {
		pos   int
		block BlockID
		slot  int
	}{{0, 7, 0}, {3, 7, 3}, {4, 3, 0}, {11, 5, 3}} {
		b, s := tb.Locate(tc.pos)
		if b != tc.block || s != tc.slot {
			t.Errorf("Locate(%d) = (%d, %d), want (%d, %d)", tc.pos, b, s, tc.block, tc.slot)
		}
	}
	if got := fmt.Sprint(tb.Int32s()); got != "[7 3 5]" {
		t.Errorf("Int32s = %s", got)
	}
	if got := tb.TruncateTokens(5); fmt.Sprint(got) != "[5]" || tb.Len() != 2 {
		t.Errorf("TruncateTokens(5) removed %v, left %d blocks", got, tb.Len())
	}
	if got := tb.Reset(); fmt.Sprint(got) != "[7 3]" || tb.Len() != 0 {
		t.Errorf("Reset removed %v, left %d", got, tb.Len())
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("Locate past capacity did not panic")
			}
		}()
		tb.Locate(0)
	}()
}

func TestLayoutAndArena(t *testing.T) {
	l := Layout{BlockSize: 16, Layers: 2, KVHeads: 2, HeadDim: 8, DType: F16}
	if got, want := l.BlockElems(), 2*2*16*2*8; got != want {
		t.Fatalf("BlockElems = %d, want %d", got, want)
	}
	if got, want := l.BlockBytes(), int64(2*2*16*2*8*2); got != want {
		t.Fatalf("BlockBytes = %d, want %d", got, want)
	}
	// [layer][K then V][slot][head][dim]: layer 1, V, slot 3.
	if got, want := l.Offset(1, 1, 3), ((1*2+1)*16+3)*16; got != want {
		t.Errorf("Offset = %d, want %d", got, want)
	}
	if got := l.BlocksFor(10*l.BlockBytes() + 5); got != 10 {
		t.Errorf("BlocksFor = %d, want 10", got)
	}
	for _, dt := range []DType{F32, F16} {
		l.DType = dt
		a, err := NewArenaForBudget(l, 4*l.BlockBytes(), 2)
		if err != nil {
			t.Fatal(err)
		}
		if a.NumBlocks() != 4 {
			t.Fatalf("%v: %d blocks, want 4", dt, a.NumBlocks())
		}
		d := a.BlockData(2)
		if int64(len(d)) != l.BlockBytes() {
			t.Fatalf("%v: BlockData len %d", dt, len(d))
		}
		for i := range d {
			d[i] = byte(i)
		}
		a.CopyBlock(3, 2)
		if string(a.BlockData(3)) != string(d) || a.BlockData(1)[0] != 0 {
			t.Errorf("%v: CopyBlock did not copy exactly one block", dt)
		}
	}
	_, err := NewArenaForBudget(l, 3*l.BlockBytes(), 8)
	if err == nil || !strings.Contains(err.Error(), "hold 3 blocks") || !strings.Contains(err.Error(), "need at least 8 blocks") {
		t.Errorf("small budget error = %v", err)
	}
	if _, err := NewArena(Layout{BlockSize: 16}, 1); err == nil {
		t.Errorf("invalid layout accepted")
	}
	_ = strconv.Itoa
}
