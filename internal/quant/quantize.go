package quant

import (
	"encoding/binary"
	"fmt"
	"math"

	"stockpot/internal/gguf"
)

// Block layouts (ggml-common.h). All multi-byte fields are little-endian.
const (
	qk0 = 32  // elements per Q4_0/Q8_0 block
	qkK = 256 // elements per K-quant super-block

	q4_0Bytes = 18  // f16 d, 16 bytes of nibbles (element j low, j+16 high)
	q5_0Bytes = 22  // f16 d, u32 qh (bit j: element j's 5th bit), 16 bytes of nibbles as Q4_0
	q8_0Bytes = 34  // f16 d, 32 int8
	q4_KBytes = 144 // f16 d, f16 dmin, 12 bytes 6-bit scales+mins, 128 bytes nibbles
	q5_KBytes = 176 // Q4_K's 16-byte header, 32 bytes qh (5th bits), 128 bytes nibbles
	q6_KBytes = 210 // 128 ql, 64 qh, 16 int8 scales, f16 d
	q8_KBytes = 292 // f32 d, 256 int8, 16 int16 bsums

	// groupMaxEps is ggml's GROUP_MAX_EPS: a group whose max |x| is below it
	// quantizes to zero.
	groupMaxEps = 1e-15
)

// checkRow validates a (src, dst) pair of n elements of type t. It returns
// the number of blocks.
func checkRow(t gguf.Type, n, nbytes int) (int, error) {
	if !t.Valid() {
		return 0, fmt.Errorf("quant: unsupported type %s", t)
	}
	bs := t.BlockSize()
	if n%bs != 0 {
		return 0, fmt.Errorf("quant: %s row of %d elements is not a multiple of the block size %d", t, n, bs)
	}
	if want := t.RowBytes(n); nbytes != want {
		return 0, fmt.Errorf("quant: %s row of %d elements takes %d bytes, have %d", t, n, want, nbytes)
	}
	return n / bs, nil
}

// QuantizeRow quantizes src into dst as ggml's quantize_row_<t>_ref would
// (F32/F16/BF16 convert element-wise). len(src) must be a multiple of the
// block size and len(dst) exactly t.RowBytes(len(src)).
func QuantizeRow(t gguf.Type, src []float32, dst []byte) error {
	nb, err := checkRow(t, len(src), len(dst))
	if err != nil {
		return err
	}
	switch t {
	case gguf.TypeF32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case gguf.TypeF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	case gguf.TypeBF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
	case gguf.TypeQ4_0:
		for i := range nb {
			quantizeQ4_0(src[i*qk0:(i+1)*qk0], dst[i*q4_0Bytes:(i+1)*q4_0Bytes])
		}
	case gguf.TypeQ5_0:
		for i := range nb {
			quantizeQ5_0(src[i*qk0:(i+1)*qk0], dst[i*q5_0Bytes:(i+1)*q5_0Bytes])
		}
	case gguf.TypeQ8_0:
		for i := range nb {
			quantizeQ8_0Ref(src[i*qk0:(i+1)*qk0], dst[i*q8_0Bytes:(i+1)*q8_0Bytes])
		}
	case gguf.TypeQ4_K:
		for i := range nb {
			quantizeQ4_K(src[i*qkK:(i+1)*qkK], dst[i*q4_KBytes:(i+1)*q4_KBytes])
		}
	case gguf.TypeQ5_K:
		for i := range nb {
			quantizeQ5_K(src[i*qkK:(i+1)*qkK], dst[i*q5_KBytes:(i+1)*q5_KBytes])
		}
	case gguf.TypeQ6_K:
		for i := range nb {
			quantizeQ6_K(src[i*qkK:(i+1)*qkK], dst[i*q6_KBytes:(i+1)*q6_KBytes])
		}
	case gguf.TypeQ8_K:
		for i := range nb {
			quantizeQ8_K(src[i*qkK:(i+1)*qkK], dst[i*q8_KBytes:(i+1)*q8_KBytes])
		}
	}
	return nil
}

// DequantizeRow expands src into dst as ggml's dequantize_row_<t>.
func DequantizeRow(t gguf.Type, src []byte, dst []float32) error {
	nb, err := checkRow(t, len(dst), len(src))
	if err != nil {
		return err
	}
	switch t {
	case gguf.TypeF32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case gguf.TypeF16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case gguf.TypeBF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case gguf.TypeQ4_0:
		for i := range nb {
			b, y := src[i*q4_0Bytes:], dst[i*qk0:]
			d := f16At(b, 0)
			for j := range 16 {
				y[j] = float32(int(b[2+j]&0xf)-8) * d
				y[j+16] = float32(int(b[2+j]>>4)-8) * d
			}
		}
	case gguf.TypeQ5_0:
		for i := range nb {
			b, y := src[i*q5_0Bytes:], dst[i*qk0:]
			d := f16At(b, 0)
			for j := range 16 {
				y[j] = float32(int32(q5At(b, j))-16) * d
				y[j+16] = float32(int32(q5At(b, j+16))-16) * d
			}
		}
	case gguf.TypeQ8_0:
		for i := range nb {
			b, y := src[i*q8_0Bytes:], dst[i*qk0:]
			d := f16At(b, 0)
			for j := range qk0 {
				y[j] = float32(int8(b[2+j])) * d
			}
		}
	case gguf.TypeQ4_K:
		for i := range nb {
			dequantizeQ4_K(src[i*q4_KBytes:(i+1)*q4_KBytes], dst[i*qkK:(i+1)*qkK])
		}
	case gguf.TypeQ5_K:
		for i := range nb {
			dequantizeQ5_K(src[i*q5_KBytes:(i+1)*q5_KBytes], dst[i*qkK:(i+1)*qkK])
		}
	case gguf.TypeQ6_K:
		for i := range nb {
			dequantizeQ6_K(src[i*q6_KBytes:(i+1)*q6_KBytes], dst[i*qkK:(i+1)*qkK])
		}
	case gguf.TypeQ8_K:
		for i := range nb {
			b, y := src[i*q8_KBytes:], dst[i*qkK:]
			d := math.Float32frombits(binary.LittleEndian.Uint32(b))
			for j := range qkK {
				y[j] = d * float32(int8(b[4+j]))
			}
		}
	}
	return nil
}

func f16At(b []byte, off int) float32 { return F16ToF32(binary.LittleEndian.Uint16(b[off:])) }

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// nearestInt is ggml's nearest_int: add 1.5*2^23 in float32 and read the low
// mantissa bits. For |x| < 2^22 it is round-half-even; for other inputs it
// returns the same garbage as ggml.
func nearestInt(x float32) int32 {
	val := x + 12582912
	i := int32(math.Float32bits(val))
	return i&0x007fffff - 0x00400000
}

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// toInt8 is C's (int8_t) conversion of a float on x86: truncate to int32
// (CVTTSS2SI) and keep the low byte.
func toInt8(x float32) int8 { return int8(int32(x)) }

// quantizeQ4_0 is quantize_row_q4_0_ref for one block.
func quantizeQ4_0(x []float32, y []byte) {
	var amax, max float32
	for _, v := range x {
		if amax < abs32(v) {
			amax = abs32(v)
			max = v
		}
	}
	d := max / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(y, F32ToF16(d))
	for j := range 16 {
		x0 := float32(x[j] * id)
		x1 := float32(x[j+16] * id)
		xi0 := uint8(min(15, toInt8(x0+8.5)))
		xi1 := uint8(min(15, toInt8(x1+8.5)))
		y[2+j] = xi0 | xi1<<4
	}
}

// quantizeQ5_0 is quantize_row_q5_0_ref for one block: like Q4_0 with
// levels 0..31 around 16, the 5th bit of element j in bit j of qh.
func quantizeQ5_0(x []float32, y []byte) {
	var amax, max float32
	for _, v := range x {
		if amax < abs32(v) {
			amax = abs32(v)
			max = v
		}
	}
	d := max / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(y, F32ToF16(d))
	var qh uint32
	for j := range 16 {
		x0 := float32(x[j] * id)
		x1 := float32(x[j+16] * id)
		xi0 := uint8(min(31, toInt8(x0+16.5)))
		xi1 := uint8(min(31, toInt8(x1+16.5)))
		y[6+j] = xi0&0xf | (xi1&0xf)<<4
		qh |= uint32(xi0&0x10)>>4<<j | uint32(xi1&0x10)>>4<<(j+16)
	}
	binary.LittleEndian.PutUint32(y[2:], qh)
}

// q5At is the 5-bit level (0..31) of element e of a Q5_0 block.
func q5At(b []byte, e int) uint8 {
	qh := binary.LittleEndian.Uint32(b[2:])
	return b[6+e%16]>>(4*(e/16))&0xf | uint8(qh>>e&1)<<4
}

// quantizeQ8_0Ref is quantize_row_q8_0_ref for one block (roundf, 1/d).
func quantizeQ8_0Ref(x []float32, y []byte) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(y, F32ToF16(d))
	for j, v := range x {
		r := float32(math.Round(float64(float32(v * id)))) // roundf: half away from zero
		y[2+j] = uint8(toInt8(r))
	}
}

// makeQKX2Quants is ggml's make_qkx2_quants: a weighted least-squares fit of
// scale and min for n values into levels 0..nmax, trying nstep+1 scales.
// It fills L and returns (scale, -min).
func makeQKX2Quants(nmax int, x, weights []float32, L, Laux []uint8, rmin, rdelta float32, nstep int) (float32, float32) {
	n := len(x)
	fnmax := float32(nmax)
	minV, maxV := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < minV {
			minV = x[i]
		}
		if x[i] > maxV {
			maxV = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if minV > 0 {
		minV = 0
	}
	if maxV == minV {
		for i := range n {
			L[i] = 0
		}
		return 0, -minV
	}
	iscale := fnmax / (maxV - minV)
	scale := 1 / iscale
	var bestError float32
	for i := range n {
		l := nearestInt(float32(iscale * (x[i] - minV)))
		L[i] = uint8(max(0, min(int32(nmax), l)))
		diff := float32(float32(scale*float32(L[i]))+minV) - x[i]
		diff = float32(diff * diff)
		bestError += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -minV
	}
	for is := 0; is <= nstep; is++ {
		iscale = float32(float32(rmin+float32(rdelta*float32(is)))+fnmax) / (maxV - minV)
		var sumL, sumL2, sumXL float32
		for i := range n {
			l := nearestInt(float32(iscale * (x[i] - minV)))
			l = max(0, min(int32(nmax), l))
			Laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			wl := float32(w * fl)
			sumL += wl
			sumL2 += float32(wl * fl)
			sumXL += float32(wl * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var curError float32
			for i := range n {
				diff := float32(float32(thisScale*float32(Laux[i]))+thisMin) - x[i]
				diff = float32(diff * diff)
				curError += float32(weights[i] * diff)
			}
			if curError < bestError {
				copy(L[:n], Laux[:n])
				bestError = curError
				scale = thisScale
				minV = thisMin
			}
		}
	}
	return scale, -minV
}

// scaleMinK4 is ggml's get_scale_min_k4: the 6-bit scale and min of
// sub-block j from the 12 packed bytes q.
func scaleMinK4(j int, q []byte) (uint8, uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// quantizeQ4_K is quantize_row_q4_K_ref for one super-block.
func quantizeQ4_K(x []float32, y []byte) {
	var L [qkK]uint8
	quantizeKScales(x, y, L[:], 15, -1, 20)
	q := y[16:]
	for j := 0; j < qkK; j += 64 {
		for l := range 32 {
			q[l] = L[j+l] | L[j+l+32]<<4
		}
		q = q[32:]
	}
}

// quantizeQ5_K is quantize_row_q5_K_ref for one super-block: Q4_K's fit
// with levels 0..31; the low nibbles are stored as Q4_K's, and the 5th bit
// of element 64j+l (of 64j+32+l) is bit 2j (2j+1) of qh[l].
func quantizeQ5_K(x []float32, y []byte) {
	var L [qkK]uint8
	quantizeKScales(x, y, L[:], 31, -0.5, 15)
	qh, ql := y[16:48], y[48:]
	clear(qh)
	for j := 0; j < qkK; j += 64 {
		bit := uint(j / 32)
		for l := range 32 {
			l1, l2 := L[j+l], L[j+l+32]
			if l1 > 15 {
				l1 -= 16
				qh[l] |= 1 << bit
			}
			if l2 > 15 {
				l2 -= 16
				qh[l] |= 2 << bit
			}
			ql[l] = l1 | l2<<4
		}
		ql = ql[32:]
	}
}

// quantizeKScales is the part quantize_row_q4_K_ref and
// quantize_row_q5_K_ref share: a make_qkx2_quants fit (levels 0..nmax) of
// each 32-element sub-block, the 6-bit scales and mins and the f16 d and
// dmin in y[0:16], then every element's level in L from the stored scales.
func quantizeKScales(x []float32, y []byte, L []uint8, nmax int, rmin float32, nstep int) {
	var Laux [32]uint8
	var weights [32]float32
	var mins, scales [8]float32
	var maxScale, maxMin float32
	for j := range 8 {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := sqrt32(sumX2 / 32)
		for l, v := range xs {
			weights[l] = avX + abs32(v)
		}
		scales[j], mins[j] = makeQKX2Quants(nmax, xs, weights[:], L[32*j:32*j+32], Laux[:], rmin, 0.1, nstep)
		if scales[j] > maxScale {
			maxScale = scales[j]
		}
		if mins[j] > maxMin {
			maxMin = mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := y[4:16]
	clear(sc)
	for j := range 8 {
		ls := min(63, uint8(nearestInt(float32(invScale*scales[j]))))
		lm := min(63, uint8(nearestInt(float32(invMin*mins[j]))))
		if j < 4 {
			sc[j] = ls
			sc[j+4] = lm
		} else {
			sc[j+4] = ls&0xf | (lm&0xf)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	binary.LittleEndian.PutUint16(y[0:], F32ToF16(maxScale/63))
	binary.LittleEndian.PutUint16(y[2:], F32ToF16(maxMin/63))
	dAll, dminAll := f16At(y, 0), f16At(y, 2)
	for j := range 8 {
		s, m := scaleMinK4(j, sc)
		d := float32(dAll * float32(s))
		if d == 0 {
			continue
		}
		dm := float32(dminAll * float32(m))
		for ii := range 32 {
			l := nearestInt((x[32*j+ii] + dm) / d)
			L[32*j+ii] = uint8(max(0, min(int32(nmax), l)))
		}
	}
}

func dequantizeQ4_K(b []byte, y []float32) {
	d, dmin := f16At(b, 0), f16At(b, 2)
	sc, q := b[4:16], b[16:]
	for j := range 4 {
		s1, m1 := scaleMinK4(2*j, sc)
		s2, m2 := scaleMinK4(2*j+1, sc)
		d1, mm1 := float32(d*float32(s1)), float32(dmin*float32(m1))
		d2, mm2 := float32(d*float32(s2)), float32(dmin*float32(m2))
		for l := range 32 {
			y[64*j+l] = float32(d1*float32(q[32*j+l]&0xf)) - mm1
			y[64*j+32+l] = float32(d2*float32(q[32*j+l]>>4)) - mm2
		}
	}
}

func dequantizeQ5_K(b []byte, y []float32) {
	d, dmin := f16At(b, 0), f16At(b, 2)
	sc, qh, q := b[4:16], b[16:48], b[48:]
	for j := range 4 {
		s1, m1 := scaleMinK4(2*j, sc)
		s2, m2 := scaleMinK4(2*j+1, sc)
		d1, mm1 := float32(d*float32(s1)), float32(dmin*float32(m1))
		d2, mm2 := float32(d*float32(s2)), float32(dmin*float32(m2))
		for l := range 32 {
			y[64*j+l] = float32(d1*float32(q5KAt(q, qh, 64*j+l))) - mm1
			y[64*j+32+l] = float32(d2*float32(q5KAt(q, qh, 64*j+32+l))) - mm2
		}
	}
}

// q5KAt is the 5-bit level (0..31) of element e of a Q5_K block, given its
// nibbles q (b[48:]) and high bits qh (b[16:48]).
func q5KAt(q, qh []byte, e int) uint8 {
	j, r := e/64, e%64
	l, hi := r%32, r/32
	return q[32*j+l]>>(4*hi)&0xf | (qh[l]>>(2*j+hi)&1)<<4
}

// makeQXQuants is ggml's make_qx_quants with qw == NULL: symmetric levels
// -nmax..nmax-1 (stored offset by nmax in L), refined over 18 extra scales.
func makeQXQuants(nmax int, x []float32, L []int8, rmseType int) float32 {
	n := len(x)
	var maxV, amax float32
	for _, v := range x {
		if ax := abs32(v); ax > amax {
			amax = ax
			maxV = v
		}
	}
	if amax < groupMaxEps {
		for i := range n {
			L[i] = 0
		}
		return 0
	}
	fnmax := float32(nmax)
	clampL := func(l int32) int32 { return max(int32(-nmax), min(int32(nmax-1), l)) }
	weight := func(v float32) float32 {
		switch rmseType {
		case 1:
			return float32(v * v)
		case 2:
			return 1
		case 3:
			return abs32(v)
		}
		return sqrt32(abs32(v))
	}
	iscale := -fnmax / maxV
	if rmseType == 0 {
		for i := range n {
			L[i] = int8(int32(nmax) + clampL(nearestInt(float32(iscale*x[i]))))
		}
		return 1 / iscale
	}
	returnEarly := false
	if rmseType < 0 {
		rmseType = -rmseType
		returnEarly = true
	}
	var sumlx, suml2 float32
	for i := range n {
		l := clampL(nearestInt(float32(iscale * x[i])))
		L[i] = int8(l + int32(nmax))
		w := weight(x[i])
		fl := float32(l)
		sumlx += float32(float32(w*x[i]) * fl)
		suml2 += float32(float32(w*fl) * fl)
	}
	var scale float32
	if suml2 != 0 {
		scale = sumlx / suml2
	}
	if returnEarly {
		if suml2 > 0 {
			return float32(0.5) * (scale + 1/iscale)
		}
		return 1 / iscale
	}
	best := float32(scale * sumlx)
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fnmax + float32(float32(0.1)*float32(is))) / maxV
		sumlx, suml2 = 0, 0
		for i := range n {
			l := clampL(nearestInt(float32(iscale * x[i])))
			w := weight(x[i])
			fl := float32(l)
			sumlx += float32(float32(w*x[i]) * fl)
			suml2 += float32(float32(w*fl) * fl)
		}
		if suml2 > 0 && float32(sumlx*sumlx) > float32(best*suml2) {
			for i := range n {
				L[i] = int8(int32(nmax) + clampL(nearestInt(float32(iscale*x[i]))))
			}
			scale = sumlx / suml2
			best = float32(scale * sumlx)
		}
	}
	return scale
}

// quantizeQ6_K is quantize_row_q6_K_ref for one super-block.
func quantizeQ6_K(x []float32, y []byte) {
	var L [qkK]int8
	var scales [16]float32
	var maxScale, maxAbsScale float32
	for ib := range 16 {
		scale := makeQXQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16], 1)
		scales[ib] = scale
		if as := abs32(scale); as > maxAbsScale {
			maxAbsScale = as
			maxScale = scale
		}
	}
	if maxAbsScale < groupMaxEps {
		clear(y[:q6_KBytes])
		return
	}
	iscale := -128 / maxScale
	binary.LittleEndian.PutUint16(y[208:], F32ToF16(1/iscale))
	sc := y[192:208]
	for ib := range 16 {
		sc[ib] = uint8(int8(min(127, nearestInt(float32(iscale*scales[ib])))))
	}
	dAll := f16At(y, 208)
	for j := range 16 {
		d := float32(dAll * float32(int8(sc[j])))
		if d == 0 {
			continue
		}
		for ii := range 16 {
			l := nearestInt(x[16*j+ii] / d)
			L[16*j+ii] = int8(max(-32, min(31, l)) + 32)
		}
	}
	ql, qh := y[0:128], y[128:192]
	for j := 0; j < qkK; j += 128 {
		for l := range 32 {
			q1 := uint8(L[j+l]) & 0xf
			q2 := uint8(L[j+l+32]) & 0xf
			q3 := uint8(L[j+l+64]) & 0xf
			q4 := uint8(L[j+l+96]) & 0xf
			ql[l] = q1 | q3<<4
			ql[l+32] = q2 | q4<<4
			qh[l] = uint8(L[j+l])>>4 | (uint8(L[j+l+32])>>4)<<2 | (uint8(L[j+l+64])>>4)<<4 | (uint8(L[j+l+96])>>4)<<6
		}
		ql = ql[64:]
		qh = qh[32:]
	}
}

// q6At returns the unsigned 6-bit level (0..63) of element e of a Q6_K block.
func q6At(b []byte, e int) int32 {
	j, r := e/128, e%128
	t, l := r/32, r%32
	ql, qh := b[64*j:], b[128+32*j:]
	var lo uint8
	switch t {
	case 0:
		lo = ql[l] & 0xf
	case 1:
		lo = ql[l+32] & 0xf
	case 2:
		lo = ql[l] >> 4
	default:
		lo = ql[l+32] >> 4
	}
	hi := (qh[l] >> (2 * t)) & 3
	return int32(lo | hi<<4)
}

func dequantizeQ6_K(b []byte, y []float32) {
	d := f16At(b, 208)
	sc := b[192:208]
	for e := range qkK {
		s := float32(d * float32(int8(sc[e/16])))
		y[e] = s * float32(q6At(b, e)-32)
	}
}

// quantizeQ8_K is quantize_row_q8_K_ref for one super-block; x86 ggml uses
// it as is for activations.
func quantizeQ8_K(x []float32, y []byte) {
	var maxV, amax float32
	for _, v := range x {
		if ax := abs32(v); ax > amax {
			amax = ax
			maxV = v
		}
	}
	if amax == 0 {
		// ggml leaves bsums as they were; we zero them so the block is
		// deterministic. Dot products multiply them by d = 0 either way.
		clear(y[:q8_KBytes])
		return
	}
	iscale := -127 / maxV
	qs := y[4 : 4+qkK]
	for j, v := range x {
		qs[j] = uint8(int8(min(127, nearestInt(float32(iscale*v)))))
	}
	for j := range 16 {
		var sum int32
		for _, q := range qs[16*j : 16*j+16] {
			sum += int32(int8(q))
		}
		binary.LittleEndian.PutUint16(y[4+qkK+2*j:], uint16(int16(sum)))
	}
	binary.LittleEndian.PutUint32(y, math.Float32bits(1/iscale))
}
