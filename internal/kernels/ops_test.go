package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

func closeTo(have, want, tol float64) bool { return math.Abs(have-want) <= tol*(1+math.Abs(want)) }

func TestRMSNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{1, 7, 64, 576} {
		x := randFloats(r, n)
		w := randFloats(r, n)
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		inv := 1 / math.Sqrt(ss/float64(n)+1e-5)
		for _, weight := range [][]float32{nil, w} {
			have := make([]float32, n)
			RMSNorm(have, x, weight, 1e-5)
			for i := range have {
				want := float64(x[i]) * inv
				if weight != nil {
					want *= float64(weight[i])
				}
				if !closeTo(float64(have[i]), want, 1e-6) {
					t.Fatalf("n=%d weight=%v i=%d: have %v, want %v", n, weight != nil, i, have[i], want)
				}
			}
		}
	}
}

// ropeOracle rotates in float64 with the frequencies computed directly.
func ropeOracle(x []float32, nHeads, headDim, pos int, r RoPEParams) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	fs := float64(r.FreqScale)
	if fs == 0 {
		fs = 1
	}
	for i := 0; i < r.NDims/2; i++ {
		theta := float64(pos) * math.Pow(float64(r.Base), -2*float64(i)/float64(r.NDims)) * fs
		if r.Factors != nil {
			theta /= float64(r.Factors[i])
		}
		a, b := 2*i, 2*i+1
		if r.NeoX {
			a, b = i, i+r.NDims/2
		}
		for h := range nHeads {
			x0, x1 := out[h*headDim+a], out[h*headDim+b]
			out[h*headDim+a] = x0*math.Cos(theta) - x1*math.Sin(theta)
			out[h*headDim+b] = x0*math.Sin(theta) + x1*math.Cos(theta)
		}
	}
	return out
}

func TestRoPE(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	factors := make([]float32, 32)
	for i := range factors {
		factors[i] = 1 + float32(i)/8
	}
	tests := []struct {
		name       string
		nHeads, hd int
		pos        int
		p          RoPEParams
	}{
		{"norm", 3, 64, 17, RoPEParams{NDims: 64, Base: 10000}},
		{"neox", 2, 64, 5, RoPEParams{NDims: 64, Base: 1000000, NeoX: true}},
		{"partial-norm", 2, 64, 9, RoPEParams{NDims: 32, Base: 10000}},
		{"partial-neox", 2, 64, 9, RoPEParams{NDims: 16, Base: 10000, NeoX: true}},
		{"linear-scale", 1, 32, 100, RoPEParams{NDims: 32, Base: 10000, FreqScale: 0.25}},
		{"factors", 2, 64, 40, RoPEParams{NDims: 64, Base: 500000, Factors: factors}},
		{"pos0", 1, 8, 0, RoPEParams{NDims: 8, Base: 10000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := randFloats(r, tt.nHeads*tt.hd)
			want := ropeOracle(x, tt.nHeads, tt.hd, tt.pos, tt.p)
			// The table form (a decode step's): bitwise RoPE, applied head by head.
			xt := append([]float32(nil), x...)
			cs := make([]float32, tt.p.NDims)
			RoPETable(cs, tt.pos, tt.p)
			for h := range tt.nHeads {
				RoPEApply(xt[h*tt.hd:(h+1)*tt.hd], 1, tt.hd, cs, tt.p)
			}
			RoPE(x, tt.nHeads, tt.hd, tt.pos, tt.p)
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(xt[i]) {
					t.Fatalf("i=%d: RoPEApply %v, RoPE %v", i, xt[i], x[i])
				}
			}
			for i := range x {
				// theta is built in f32 as ggml does: allow its error at this pos.
				if math.Abs(float64(x[i])-want[i]) > 1e-4*(1+float64(tt.pos)/10) {
					t.Fatalf("i=%d: have %v, want %v", i, x[i], want[i])
				}
			}
		})
	}
}

func TestSoftmaxAndLogSoftmax(t *testing.T) {
	tests := []struct {
		in   []float32
		want []float64
	}{
		{[]float32{0}, []float64{1}},
		{[]float32{1, 1}, []float64{0.5, 0.5}},
		{[]float32{0, float32(math.Log(3))}, []float64{0.25, 0.75}},
		{[]float32{1000, 1000, 1000, 1000}, []float64{0.25, 0.25, 0.25, 0.25}},
		{[]float32{float32(math.Inf(-1)), 2}, []float64{0, 1}},
	}
	for _, tt := range tests {
		have := append([]float32(nil), tt.in...)
		Softmax(have)
		ls := make([]float32, len(tt.in))
		best := LogSoftmax(ls, tt.in)
		for i := range have {
			if !closeTo(float64(have[i]), tt.want[i], 1e-6) {
				t.Errorf("Softmax(%v)[%d]: have %v, want %v", tt.in, i, have[i], tt.want[i])
			}
			if !closeTo(math.Exp(float64(ls[i])), tt.want[i], 1e-6) {
				t.Errorf("LogSoftmax(%v)[%d]: have exp %v, want %v", tt.in, i, math.Exp(float64(ls[i])), tt.want[i])
			}
		}
		if tt.in[best] < tt.in[Argmax(tt.in)] || best != Argmax(tt.in) {
			t.Errorf("LogSoftmax(%v) best: have %d, want %d", tt.in, best, Argmax(tt.in))
		}
	}
}

func TestArgmax(t *testing.T) {
	nan := float32(math.NaN())
	tests := []struct {
		in   []float32
		want int
	}{
		{nil, -1}, {[]float32{3}, 0}, {[]float32{1, 5, 5, 2}, 1}, {[]float32{nan, 1, 2}, 2}, {[]float32{-1, -3}, 0},
	}
	for _, tt := range tests {
		if have := Argmax(tt.in); have != tt.want {
			t.Errorf("Argmax(%v): have %d, want %d", tt.in, have, tt.want)
		}
	}
}

func TestSwiGLUAndAdd(t *testing.T) {
	g := []float32{0, 1, -2, 10}
	u := []float32{1, 2, 3, 0.5}
	have := make([]float32, 4)
	SwiGLU(have, g, u)
	for i := range g {
		want := float64(g[i]) / (1 + math.Exp(-float64(g[i]))) * float64(u[i])
		if !closeTo(float64(have[i]), want, 1e-6) {
			t.Errorf("SwiGLU[%d]: have %v, want %v", i, have[i], want)
		}
	}
	before := append([]float32(nil), have...)
	Add(have, u)
	for i := range have {
		if want := before[i] + u[i]; have[i] != want {
			t.Errorf("Add[%d]: have %v, want %v", i, have[i], want)
		}
	}
}

func TestOpsDoNotAllocate(t *testing.T) {
	x := make([]float32, 576)
	w := make([]float32, 576)
	for i := range x {
		x[i], w[i] = float32(i%7)-3, 1
	}
	dst := make([]float32, 576)
	allocs := testing.AllocsPerRun(10, func() {
		RMSNorm(dst, x, w, 1e-5)
		RoPE(dst, 9, 64, 3, RoPEParams{NDims: 64, Base: 10000})
		SwiGLU(dst, x, w)
		Add(dst, x)
		Softmax(dst)
		LogSoftmax(dst, x)
	})
	if allocs != 0 {
		t.Errorf("elementwise ops: have %v allocs per run, want 0", allocs)
	}
}

// TestSwiGLUWide checks SwiGLU (vectorized body and scalar tail) against a
// float64 silu over gates from -200 to 200, lengths with and without a
// tail, and NaN / infinite gates.
func TestSwiGLUWide(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, n := range []int{1, 7, 8, 9, 64, 1539} {
		g, u, have := make([]float32, n), make([]float32, n), make([]float32, n)
		for i := range g {
			g[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(5)-2)))
			if i%97 == 5 {
				g[i] = float32(r.Float64()*400 - 200)
			}
			u[i] = float32(r.NormFloat64())
		}
		SwiGLU(have, g, u)
		for i := range g {
			want := float64(g[i]) / (1 + math.Exp(-float64(g[i]))) * float64(u[i])
			if d := math.Abs(float64(have[i]) - want); d > 4e-7*math.Abs(want)+1e-37 {
				t.Fatalf("n=%d SwiGLU(%v)*%v: have %v, want %v", n, g[i], u[i], have[i], want)
			}
		}
	}
	g := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, -0, 100, -100, 88.5}
	u := []float32{1, 1, 1, 1, 1, 1, 1, 1}
	have := make([]float32, len(g))
	SwiGLU(have, g, u)
	// As the scalar formula: -Inf gives -Inf/Inf = NaN (ggml's too).
	if !math.IsNaN(float64(have[0])) || !math.IsInf(float64(have[1]), 1) || !math.IsNaN(float64(have[2])) ||
		have[3] != 0 || have[5] != 100 || have[6] > 0 || have[6] < -1e-36 {
		t.Fatalf("SwiGLU special values: %v", have)
	}
}
