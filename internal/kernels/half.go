package kernels

import "math"

// f16ToF32 widens an IEEE half. Exact, as VCVTPH2PS.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf or nan (payload kept)
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal half: normalize.
	e := uint32(113)
	for mant&0x400 == 0 {
		mant <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
}

// f32ToF16 rounds to the nearest half, ties to even, as VCVTPS2PH with
// imm8 = 0 (what ggml uses on x86). NaNs become quiet NaNs with the top
// payload bits kept.
func f32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7e00 | uint16(mant>>13)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Half subnormal (unit 2^-24) or zero: value = m >> shift.
		shift := uint(14 - e)
		if shift > 24 {
			return sign
		}
		m := mant | 0x800000
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // a carry into the exponent is right, up to inf
	}
	return sign | uint16(r)
}

// bf16ToF32 widens a bfloat16 (exact).
func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToBF16 rounds as ggml's GGML_FP32_TO_BF16: nearest, ties to even,
// NaNs forced quiet.
func f32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// roundF16Ref sets dst[i] to src[i] rounded to half precision and widened
// back, which is what ggml's F16 vec_dot sees of the activations.
func roundF16Ref(dst, src []float32) {
	for i, v := range src {
		dst[i] = f16ToF32(f32ToF16(v))
	}
}

// roundBF16 is roundF16Ref for bfloat16 (ggml's BF16 vec_dot_type).
func roundBF16(dst, src []float32) {
	for i, v := range src {
		dst[i] = bf16ToF32(f32ToBF16(v))
	}
}
