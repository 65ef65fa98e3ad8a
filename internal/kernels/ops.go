package kernels

import (
	"fmt"
	"math"
)

// expf is a single-precision exp: the double result rounded once, which is
// within an ulp of glibc's expf.
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

// RMSNorm sets dst = x / sqrt(mean(x²) + eps) * weight for one row, as
// ggml's rms_norm followed by mul: the squares are f32 products summed in
// float64 in order, mean and scale are f32, and each output is
// (x*scale)*weight. weight may be nil. dst may alias x.
func RMSNorm(dst, x, weight []float32, eps float32) {
	n := len(x)
	if len(dst) < n || (weight != nil && len(weight) < n) {
		panic(fmt.Sprintf("kernels: RMSNorm len(x)=%d len(dst)=%d len(weight)=%d", n, len(dst), len(weight)))
	}
	if n == 0 {
		return
	}
	var sum float64
	for _, v := range x {
		sum += float64(float32(v * v))
	}
	mean := float32(sum / float64(n))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	dst = dst[:n]
	if weight == nil {
		for i, v := range x {
			dst[i] = v * scale
		}
		return
	}
	weight = weight[:n]
	for i, v := range x {
		dst[i] = float32(v*scale) * weight[i]
	}
}

// RoPEParams are ggml_rope_ext's parameters for one model (ext_factor 0 and
// attn_factor 1 are implied).
type RoPEParams struct {
	NDims     int       // rotated dimensions per head, even, <= headDim; the rest pass through
	Base      float32   // freq_base (rope theta)
	FreqScale float32   // 1/linear scaling factor; 0 means 1
	NeoX      bool      // pairs (i, i+NDims/2) instead of adjacent (2i, 2i+1)
	Factors   []float32 // optional per-pair frequency divisors (llama3 rope_freqs), len >= NDims/2
}

// RoPE rotates the heads of one token in place: x holds nHeads heads of
// headDim elements. It follows ggml's rope cache exactly: theta_scale =
// powf(base, -2/n_dims), theta starts at pos and is multiplied by
// theta_scale per pair in f32; pair i uses freq_scale*theta/factor[i].
func RoPE(x []float32, nHeads, headDim, pos int, r RoPEParams) {
	nd := r.NDims
	if nd <= 0 || nd%2 != 0 || nd > headDim || len(x) < nHeads*headDim ||
		(r.Factors != nil && len(r.Factors) < nd/2) {
		panic(fmt.Sprintf("kernels: RoPE NDims=%d headDim=%d nHeads=%d len(x)=%d factors=%d",
			nd, headDim, nHeads, len(x), len(r.Factors)))
	}
	var buf [256]float32 // the table of any usual head on the stack
	cs := buf[:]
	if nd > len(buf) {
		cs = make([]float32, nd)
	}
	RoPETable(cs, pos, r)
	RoPEApply(x, nHeads, headDim, cs, r)
}

// RoPETable fills cs[0:NDims] with the cosine and sine RoPE computes for each pair at pos
// (cos, sin, pair by pair): a decode step rotates every layer's heads at one position, and
// RoPEApply with the table gives bitwise RoPE's values without its trigonometry per call.
func RoPETable(cs []float32, pos int, r RoPEParams) {
	nd := r.NDims
	if nd <= 0 || nd%2 != 0 || len(cs) < nd || (r.Factors != nil && len(r.Factors) < nd/2) {
		panic(fmt.Sprintf("kernels: RoPETable NDims=%d len(cs)=%d factors=%d", nd, len(cs), len(r.Factors)))
	}
	fs := r.FreqScale
	if fs == 0 {
		fs = 1
	}
	thetaScale := float32(math.Pow(float64(r.Base), float64(float32(-2)/float32(nd))))
	theta := float32(pos)
	for i0 := 0; i0 < nd; i0 += 2 {
		ext := theta
		if r.Factors != nil {
			ext = theta / r.Factors[i0/2]
		}
		t := fs * ext
		cs[i0] = float32(math.Cos(float64(t)))
		cs[i0+1] = float32(math.Sin(float64(t)))
		theta *= thetaScale
	}
}

// RoPEApply rotates the nHeads heads of x by cs, a RoPETable for r: bitwise RoPE at the
// table's position.
func RoPEApply(x []float32, nHeads, headDim int, cs []float32, r RoPEParams) {
	nd := r.NDims
	if nd <= 0 || nd%2 != 0 || nd > headDim || len(x) < nHeads*headDim || len(cs) < nd {
		panic(fmt.Sprintf("kernels: RoPEApply NDims=%d headDim=%d nHeads=%d len(x)=%d len(cs)=%d", nd, headDim, nHeads, len(x), len(cs)))
	}
	for i0 := 0; i0 < nd; i0 += 2 {
		c, s := cs[i0], cs[i0+1]
		a, b := i0, i0+1
		if r.NeoX {
			a, b = i0/2, i0/2+nd/2
		}
		for h := range nHeads {
			base := h * headDim
			x0, x1 := x[base+a], x[base+b]
			x[base+a] = float32(x0*c) - float32(x1*s)
			x[base+b] = float32(x0*s) + float32(x1*c)
		}
	}
}

// SwiGLU sets dst = silu(gate) * up with silu(g) = g/(1+expf(-g)) (ggml's
// silu). dst may alias gate or up. On amd64 the first len(dst)&^7 elements
// use a vectorized exp (within a few ulp, as ggml's vectorized silu), the
// rest expf: an element's arithmetic depends only on its index and the
// length, never on the row or the batch.
func SwiGLU(dst, gate, up []float32) {
	n := len(dst)
	gate, up = gate[:n], up[:n]
	i0 := swiGLUBody(dst, gate, up)
	for i := i0; i < n; i++ {
		g := gate[i]
		dst[i] = g / (1 + expf(-g)) * up[i]
	}
}

// swiGLUBody computes a prefix of SwiGLU and returns its length; amd64
// replaces it with assembly (ops_amd64.go).
var swiGLUBody = func(dst, gate, up []float32) int { return 0 }

// Add sets dst += a.
func Add(dst, a []float32) {
	a = a[:len(dst)]
	for i := range dst {
		dst[i] += a[i]
	}
}

// Scale sets x *= s.
func Scale(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// Softmax normalizes x in place as ggml's soft_max: subtract the max, exp
// in f32, sum in float64 in order, multiply by the f32 of 1/sum.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range x {
		e := expf(v - mx)
		x[i] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// LogSoftmax sets dst[i] = logits[i] - logsumexp(logits), accumulated in
// float64. It returns the index of the largest logit (the first of ties).
func LogSoftmax(dst, logits []float32) int {
	if len(logits) == 0 {
		return -1
	}
	dst = dst[:len(logits)]
	best := Argmax(logits)
	mx := float64(logits[best])
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	for i, v := range logits {
		dst[i] = float32(float64(v) - lse)
	}
	return best
}

// Argmax returns the index of the largest element (the first of ties), or
// -1 for an empty slice. NaNs are never chosen over a number.
func Argmax(x []float32) int {
	best := -1
	for i, v := range x {
		if best < 0 || v > x[best] || (x[best] != x[best] && v == v) {
			best = i
		}
	}
	return best
}
