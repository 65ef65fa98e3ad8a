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
	return denseAttentionP(q, positions, keys, vals, a, false)
}

// denseAttentionP is denseAttention, with the probabilities rounded to f16
// when roundP (as ggml's P·V over an f16 V does).
func denseAttentionP(q []float32, positions []int, keys, vals [][]float32, a AttnParams, roundP bool) []float64 {
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
				p := s[j] / sum
				if roundP {
					p = float64(f16ToF32(f32ToF16(float32(p))))
				}
				for d := range hd {
					out[qo+d] += p * float64(vals[j][kvo+d])
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
			want := denseAttentionP(qo, positions, keys, vals, a, tt.f16)
			have := make([]float32, len(q))
			Attention(p, have, q, positions, kv, layer, a)
			// With f16 probabilities a p_j that lies near a rounding boundary may round
			// the other way than in float64: up to one f16 ulp of p_j (2^-11 for p_j
			// near 1) times |v_j| (random normals, |v| < 4).
			tol := 1e-5
			if tt.f16 {
				tol = 2e-3
			}
			for i := range have {
				if math.Abs(float64(have[i])-want[i]) > tol {
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

// newTestKV returns a PagedKV of nPos random positions for every layer
// (block size bs, a shuffled table over a larger arena).
func newTestKV(r *rand.Rand, f16 bool, layers, nkv, hd, bs, nPos int) *PagedKV {
	nBlocks := (nPos + bs - 1) / bs
	kv := &PagedKV{BlockSize: bs, Layers: layers, KVHeads: nkv, HeadDim: hd}
	arenaBlocks := nBlocks + 2
	for _, b := range r.Perm(arenaBlocks)[:nBlocks] {
		kv.Table = append(kv.Table, int32(b))
	}
	if f16 {
		kv.F16 = make([]uint16, arenaBlocks*kv.BlockElems())
	} else {
		kv.F32 = make([]float32, arenaBlocks*kv.BlockElems())
	}
	row := nkv * hd
	for pos := range nPos {
		for l := range layers {
			StoreKV(kv, l, pos, randFloats(r, row), randFloats(r, row))
		}
	}
	return kv
}

// withFamilies runs f with each SIMD tile family this CPU has and with the
// pure-Go path.
func withFamilies(t *testing.T, f func(t *testing.T)) {
	saved := simd
	defer func() { simd = saved }()
	for _, fam := range append(simdFamilies(), nil) {
		simd = fam
		t.Run(famName(fam), f)
	}
}

// TestAttentionBatchInvariance checks the determinism rule: a query computed
// alone and inside batches of 1..37 queries with different largest
// positions (so different key paddings and query blocks), with 1, 2 or 3
// threads, gives bitwise the same output; and the output stays close to the
// per-query reference.
func TestAttentionBatchInvariance(t *testing.T) {
	withFamilies(t, func(t *testing.T) {
		for _, f16 := range []bool{false, true} {
			for _, shape := range []struct{ nh, nkv, hd int }{{6, 2, 64}, {4, 4, 24}, {3, 1, 8}} {
				t.Run(fmt.Sprintf("f16=%v/h%d/kv%d/d%d", f16, shape.nh, shape.nkv, shape.hd), func(t *testing.T) {
					r := rand.New(rand.NewPCG(21, uint64(shape.hd)))
					const nPos, layer = 300, 1
					kv := newTestKV(r, f16, 2, shape.nkv, shape.hd, 16, nPos)
					a := AttnParams{NHeads: shape.nh, NKVHeads: shape.nkv, HeadDim: shape.hd, Scale: float32(1 / math.Sqrt(float64(shape.hd)))}
					n := shape.nh * shape.hd
					pools := []*Pool{nil, NewPool(2), NewPool(3)}
					defer pools[1].Close()
					defer pools[2].Close()
					for nq := 1; nq <= 37; nq++ {
						positions := make([]int, nq)
						// Mostly a contiguous chunk ending at a random position,
						// sometimes arbitrary positions.
						end := r.IntN(nPos)
						for i := range positions {
							if nq%3 == 0 {
								positions[i] = r.IntN(end + 1)
							} else {
								positions[i] = max(0, end-nq+1+i)
							}
						}
						q := randFloats(r, nq*n)
						have := make([]float32, nq*n)
						Attention(pools[nq%3], have, q, positions, kv, layer, a)
						ref := make([]float32, nq*n)
						attentionRef(nil, ref, q, positions, kv, layer, a)
						tol := 2e-5
						if f16 {
							tol = 2e-3 // p_j in f16: a near-boundary p_j may round either way (TestAttention)
						}
						for i := range have {
							if d := math.Abs(float64(have[i] - ref[i])); d > tol || math.IsNaN(float64(have[i])) {
								t.Fatalf("nq %d element %d: have %v, reference %v", nq, i, have[i], ref[i])
							}
						}
						for i, pos := range positions {
							one := make([]float32, n)
							Attention(pools[(nq+i)%3], one, q[i*n:(i+1)*n], []int{pos}, kv, layer, a)
							for d := range one {
								if math.Float32bits(one[d]) != math.Float32bits(have[i*n+d]) {
									t.Fatalf("nq %d query %d (pos %d) alone, element %d: have %v, in batch %v", nq, i, pos, d, one[d], have[i*n+d])
								}
							}
						}
					}
				})
			}
		}
	})
}

// TestAttentionChunks checks that prefilling positions 0..n-1 in chunks of
// any size gives bitwise what one call gives.
func TestAttentionChunks(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	p := NewPool(2)
	defer p.Close()
	for _, f16 := range []bool{false, true} {
		const nPos, layer = 200, 0
		kv := newTestKV(r, f16, 1, 2, 64, 32, nPos)
		a := AttnParams{NHeads: 6, NKVHeads: 2, HeadDim: 64, Scale: 0.125}
		n := a.NHeads * a.HeadDim
		q := randFloats(r, nPos*n)
		positions := make([]int, nPos)
		for i := range positions {
			positions[i] = i
		}
		all := make([]float32, nPos*n)
		Attention(p, all, q, positions, kv, layer, a)
		for _, chunk := range []int{1, 7, 64, 65, 130} {
			got := make([]float32, nPos*n)
			for c := 0; c < nPos; c += chunk {
				e := min(c+chunk, nPos)
				Attention(p, got[c*n:e*n], q[c*n:e*n], positions[c:e], kv, layer, a)
			}
			for i := range got {
				if math.Float32bits(got[i]) != math.Float32bits(all[i]) {
					t.Fatalf("f16=%v chunk %d element %d: have %v, want %v", f16, chunk, i, got[i], all[i])
				}
			}
		}
	}
}

func TestExpf32(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	check := func(x float32) {
		have, want := expf32(x), float32(math.Exp(float64(x)))
		if math.IsNaN(float64(want)) != math.IsNaN(float64(have)) {
			t.Fatalf("expf32(%v) = %v, want %v", x, have, want)
		}
		if d := int64(math.Float32bits(have)) - int64(math.Float32bits(want)); d > 1 || d < -1 {
			t.Fatalf("expf32(%v) = %v, want %v (%d ulp)", x, have, want, d)
		}
	}
	for _, x := range []float32{0, -0, 1, -1, 88, -87, -87.5, -103, -104, -110, 89, 100,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 0x1p-30, -0x1p-30} {
		check(x)
	}
	for range 1 << 20 {
		check(float32(r.Float64()*120 - 110))
	}
}

// BenchmarkAttention: decode (1 query at 2047) and a prefill chunk (512
// queries at 1536..2047) for 6 heads / 2 KV heads / head dim 64, f32 and
// f16 arenas, new and reference implementation.
func BenchmarkAttention(b *testing.B) {
	r := rand.New(rand.NewPCG(27, 28))
	p := NewPool(0)
	defer p.Close()
	a := AttnParams{NHeads: 6, NKVHeads: 2, HeadDim: 64, Scale: 0.125}
	impls := []struct {
		name string
		fn   func(*Pool, []float32, []float32, []int, *PagedKV, int, AttnParams)
	}{{"new", Attention}, {"ref", attentionRef}}
	for _, f16 := range []bool{false, true} {
		kv := newTestKV(r, f16, 1, 2, 64, 16, 2048)
		for _, nq := range []int{1, 512} {
			positions := make([]int, nq)
			for i := range positions {
				positions[i] = 2048 - nq + i
			}
			q := randFloats(r, nq*a.NHeads*a.HeadDim)
			out := make([]float32, len(q))
			for _, im := range impls {
				b.Run(fmt.Sprintf("%s/f16=%v/q=%d", im.name, f16, nq), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						im.fn(p, out, q, positions, kv, 0, a)
					}
				})
			}
		}
	}
}

// TestSoftmaxCausal compares the softmax in use (SIMD on amd64) with the
// pure-Go one, over lengths with and without a tail and score spreads wide
// enough to underflow.
func TestSoftmaxCausal(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 30))
	for _, spread := range []float64{1, 30, 300} {
		for n := 0; n <= 70; n++ {
			row := make([]float32, 80)
			for j := range row {
				row[j] = float32(r.NormFloat64() * spread)
			}
			ref := append([]float32(nil), row...)
			softmaxCausal(row, n, 0.125)
			softmaxCausalRef(ref, n, 0.125)
			for j := range row {
				if d := math.Abs(float64(row[j] - ref[j])); d > 1e-6*float64(ref[j])+1e-30 || math.IsNaN(float64(row[j])) {
					t.Fatalf("spread %v n %d j %d: have %v, want %v", spread, n, j, row[j], ref[j])
				}
			}
		}
	}
}

// BenchmarkAttentionPV compares single-query attention with and without
// the register-resident P·V kernel (pvGroups) in one run.
func BenchmarkAttentionPV(b *testing.B) {
	r := rand.New(rand.NewPCG(29, 30))
	p := NewPool(0)
	defer p.Close()
	a := AttnParams{NHeads: 9, NKVHeads: 3, HeadDim: 64, Scale: 0.125}
	kv := newTestKV(r, true, 1, 3, 64, 16, 512)
	q := randFloats(r, a.NHeads*a.HeadDim)
	out := make([]float32, len(q))
	saved := pvGroups
	defer func() { pvGroups = saved }()
	for _, on := range []bool{true, false} {
		b.Run(fmt.Sprintf("groups=%v", on), func(b *testing.B) {
			pvGroups = nil
			if on {
				pvGroups = saved
			}
			b.ReportAllocs()
			for b.Loop() {
				Attention(p, out, q, []int{511}, kv, 0, a)
			}
		})
	}
}

// FuzzSingleAttention fuzzes the single-query path's shapes (heads, head
// size, block size, position, cache type, tile family): a query alone must
// equal, bit for bit, the same query computed by the batched path next to
// another one.
func FuzzSingleAttention(f *testing.F) {
	f.Add(uint8(6), uint8(2), uint8(4), uint8(16), uint16(100), true, uint8(0), uint64(1))
	f.Add(uint8(3), uint8(1), uint8(1), uint8(5), uint16(7), false, uint8(1), uint64(2))
	f.Add(uint8(4), uint8(4), uint8(3), uint8(32), uint16(300), true, uint8(2), uint64(3))
	fams := append(simdFamilies(), nil)
	f.Fuzz(func(t *testing.T, nh, nkv, hd8, bs uint8, pos uint16, f16 bool, fam uint8, seed uint64) {
		kvh := 1 + int(nkv%4)
		a := AttnParams{NKVHeads: kvh, NHeads: kvh * (1 + int(nh%4)), HeadDim: 8 * (1 + int(hd8%12)), Scale: 0.2}
		block := 1 + int(bs%40)
		p := int(pos % 600)
		saved := simd
		defer func() { simd = saved }()
		simd = fams[int(fam)%len(fams)]
		r := rand.New(rand.NewPCG(seed, 7))
		kv := newTestKV(r, f16, 1, kvh, a.HeadDim, block, p+2)
		n := a.NHeads * a.HeadDim
		q := randFloats(r, 2*n)
		both := make([]float32, 2*n)
		Attention(nil, both, q, []int{p, p + 1}, kv, 0, a)
		one := make([]float32, n)
		Attention(nil, one, q[:n], []int{p}, kv, 0, a)
		for d := range one {
			if math.Float32bits(one[d]) != math.Float32bits(both[d]) {
				t.Fatalf("%s f16=%v %+v bs=%d pos=%d element %d: alone %v, batched %v", famName(simd), f16, a, block, p, d, one[d], both[d])
			}
		}
	})
}

// BenchmarkAttentionDecode compares, in one run, one decode query through
// the single-query path and through the batched (gather) path, at the
// context lengths of the engine benchmark and longer; 9 heads, 3 KV heads,
// head size 64, f16 cache (SmolLM-135M).
func BenchmarkAttentionDecode(b *testing.B) {
	r := rand.New(rand.NewPCG(31, 32))
	p := NewPool(2)
	defer p.Close()
	a := AttnParams{NHeads: 9, NKVHeads: 3, HeadDim: 64, Scale: 0.125}
	kv := newTestKV(r, true, 1, 3, 64, 16, 2048)
	q := randFloats(r, a.NHeads*a.HeadDim)
	out := make([]float32, len(q))
	defer func() { useSingle = true }()
	for _, pos := range []int{160, 2047} {
		for _, single := range []bool{true, false} {
			b.Run(fmt.Sprintf("pos=%d/single=%v", pos, single), func(b *testing.B) {
				useSingle = single
				positions := []int{pos}
				for b.Loop() {
					Attention(p, out, q, positions, kv, 0, a)
				}
			})
		}
	}
}

// TestAttentionSeqsMatchesAttention checks that AttentionSeqs gives, for
// every sequence of a mixed batch (single queries at positions long and
// short enough to run inline or on the pool, and multi-query chunks), bitwise
// what Attention gives for that sequence alone, for each thread count.
func TestAttentionSeqsMatchesAttention(t *testing.T) {
	withFamilies(t, func(t *testing.T) {
		for _, f16 := range []bool{false, true} {
			t.Run(fmt.Sprintf("f16=%v", f16), func(t *testing.T) {
				r := rand.New(rand.NewPCG(33, 1))
				const nh, nkv, hd, nPos, layer = 9, 3, 64, 700, 1
				a := AttnParams{NHeads: nh, NKVHeads: nkv, HeadDim: hd, Scale: 0.125}
				n := nh * hd
				pools := []*Pool{nil, NewPool(2), NewPool(3)}
				defer pools[1].Close()
				defer pools[2].Close()
				kvs := make([]*PagedKV, 6)
				for i := range kvs {
					kvs[i] = newTestKV(r, f16, 2, nkv, hd, 16, nPos)
				}
				for trial := range 12 {
					var seqs []AttnSeq
					for i, kv := range kvs[:1+trial%len(kvs)] {
						nq := 1
						if (trial+i)%4 == 3 {
							nq = 1 + r.IntN(20)
						}
						end := r.IntN(nPos)
						if trial%2 == 0 {
							end = r.IntN(40) // small: the single queries run inline
						}
						pos := make([]int, nq)
						for j := range pos {
							pos[j] = max(0, end-nq+1+j)
						}
						seqs = append(seqs, AttnSeq{Out: make([]float32, nq*n), Q: randFloats(r, nq*n), Positions: pos, KV: kv})
					}
					p := pools[trial%3]
					AttentionSeqs(p, seqs, layer, a)
					for i, s := range seqs {
						want := make([]float32, len(s.Out))
						Attention(pools[(trial+1)%3], want, s.Q, s.Positions, s.KV, layer, a)
						for d := range want {
							if math.Float32bits(want[d]) != math.Float32bits(s.Out[d]) {
								t.Fatalf("trial %d seq %d (%d queries, last pos %d) element %d: AttentionSeqs %v, Attention %v",
									trial, i, len(s.Positions), s.Positions[len(s.Positions)-1], d, s.Out[d], want[d])
							}
						}
					}
				}
			})
		}
	})
}
