package kernels

import "math"

// Exp, Sigmoid and Softplus are the hybrid models' elementwise gates, in place. With AVX2
// and FMA the elements below len&^7 run eight at a time (act_amd64.s: e^x by a degree-7
// polynomial, ln by Cephes' logf polynomial; within a few ulp of the references, as
// llama.cpp's own vector exp is), the rest, and every element without AVX2, run the scalar
// references below (math.Exp, math.Log). An element's arithmetic depends only on its index
// and the length.

// Exp sets x[i] = e^x[i]. Above 88 it gives e^88 on the vector path (+Inf past 88.7 on the
// scalar one); below −86.5, 0.
func Exp(x []float32) {
	done := actBody(x, expAVX2)
	for i := done; i < len(x); i++ {
		x[i] = float32(math.Exp(float64(x[i])))
	}
}

// Sigmoid sets x[i] = 1/(1+e^−x[i]).
func Sigmoid(x []float32) {
	done := actBody(x, sigmoidAVX2)
	for i := done; i < len(x); i++ {
		x[i] = SigmoidRef(x[i])
	}
}

// Softplus sets x[i] to ggml's softplus: x above 20 as it is, else ln(1+e^x) with 1+e^x
// rounded to single precision first.
func Softplus(x []float32) {
	done := actBody(x, softplusAVX2)
	for i := done; i < len(x); i++ {
		x[i] = SoftplusRef(x[i])
	}
}

// SigmoidRef is Sigmoid's scalar reference.
func SigmoidRef(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// SoftplusRef is Softplus's scalar reference.
func SoftplusRef(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log(float64(1 + float32(math.Exp(float64(x))))))
}

// actBody runs f over x's first len&^7 elements when the CPU has it, returning how many.
func actBody(x []float32, f func(*float32, int)) int {
	n := len(x) &^ 7
	if !actAsm || n == 0 {
		return 0
	}
	f(&x[0], n)
	return n
}
