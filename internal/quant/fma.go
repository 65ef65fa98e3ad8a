package quant

import "math"

// fma32 returns a*b+c rounded once to float32, as VFMADD231PS does.
//
// a*b is exact in float64 (24+24 bits). The sum is rounded to float64 with
// round-to-odd (TwoSum gives the error; an inexact even result is nudged to
// its odd neighbour toward the error), and round-to-odd to 53 bits followed
// by a rounding to 24 bits equals a single rounding to 24 bits.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	cc := float64(c)
	s := p + cc
	bb := s - p
	e := (p - (s - bb)) + (cc - bb)
	if e != 0 && s != 0 && !math.IsInf(s, 0) {
		bits := math.Float64bits(s)
		if bits&1 == 0 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// hsum8 is ggml's hsum_float_8 order: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)).
func hsum8(a *[8]float32) float32 {
	r0, r1, r2, r3 := a[0]+a[4], a[1]+a[5], a[2]+a[6], a[3]+a[7]
	return float32(r0+r2) + float32(r1+r3)
}

// hsum4 is the 4-lane tail of ggml's Q4_K dot: (a0+a2) + (a1+a3).
func hsum4(a *[4]float32) float32 { return float32(a[0]+a[2]) + float32(a[1]+a[3]) }
