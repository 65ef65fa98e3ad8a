package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// denseAttention is the oracle: float64 causal attention over dense K/V
// (as stored, i.e. already rounded for an f16 arena).
func denseAttention(q []float32, positions []int, keys, vals [][]float32, a AttnParams) []float64 {
	hd := a.HeadDim
	out := make([]float64, len(positions)*a.NHeads*hd)
	group := a.NHeads / a.NKVHeads
	for t, pos := range positions {
		for h := range a.NHeads {
			qo := (t*a.NHeads + h) * hd
			kvo := (h / group) * hd
			s := make([]float64, pos+1)
			mx := math.Inf(-1)
			for j := range s {
				for d := range hd {
					s[j] += float64(q[qo+d]) * float64(keys[j][kvo+d])
				}
				s[j] *= float64(a.Scale)
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for j := range s {
				for d := range hd {
					out[qo+d] += s[j] / sum * float64(vals[j][kvo+d])
				}
			}
		}
	}
	return out
}

func TestAttention(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	p := NewPool(2)
	defer p.Close()
	tests := []struct {
		f16             bool
		nh, nkv, hd, bs int
		nPos            int
	}{
		{false, 4, 2, 16, 4, 11},
		{true, 4, 2, 16, 4, 11},
		{false, 3, 3, 8, 16, 40},
		{true, 9, 3, 64, 16, 35},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("f16=%v/h%d/kv%d/d%d/bs%d", tt.f16, tt.nh, tt.nkv, tt.hd, tt.bs), func(t *testing.T) {
			const layers, layer = 3, 1
			nBlocks := (tt.nPos + tt.bs - 1) / tt.bs
			kv := &PagedKV{BlockSize: tt.bs, Layers: layers, KVHeads: tt.nkv, HeadDim: tt.hd}
			// A shuffled table over a larger arena.
			arenaBlocks := nBlocks + 3
			perm := r.Perm(arenaBlocks)
			for _, b := range perm[:nBlocks] {
				kv.Table = append(kv.Table, int32(b))
			}
			if tt.f16 {
				kv.F16 = make([]uint16, arenaBlocks*kv.BlockElems())
			} else {
				kv.F32 = make([]float32, arenaBlocks*kv.BlockElems())
			}
			row := tt.nkv * tt.hd
			keys, vals := make([][]float32, tt.nPos), make([][]float32, tt.nPos)
			for pos := range tt.nPos {
				keys[pos], vals[pos] = randFloats(r, row), randFloats(r, row)
				for l := range layers {
					k, v := keys[pos], vals[pos]
					if l != layer {
						k, v = randFloats(r, row), randFloats(r, row)
					}
					StoreKV(kv, l, pos, k, v)
				}
				if tt.f16 {
					roundF16Ref(keys[pos], keys[pos])
					roundF16Ref(vals[pos], vals[pos])
				}
			}
			a := AttnParams{NHeads: tt.nh, NKVHeads: tt.nkv, HeadDim: tt.hd, Scale: float32(1 / math.Sqrt(float64(tt.hd)))}
			positions := []int{0, 3, tt.nPos - 1, tt.nPos / 2, tt.nPos - 2}
			q := randFloats(r, len(positions)*tt.nh*tt.hd)
			qo := append([]float32(nil), q...)
			if tt.f16 {
				roundF16Ref(qo, qo)
			}
			want := denseAttention(qo, positions, keys, vals, a)
			have := make([]float32, len(q))
			Attention(p, have, q, positions, kv, layer, a)
			for i := range have {
				if math.Abs(float64(have[i])-want[i]) > 1e-5 {
					t.Fatalf("element %d: have %v, want %v", i, have[i], want[i])
				}
			}
			// Each query alone gives bitwise the same row.
			n := tt.nh * tt.hd
			for i, pos := range positions {
				one := make([]float32, n)
				Attention(nil, one, q[i*n:(i+1)*n], []int{pos}, kv, layer, a)
				for d := range one {
					if math.Float32bits(one[d]) != math.Float32bits(have[i*n+d]) {
						t.Fatalf("query %d alone, element %d: have %v, want %v", i, d, one[d], have[i*n+d])
					}
				}
			}
		})
	}
}

// TestVectorHelpersMatchReference compares attention's SIMD dot and axpy
// with the pure-Go ones on odd lengths.
func TestVectorHelpersMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 64, 100} {
		a, b := randFloats(r, n), randFloats(r, n)
		h := make([]uint16, n)
		convertF32ToF16(h, b)
		var mag float64
		for i := range a {
			mag += math.Abs(float64(a[i] * b[i]))
		}
		tol := 1e-6*mag + 1e-7
		if have, want := dotF32(a, b), dotF32Ref(a, b); math.Abs(float64(have-want)) > tol {
			t.Errorf("dotF32 n=%d: have %v, want %v", n, have, want)
		}
		if have, want := dotF16(a, h), dotF16Ref(a, h); math.Abs(float64(have-want)) > tol {
			t.Errorf("dotF16 n=%d: have %v, want %v", n, have, want)
		}
		y1, y2 := randFloats(r, n), make([]float32, n)
		copy(y2, y1)
		axpyF32(y1, 0.3, a)
		axpyF32Ref(y2, 0.3, a)
		for i := range y1 {
			if math.Abs(float64(y1[i]-y2[i])) > 1e-6 {
				t.Errorf("axpyF32 n=%d i=%d: have %v, want %v", n, i, y1[i], y2[i])
			}
		}
		copy(y2, y1)
		axpyF16(y1, -1.5, h)
		axpyF16Ref(y2, -1.5, h)
		for i := range y1 {
			if math.Abs(float64(y1[i]-y2[i])) > 1e-5 {
				t.Errorf("axpyF16 n=%d i=%d: have %v, want %v", n, i, y1[i], y2[i])
			}
		}
	}
}
