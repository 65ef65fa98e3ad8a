package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

// newTestKVQ8 is newTestKV for a Q8 arena. It also returns, for layer, the
// K and V rows as stored (rotated when hd is a multiple of 64, quantized,
// dequantized), for the dense oracle.
func newTestKVQ8(r *rand.Rand, layers, layer, nkv, hd, bs, nPos int) (kv *PagedKV, keys, vals [][]float32) {
	nBlocks := (nPos + bs - 1) / bs
	kv = &PagedKV{BlockSize: bs, Layers: layers, KVHeads: nkv, HeadDim: hd}
	arenaBlocks := nBlocks + 2
	for _, b := range r.Perm(arenaBlocks)[:nBlocks] {
		kv.Table = append(kv.Table, int32(b))
	}
	kv.Q8 = make([]byte, arenaBlocks*kv.blockBytesQ8())
	row := nkv * hd
	for pos := range nPos {
		for l := range layers {
			k, v := randFloats(r, row), randFloats(r, row)
			StoreKV(kv, l, pos, k, v)
			if l == layer {
				keys = append(keys, roundedQ8(k, rotK(hd)))
				vals = append(vals, roundedQ8(v, rotV(hd)))
			}
		}
	}
	return kv, keys, vals
}

// roundedQ8 returns x rotated in chunks of n (0: not rotated), quantized
// to Q8_0 (ggml's x86 from_float) and back.
func roundedQ8(x []float32, n int) []float32 {
	r := append([]float32(nil), x...)
	fwht(r, n)
	b := make([]byte, len(x)/q8Block*q8Bytes)
	quant.QuantizeActivations(gguf.TypeQ8_0, r, b)
	out := make([]float32, len(x))
	dequantQ8(out, b)
	return out
}

// hadamard returns ggml_gen_hadamard's n×n matrix, in float64.
func hadamard(n int) [][]float64 {
	h := make([][]float64, n)
	for i := range h {
		h[i] = make([]float64, n)
	}
	h[0][0] = 1 / math.Sqrt(float64(n))
	for s := 1; s < n; s *= 2 {
		for i := range s {
			for j := range s {
				v := h[i][j]
				h[i+s][j], h[i][j+s], h[i+s][j+s] = v, v, -v
			}
		}
	}
	return h
}

// TestFWHT checks fwht against the explicit matrix product and H·H = I.
func TestFWHT(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	for _, n := range []int{64, 128, 256, 512} {
		h := hadamard(n)
		x := randFloats(r, 2*n)
		y := append([]float32(nil), x...)
		fwht(y, n)
		for c := 0; c < 2; c++ {
			for i := range n {
				var want float64
				for j := range n {
					want += h[i][j] * float64(x[c*n+j])
				}
				if d := math.Abs(float64(y[c*n+i]) - want); d > 1e-5 {
					t.Fatalf("n %d chunk %d element %d: have %v, want %v", n, c, i, y[c*n+i], want)
				}
			}
		}
		fwht(y, n)
		for i := range x {
			if d := math.Abs(float64(y[i] - x[i])); d > 1e-5 {
				t.Fatalf("n %d: H·H·x element %d = %v, want %v", n, i, y[i], x[i])
			}
		}
	}
	for _, tt := range []struct{ hd, k, v int }{{32, 0, 0}, {64, 64, 64}, {96, 0, 0}, {128, 128, 64}, {192, 64, 64}, {256, 256, 64}} {
		if k, v := rotK(tt.hd), rotV(tt.hd); k != tt.k || v != tt.v {
			t.Errorf("head dim %d: rotK %d rotV %d, want %d %d (llama-kv-cache.cpp)", tt.hd, k, v, tt.k, tt.v)
		}
	}
}

func TestStoreKVQ8(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	kv, keys, vals := newTestKVQ8(r, 2, 1, 3, 64, 4, 9)
	for pos := range 9 {
		for isV, want := range [][]float32{keys[pos], vals[pos]} {
			o := kv.byteOffsetQ8(1, isV, pos)
			have := make([]float32, 3*64)
			dequantQ8(have, kv.Q8[o:o+3*kv.headBytesQ8()])
			for i := range have {
				if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
					t.Fatalf("pos %d isV %d element %d: stored %v, want %v", pos, isV, i, have[i], want[i])
				}
			}
		}
	}
	// Quantization error is at most half a step, d/2 = amax/254 per block.
	x := randFloats(r, 64)
	y := roundedQ8(x, 0)
	for b := range 2 {
		var amax float64
		for _, v := range x[b*32 : (b+1)*32] {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		for i := b * 32; i < (b+1)*32; i++ {
			if d := math.Abs(float64(x[i] - y[i])); d > amax/254*1.01 {
				t.Fatalf("element %d: %v quantized to %v, error %v > step/2 %v", i, x[i], y[i], d, amax/254)
			}
		}
	}
}

// TestAttentionQ8 compares Q8 attention with the float64 dense oracle over
// the stored (dequantized) K/V and q quantized to q8_0 per head, as
// llama.cpp's flash attention sees them.
func TestAttentionQ8(t *testing.T) {
	r := rand.New(rand.NewPCG(33, 34))
	p := NewPool(2)
	defer p.Close()
	for _, tt := range []struct{ nh, nkv, hd, bs, nPos int }{
		{4, 2, 32, 4, 11}, {3, 3, 64, 16, 40}, {9, 3, 64, 16, 35}, {2, 1, 128, 8, 70}, {2, 2, 96, 8, 20}, {2, 1, 192, 4, 9},
	} {
		t.Run(fmt.Sprintf("h%d/kv%d/d%d/bs%d", tt.nh, tt.nkv, tt.hd, tt.bs), func(t *testing.T) {
			const layers, layer = 3, 1
			kv, keys, vals := newTestKVQ8(r, layers, layer, tt.nkv, tt.hd, tt.bs, tt.nPos)
			a := AttnParams{NHeads: tt.nh, NKVHeads: tt.nkv, HeadDim: tt.hd, Scale: float32(1 / math.Sqrt(float64(tt.hd)))}
			positions := []int{0, 3, tt.nPos - 1, tt.nPos / 2, tt.nPos - 2}
			q := randFloats(r, len(positions)*tt.nh*tt.hd)
			qo := make([]float32, 0, len(q))
			for h := 0; h < len(q); h += tt.hd {
				qo = append(qo, roundedQ8(q[h:h+tt.hd], rotK(tt.hd))...)
			}
			want := denseAttention(qo, positions, keys, vals, a)
			if n := rotV(tt.hd); n > 0 { // the output is rotated back
				hm := hadamard(n)
				for c := 0; c < len(want); c += n {
					chunk := append([]float64(nil), want[c:c+n]...)
					for i := range n {
						want[c+i] = 0
						for j := range n {
							want[c+i] += hm[i][j] * chunk[j]
						}
					}
				}
			}
			have := make([]float32, len(q))
			Attention(p, have, q, positions, kv, layer, a)
			ref := make([]float32, len(q))
			attentionRef(p, ref, q, positions, kv, layer, a)
			for i := range have {
				if math.Abs(float64(have[i])-want[i]) > 1e-5 || math.Abs(float64(ref[i])-want[i]) > 1e-5 {
					t.Fatalf("element %d: have %v, reference %v, oracle %v", i, have[i], ref[i], want[i])
				}
			}
		})
	}
}

// checkQ8Invariance runs the determinism rule for one Q8 K/V: every query
// of positions computed in one call, alone, and with other pools gives
// bitwise the same row, close to attentionRef.
func checkQ8Invariance(t *testing.T, pools []*Pool, kv *PagedKV, a AttnParams, q []float32, positions []int) {
	t.Helper()
	n := a.NHeads * a.HeadDim
	nq := len(positions)
	have := make([]float32, nq*n)
	Attention(pools[nq%len(pools)], have, q, positions, kv, 0, a)
	ref := make([]float32, nq*n)
	attentionRef(nil, ref, q, positions, kv, 0, a)
	for i := range have {
		if d := math.Abs(float64(have[i] - ref[i])); d > 2e-5 || math.IsNaN(float64(have[i])) {
			t.Fatalf("nq %d element %d: have %v, reference %v", nq, i, have[i], ref[i])
		}
	}
	for i, pos := range positions {
		one := make([]float32, n)
		Attention(pools[(nq+i+1)%len(pools)], one, q[i*n:(i+1)*n], []int{pos}, kv, 0, a)
		for d := range one {
			if math.Float32bits(one[d]) != math.Float32bits(have[i*n+d]) {
				t.Fatalf("nq %d query %d (pos %d) alone, element %d: have %v, in batch %v", nq, i, pos, d, one[d], have[i*n+d])
			}
		}
	}
}

// TestAttentionQ8BatchInvariance is TestAttentionBatchInvariance for a Q8
// arena.
func TestAttentionQ8BatchInvariance(t *testing.T) {
	pools := []*Pool{nil, NewPool(2), NewPool(3)}
	defer pools[1].Close()
	defer pools[2].Close()
	withFamilies(t, func(t *testing.T) {
		for _, shape := range []struct{ nh, nkv, hd int }{{6, 2, 64}, {4, 4, 32}, {3, 1, 96}} {
			t.Run(fmt.Sprintf("h%d/kv%d/d%d", shape.nh, shape.nkv, shape.hd), func(t *testing.T) {
				r := rand.New(rand.NewPCG(35, uint64(shape.hd)))
				const nPos = 300
				kv, _, _ := newTestKVQ8(r, 1, 0, shape.nkv, shape.hd, 16, nPos)
				a := AttnParams{NHeads: shape.nh, NKVHeads: shape.nkv, HeadDim: shape.hd, Scale: float32(1 / math.Sqrt(float64(shape.hd)))}
				for nq := 1; nq <= 37; nq += 3 {
					positions := make([]int, nq)
					end := r.IntN(nPos)
					for i := range positions {
						if nq%2 == 0 {
							positions[i] = r.IntN(end + 1)
						} else {
							positions[i] = max(0, end-nq+1+i)
						}
					}
					checkQ8Invariance(t, pools, kv, a, randFloats(r, nq*shape.nh*shape.hd), positions)
				}
			})
		}
	})
}

// TestAttentionQ8Chunks: prefilling positions 0..n-1 in chunks of any size
// gives bitwise what one call gives.
func TestAttentionQ8Chunks(t *testing.T) {
	r := rand.New(rand.NewPCG(37, 38))
	p := NewPool(2)
	defer p.Close()
	const nPos = 200
	kv, _, _ := newTestKVQ8(r, 1, 0, 2, 64, 32, nPos)
	a := AttnParams{NHeads: 6, NKVHeads: 2, HeadDim: 64, Scale: 0.125}
	n := a.NHeads * a.HeadDim
	q := randFloats(r, nPos*n)
	positions := make([]int, nPos)
	for i := range positions {
		positions[i] = i
	}
	all := make([]float32, nPos*n)
	Attention(p, all, q, positions, kv, 0, a)
	for _, chunk := range []int{1, 7, 64, 65, 130} {
		got := make([]float32, nPos*n)
		for c := 0; c < nPos; c += chunk {
			e := min(c+chunk, nPos)
			Attention(p, got[c*n:e*n], q[c*n:e*n], positions[c:e], kv, 0, a)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(all[i]) {
				t.Fatalf("chunk %d element %d: have %v, want %v", chunk, i, got[i], all[i])
			}
		}
	}
}

// FuzzAttentionQ8Shapes checks, for fuzzed head counts, head dims, block
// sizes, sequence lengths and query positions, that Q8 attention is close
// to attentionRef and that each query alone gives bitwise its row in the
// batch.
func FuzzAttentionQ8Shapes(f *testing.F) {
	f.Add(uint8(2), uint8(1), uint8(1), uint8(4), uint16(17), uint64(1), []byte{0, 5, 16})
	f.Add(uint8(6), uint8(2), uint8(2), uint8(16), uint16(300), uint64(2), []byte{255, 254, 3})
	f.Add(uint8(1), uint8(1), uint8(4), uint8(1), uint16(1), uint64(3), []byte{})
	f.Add(uint8(9), uint8(3), uint8(3), uint8(7), uint16(129), uint64(4), []byte{64, 63, 65, 128})
	pools := []*Pool{nil, NewPool(2), NewPool(3)}
	f.Cleanup(func() { pools[1].Close(); pools[2].Close() })
	f.Fuzz(func(t *testing.T, group, nkv, hdBlocks, bs uint8, nPos uint16, seed uint64, pos []byte) {
		g, kvh := 1+int(group)%4, 1+int(nkv)%4
		hd := 32 * (1 + int(hdBlocks)%4)
		b := 1 + int(bs)%32
		np := 1 + int(nPos)%400
		r := rand.New(rand.NewPCG(seed, 39))
		kv, _, _ := newTestKVQ8(r, 1, 0, kvh, hd, b, np)
		a := AttnParams{NHeads: g * kvh, NKVHeads: kvh, HeadDim: hd, Scale: float32(1 / math.Sqrt(float64(hd)))}
		positions := []int{np - 1}
		for i := 0; i+1 < len(pos) && len(positions) < 40; i += 2 {
			positions = append(positions, int(binary.LittleEndian.Uint16(pos[i:]))%np)
		}
		checkQ8Invariance(t, pools, kv, a, randFloats(r, len(positions)*a.NHeads*hd), positions)
	})
}

// BenchmarkAttentionQ8 is BenchmarkAttention's shapes on a Q8 arena (compare
// with its f16=true rows).
func BenchmarkAttentionQ8(b *testing.B) {
	r := rand.New(rand.NewPCG(27, 28))
	p := NewPool(0)
	defer p.Close()
	a := AttnParams{NHeads: 6, NKVHeads: 2, HeadDim: 64, Scale: 0.125}
	kv, _, _ := newTestKVQ8(r, 1, 0, 2, 64, 16, 2048)
	for _, nq := range []int{1, 512} {
		positions := make([]int, nq)
		for i := range positions {
			positions[i] = 2048 - nq + i
		}
		q := randFloats(r, nq*a.NHeads*a.HeadDim)
		out := make([]float32, len(q))
		b.Run(fmt.Sprintf("q=%d", nq), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Attention(p, out, q, positions, kv, 0, a)
			}
		})
	}
}

// TestDequantQ8MatchesReference: the dequantization in use (AVX2 on amd64)
// gives the reference's bits, for every int8 and scales including zero,
// subnormal, infinite and NaN halves.
func TestDequantQ8MatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for _, nb := range []int{0, 1, 2, 3, 8, 17} {
		src := make([]byte, nb*q8Bytes)
		for i := range src {
			src[i] = byte(r.Uint32())
		}
		for b := 0; b < nb && b < 5; b++ {
			binary.LittleEndian.PutUint16(src[b*q8Bytes:], []uint16{0, 0x0001, 0x7c00, 0x7e00, 0x3c00}[b])
		}
		have, want := make([]float32, nb*q8Block), make([]float32, nb*q8Block)
		dequantQ8(have, src)
		dequantQ8Ref(want, src)
		for i := range have {
			if math.Float32bits(have[i]) != math.Float32bits(want[i]) && !(math.IsNaN(float64(have[i])) && math.IsNaN(float64(want[i]))) {
				t.Fatalf("nb %d element %d: have %v, want %v", nb, i, have[i], want[i])
			}
		}
	}
}
