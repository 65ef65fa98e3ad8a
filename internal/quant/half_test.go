package quant

import (
	"math"
	"testing"
)

func TestF16(t *testing.T) {
	tests := []struct {
		f    float32
		want uint16
	}{
		{0, 0}, {float32(math.Copysign(0, -1)), 0x8000}, {1, 0x3c00}, {-2, 0xc000},
		{65504, 0x7bff}, {65519.99, 0x7bff}, {65520, 0x7c00}, {1e10, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
		{5.960464477539063e-08, 0x0001},  // smallest subnormal
		{2.9802322387695312e-08, 0x0000}, // half of it: tie to even (0)
		{2.98023260e-08, 0x0001},         // just above the tie
		{8.940696716308594e-08, 0x0002},  // 1.5 ulp: tie to even (2)
		{1.0009765625, 0x3c01},           // exact
		{1.00048828125, 0x3c00},          // tie between 0x3c00 and 0x3c01: even
		{1.00146484375, 0x3c02},          // tie between 0x3c01 and 0x3c02: even
		{6.097555e-05, 0x03ff},           // largest subnormal
		{6.1035156e-05, 0x0400},          // smallest normal
		{math.Float32frombits(0x7f800001), 0x7e00},
		{math.Float32frombits(0xffc12345), 0xfe09},
	}
	for _, tt := range tests {
		if have := F32ToF16(tt.f); have != tt.want {
			t.Errorf("F32ToF16(%g): have %#04x, want %#04x", tt.f, have, tt.want)
		}
	}
	// Every finite half converts to float32 and back unchanged.
	for h := range 1 << 16 {
		f := F16ToF32(uint16(h))
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			if !math.IsNaN(float64(f)) {
				t.Errorf("F16ToF32(%#04x): have %v, want NaN", h, f)
			}
			continue
		}
		if back := F32ToF16(f); back != uint16(h) {
			t.Errorf("F32ToF16(F16ToF32(%#04x)) = %#04x (via %v)", h, back, f)
		}
	}
}

func TestBF16(t *testing.T) {
	tests := []struct {
		f    float32
		want uint16
	}{
		{1, 0x3f80}, {-1, 0xbf80}, {0, 0},
		{math.Float32frombits(0x3f808000), 0x3f80}, // tie, even stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // tie, odd rounds up
		{math.Float32frombits(0x3f808001), 0x3f81},
		{math.Float32frombits(0x7f800001), 0x7fc0}, // NaN forced quiet
		{math.Float32frombits(0x7f7fffff), 0x7f80}, // rounds to Inf
	}
	for _, tt := range tests {
		if have := F32ToBF16(tt.f); have != tt.want {
			t.Errorf("F32ToBF16(%#08x): have %#04x, want %#04x", math.Float32bits(tt.f), have, tt.want)
		}
	}
	if have := BF16ToF32(0x3f80); have != 1 {
		t.Errorf("BF16ToF32(0x3f80): have %v, want 1", have)
	}
}

func TestFMA32(t *testing.T) {
	// 1+2^-23 squared = 1 + 2^-22 + 2^-46: the 2^-46 decides the rounding
	// when c = -2^-24 pulls the sum toward a tie.
	a := float32(1 + 1.0/(1<<23))
	tests := []struct{ a, b, c, want float32 }{
		{2, 3, 1, 7},
		{a, a, 0, float32(1 + 1.0/(1<<22))},
		{a, a, -1, float32(1.0/(1<<22) + 1.0/(1<<46))},
	}
	for _, tt := range tests {
		if have := fma32(tt.a, tt.b, tt.c); have != tt.want {
			t.Errorf("fma32(%v, %v, %v): have %v, want %v", tt.a, tt.b, tt.c, have, tt.want)
		}
	}
}
