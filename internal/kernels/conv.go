package kernels

import "math"

// ConvSiLU is the short causal convolution of the hybrid models' recurrent layers (Gated
// DeltaNet, KDA) with its SiLU, for n tokens: each of cd channels convolved with its own K
// taps over the window rows, then SiLU:
//
//	out[t*cd+ch] = silu(Σ_{i<K} win[(t+i)*cd+ch]·wT[i*cd+ch]),  silu(x) = x/(1+e^−x)
//
// The taps are tap-major (wT[i*cd+ch]: the transpose of a GGUF conv1d weight, channel-major
// with K taps each), so a window row and a tap row are both contiguous in the channels. Each
// sum is a chain of fused multiply-adds from 0, in tap order.
//
// With AVX2 and FMA the channels below cd&^7 run eight at a time, the multiply-adds in
// single precision and e^−x by a degree-7 polynomial (within 2 ulp of the correctly rounded
// exp; llama.cpp's ggml_vec_silu_f32 is a polynomial too); the rest, and every channel
// without AVX2, run the scalar reference (fused multiply-adds through float64, math.Exp).
// A channel's arithmetic depends only on its index and cd, never on n.
func ConvSiLU(out, win, wT []float32, cd, K, n int) {
	if n <= 0 || cd <= 0 || K <= 0 {
		return
	}
	_ = out[n*cd-1]
	_ = win[(n+K-1)*cd-1]
	_ = wT[K*cd-1]
	done := 0
	if convAsm && cd >= 8 {
		done = cd &^ 7
		convSiLUAVX2(&out[0], &win[0], &wT[0], cd, K, n, done)
	}
	if done < cd {
		convSiLURef(out, win, wT, cd, K, n, done)
	}
}

// convSiLURef is ConvSiLU's scalar reference for channels [from, cd).
func convSiLURef(out, win, wT []float32, cd, K, n, from int) {
	for t := range n {
		o := out[t*cd : (t+1)*cd]
		for ch := from; ch < cd; ch++ {
			var sum float32
			for i := range K {
				sum = float32(math.FMA(float64(win[(t+i)*cd+ch]), float64(wT[i*cd+ch]), float64(sum)))
			}
			o[ch] = sum / (1 + float32(math.Exp(float64(-sum))))
		}
	}
}

// TransposeTaps returns w (cd channels of K taps each, channel-major) tap-major, as
// ConvSiLU takes it.
func TransposeTaps(w []float32, cd, K int) []float32 {
	wT := make([]float32, cd*K)
	for ch := range cd {
		for i := range K {
			wT[i*cd+ch] = w[ch*K+i]
		}
	}
	return wT
}
