package kvcache

import (
	"errors"
	"testing"
)

func TestLayoutBytes(t *testing.T) {
	base := Layout{BlockSize: 16, Layers: 30, KVHeads: 3, HeadDim: 64}
	for _, tt := range []struct {
		dt         DType
		row, block int64
	}{
		{F32, 3 * 64 * 4, 30 * 2 * 16 * 3 * 64 * 4},
		{F16, 3 * 64 * 2, 30 * 2 * 16 * 3 * 64 * 2},
		{Q8_0, 3 * 2 * 34, 30 * 2 * 16 * 3 * 2 * 34},
	} {
		l := base
		l.DType = tt.dt
		if err := l.Validate(); err != nil {
			t.Fatalf("%v: %v", tt.dt, err)
		}
		if have := int64(l.RowBytes()); have != tt.row {
			t.Errorf("%v: RowBytes %d, want %d", tt.dt, have, tt.row)
		}
		if have := l.BlockBytes(); have != tt.block {
			t.Errorf("%v: BlockBytes %d, want %d", tt.dt, have, tt.block)
		}
		if have, want := l.TokenBytes(), tt.block/16; have != want {
			t.Errorf("%v: TokenBytes %d, want %d", tt.dt, have, want)
		}
		if have, want := l.ByteOffset(29, 1, 15), int(tt.block-tt.row); have != want {
			t.Errorf("%v: ByteOffset of the last row %d, want %d", tt.dt, have, want)
		}
		a, err := NewArena(l, 3)
		if err != nil {
			t.Fatal(err)
		}
		if have := int64(len(a.BlockData(2))); have != tt.block {
			t.Errorf("%v: len(BlockData) %d, want %d", tt.dt, have, tt.block)
		}
		if (a.Q8() != nil) != (tt.dt == Q8_0) || (a.F16() != nil) != (tt.dt == F16) || (a.F32() != nil) != (tt.dt == F32) {
			t.Errorf("%v: wrong slab allocated", tt.dt)
		}
		a.BlockData(1)[5] = 7
		a.CopyBlock(2, 1)
		if a.BlockData(2)[5] != 7 || a.BlockData(0)[5] != 0 {
			t.Errorf("%v: CopyBlock did not copy exactly block 1 to block 2", tt.dt)
		}
	}
}

func TestLayoutValidateQ8(t *testing.T) {
	l := Layout{BlockSize: 16, Layers: 2, KVHeads: 2, HeadDim: 48, DType: Q8_0}
	if err := l.Validate(); !errors.Is(err, ErrLayout) {
		t.Fatalf("head dim 48 with q8_0: have %v, want ErrLayout", err)
	}
	l.DType = 9
	if err := l.Validate(); !errors.Is(err, ErrLayout) {
		t.Fatalf("dtype 9: have %v, want ErrLayout", err)
	}
}

func TestParseDType(t *testing.T) {
	for _, d := range []DType{F32, F16, Q8_0} {
		for _, s := range []string{d.String(), map[DType]string{F32: "F32", F16: "F16", Q8_0: "Q8_0"}[d]} {
			have, err := ParseDType(s)
			if err != nil || have != d {
				t.Errorf("ParseDType(%q) = %v, %v; want %v", s, have, err, d)
			}
		}
	}
	for _, s := range []string{"", "bf16", "q8", "q4_0"} {
		if _, err := ParseDType(s); !errors.Is(err, ErrLayout) {
			t.Errorf("ParseDType(%q): have %v, want ErrLayout", s, err)
		}
	}
}
