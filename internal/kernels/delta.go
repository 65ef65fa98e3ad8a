package kernels

import "math"

// The delta rule's one-token step (Gated DeltaNet, Kimi's KDA) on a state stored transposed.
//
// The model keeps each head's S×S state row-major by value row j (st[j*S+i], i the key
// channel), as llama.cpp does, and steps it token by token in llama.cpp's order (ggml's
// gated_delta_net, one token at a time, the form that does not depend on how a prompt is
// chunked): every sum a chain of fused multiply-adds over i, as ggml_vec_dot_f32 runs
// vectors shorter than its SIMD step. A chain cannot be split without changing its bits, so
// a step vectorizes only across rows: sixteen rows' chains side by side, one lane each. With
// the state transposed (stT[i*S+j]) those sixteen values of channel i are adjacent, and
// DeltaStepT runs the step that way: the same operations on the same operands in the same
// order per row, so every bit is deltaStepTRef's (and the model's row-major reference's).
// The model transposes a head's state in before a run of tokens and out after it
// (TransposeSquare), a cost of two passes per run, not per token.

// fmaf is the delta rule's fused multiply-add: a·b + c rounded once in float64, then to
// float32 (the model's reference arithmetic).
func fmaf(a, b, c float32) float32 { return float32(math.FMA(float64(a), float64(b), float64(c))) }

// DeltaStepT runs one token of the delta rule on head state stT (S×S, transposed:
// stT[i*S+j] is value row j's key channel i):
//
//	st ← st·diag(decay);  δ_j = β·(v_j − Σ_i st[j][i]·k_i);  st[j][i] += k_i·δ_j;  o_j = scale·Σ_i st[j][i]·q_i
//
// decay has one factor per key channel (len S, KDA) or one for the head (len 1). delta
// (len S) receives δ. Sums run over i in order as chains of fmaf.
func DeltaStepT(stT, q, k, v, decay, delta, o []float32, beta, scale float32) {
	S := len(delta)
	_ = stT[S*S-1]
	_, _, _, _ = q[S-1], k[S-1], v[S-1], o[S-1]
	stride := 4
	if len(decay) == 1 {
		stride = 0
	} else {
		_ = decay[S-1]
	}
	if deltaAsm && S%16 == 0 {
		deltaStepTAVX2(&stT[0], S, &q[0], &k[0], &v[0], &decay[0], stride, &delta[0], &o[0], beta, scale)
		return
	}
	deltaStepTRef(stT, q, k, v, decay, delta, o, beta, scale)
}

// deltaStepTRef is DeltaStepT in scalar Go, rows one after another.
func deltaStepTRef(stT, q, k, v, decay, delta, o []float32, beta, scale float32) {
	S := len(delta)
	for i := range S {
		g := decay[0]
		if len(decay) > 1 {
			g = decay[i]
		}
		row := stT[i*S : (i+1)*S]
		for j := range row {
			row[j] *= g
		}
	}
	for j := range S {
		var s float32
		for i := range S {
			s = fmaf(stT[i*S+j], k[i], s)
		}
		delta[j] = (v[j] - s) * beta
	}
	for i := range S {
		row := stT[i*S : (i+1)*S]
		for j := range row {
			row[j] = fmaf(k[i], delta[j], row[j])
		}
	}
	for j := range S {
		var s float32
		for i := range S {
			s = fmaf(stT[i*S+j], q[i], s)
		}
		o[j] = s * scale
	}
}

// TransposeSquare writes src (S×S, row-major) transposed into dst; they must not overlap.
func TransposeSquare(dst, src []float32, S int) {
	_, _ = dst[S*S-1], src[S*S-1]
	const tile = 16
	for i0 := 0; i0 < S; i0 += tile {
		for j0 := 0; j0 < S; j0 += tile {
			for i := i0; i < min(i0+tile, S); i++ {
				for j := j0; j < min(j0+tile, S); j++ {
					dst[j*S+i] = src[i*S+j]
				}
			}
		}
	}
}
