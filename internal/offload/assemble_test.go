package offload

import (
	"fmt"
	"testing"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
)

// TestAssemble checks the pure result assembly: which prefix of a fetched chain is usable,
// and why each other block was discarded.
func TestAssemble(t *testing.T) {
	ok := func(complete bool) checked { return checked{rec: &tier.Record{StateComplete: complete}} }
	bad := checked{err: fmt.Errorf("x: %w", tier.ErrChecksum)}
	foreign := checked{err: fmt.Errorf("x: %w", tier.ErrTokens)}
	data := []byte{1}
	for _, tc := range []struct {
		name      string
		vals      [][]byte
		dec       []checked
		found     int // blocks found by the lookup (>= len(vals))
		needState bool
		usable    int
		blocks    int // len(res.Blocks) after trimming
		reasons   string
		discarded map[string]int
	}{
		{name: "all good", vals: [][]byte{data, data, data}, dec: []checked{ok(true), ok(true), ok(true)}, found: 3,
			usable: 3, blocks: 3, reasons: ",,", discarded: map[string]int{}},
		{name: "checksum in the middle: its cause, then after_break", vals: [][]byte{data, data, data}, dec: []checked{ok(true), bad, ok(true)}, found: 3,
			usable: 1, blocks: 3, reasons: ",checksum,after_break", discarded: map[string]int{"after_break": 1, "checksum": 1}},
		{name: "first block fails: the rest after_break", vals: [][]byte{data, data, data}, dec: []checked{bad, ok(true), ok(true)}, found: 3,
			usable: 0, blocks: 3, reasons: "checksum,after_break,after_break", discarded: map[string]int{"after_break": 2, "checksum": 1}},
		{name: "each damaged block keeps its own cause after the break", vals: [][]byte{data, data, data, data, data},
			dec: []checked{ok(true), foreign, ok(true), bad, ok(true)}, found: 5,
			usable: 1, blocks: 5, reasons: ",identity,after_break,checksum,after_break",
			discarded: map[string]int{"after_break": 2, "checksum": 1, "identity": 1}},
		{name: "gap is a plain miss; a sound block after it is after_break", vals: [][]byte{data, nil, data}, dec: []checked{ok(true), {}, ok(true)}, found: 3,
			usable: 1, blocks: 3, reasons: ",,after_break", discarded: map[string]int{"after_break": 1}},
		{name: "gap at the end is trimmed", vals: [][]byte{data, nil}, dec: []checked{ok(true), {}}, found: 2,
			usable: 1, blocks: 1, reasons: "", discarded: map[string]int{}},
		{name: "incomplete state ends the prefix", vals: [][]byte{data, data, data}, dec: []checked{ok(true), ok(false), ok(false)}, found: 3, needState: true,
			usable: 1, blocks: 3, reasons: ",incomplete_state,incomplete_state", discarded: map[string]int{"incomplete_state": 2}},
		{name: "state ignored without NeedState", vals: [][]byte{data, data}, dec: []checked{ok(false), ok(false)}, found: 2,
			usable: 2, blocks: 2, reasons: ",", discarded: map[string]int{}},
		{name: "blocks not read (slower than recompute) stay found", vals: [][]byte{data}, dec: []checked{ok(true)}, found: 3,
			usable: 1, blocks: 3, reasons: ",,", discarded: map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Result{Blocks: make([]Restored, tc.found)}
			for i := range res.Blocks {
				res.Blocks[i].Found, res.Blocks[i].Tier = true, kvtier.Disk
			}
			got := assemble(&res, tc.vals, tc.dec, tc.needState, 0)
			if res.Usable != tc.usable || len(res.Blocks) != tc.blocks {
				t.Errorf("usable %d blocks %d, want %d %d", res.Usable, len(res.Blocks), tc.usable, tc.blocks)
			}
			reasons := ""
			for i, b := range res.Blocks {
				if i > 0 {
					reasons += ","
				}
				reasons += b.Reason
				if (i < res.Usable) != (b.Record != nil) {
					t.Errorf("block %d: record %v but usable prefix %d", i, b.Record != nil, res.Usable)
				}
			}
			if reasons != tc.reasons {
				t.Errorf("reasons %q, want %q", reasons, tc.reasons)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.discarded) {
				t.Errorf("discarded %v, want %v", got, tc.discarded)
			}
		})
	}
}

// TestAssembleStateSize: for a hybrid model a record flagged complete is a checkpoint only
// with its one state entry of the model's size; a truncated or foreign-sized state ends the
// restored prefix before it, as a missing one does.
func TestAssembleStateSize(t *testing.T) {
	data := []byte{1}
	rec := func(aux ...[]byte) checked { return checked{rec: &tier.Record{StateComplete: true, Aux: aux}} }
	res := Result{Blocks: make([]Restored, 4)}
	for i := range res.Blocks {
		res.Blocks[i].Found, res.Blocks[i].Tier = true, kvtier.Disk
	}
	dec := []checked{rec([]byte("ok!")), rec([]byte("ok!")), rec([]byte("ok")), rec([]byte("ok!"), []byte("x"))}
	got := assemble(&res, [][]byte{data, data, data, data}, dec, true, 3)
	if res.Usable != 2 || got[tier.ReasonIncompleteState] != 2 {
		t.Errorf("usable %d, discarded %v; want 2 usable, 2 incomplete_state", res.Usable, got)
	}
}
