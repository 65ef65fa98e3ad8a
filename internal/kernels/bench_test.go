package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

// BenchmarkMatMul reports GFLOP/s of MatMul for the 135M llama shapes
// (N×K weights), per kernel family: the SIMD families this CPU has and the
// pure-Go reference, measured in the same run.
func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	p := NewPool(0)
	defer p.Close()
	shapes := []struct{ N, K int }{{576, 576}, {1536, 576}, {576, 1536}}
	for _, fam := range append(simdFamilies(), nil) {
		for _, typ := range floatTypes {
			for _, s := range shapes {
				w := randWeight(r, typ, s.N, s.K)
				for _, M := range []int{1, 16, 512} {
					if fam == nil && M == 512 {
						continue // minutes per op; the M=16 ratio tells the story
					}
					x := randFloats(r, M*s.K)
					dst := make([]float32, M*s.N)
					b.Run(fmt.Sprintf("%s/%v/M=%d/%dx%d", famName(fam), typ, M, s.N, s.K), func(b *testing.B) {
						b.ReportAllocs()
						for b.Loop() {
							matMulFloat(p, fam, dst, x, M, w)
						}
						b.ReportMetric(2*float64(M*s.N*s.K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
			}
		}
	}
}

func BenchmarkPoolFor(b *testing.B) {
	p := NewPool(0)
	defer p.Close()
	b.ReportAllocs()
	for b.Loop() {
		p.For(64, func(lo, hi int) {})
	}
}

// BenchmarkDecodeBandwidth measures a decode-shaped MatMul (M = 1) over a
// weight far past the caches (about 96 MB, the size of a 135M model's
// matrices), on a 2-thread pool, per weight type, against copy() of as many
// bytes in the same run: the ceiling the forward pass's decode can reach
// with these kernels. GB/s counts weight bytes read; memcpy-GB/s counts bytes
// read plus written (as enginebench's share does), and share is their ratio.
// The "read" row is the same size read by a loop that does nothing else
// (readStream): the ceiling of the kernels' weight reads on these threads.
func BenchmarkDecodeBandwidth(b *testing.B) {
	const size = 96 << 20
	p := NewPool(2)
	defer p.Close()
	r := rand.New(rand.NewPCG(3, 4))
	memcpy := func() float64 {
		src, dst := make([]byte, size/2), make([]byte, size/2)
		for i := range src {
			src[i] = byte(i)
		}
		best := 0.0
		for range 5 {
			start := time.Now()
			p.For(2, func(lo, hi int) {
				for c := lo; c < hi; c++ {
					h := len(src) / 2
					copy(dst[c*h:(c+1)*h], src[c*h:(c+1)*h])
				}
			})
			best = max(best, float64(2*len(src))/time.Since(start).Seconds()/1e9)
		}
		return best
	}
	// The ceiling: the same bytes read by a loop that only reads them, with
	// the kernels' prefetch distance, on the same two threads.
	b.Run("read", func(b *testing.B) {
		buf := make([]byte, size)
		for i := range buf {
			buf[i] = byte(i)
		}
		var sink [2]uint64
		read := func(lo, hi int) {
			for h := lo; h < hi; h++ {
				sink[h] = readStream(buf[h*size/2 : (h+1)*size/2])
			}
		}
		p.For(2, read) // page in
		mc := memcpy()
		for b.Loop() {
			p.For(2, read)
		}
		gbs := float64(size) * float64(b.N) / b.Elapsed().Seconds() / 1e9
		b.ReportMetric(gbs, "GB/s")
		b.ReportMetric(mc, "memcpy-GB/s")
		b.ReportMetric(gbs/mc, "share")
	})
	for _, c := range []struct {
		typ gguf.Type
		K   int
	}{{gguf.TypeQ8_0, 576}, {gguf.TypeQ5_0, 576}, {gguf.TypeQ4_K, 1536}, {gguf.TypeQ6_K, 1536}, {gguf.TypeF16, 576}} {
		b.Run(c.typ.String(), func(b *testing.B) {
			rb := c.typ.RowBytes(c.K)
			N := size / rb
			row := make([]byte, rb)
			if c.typ == gguf.TypeF16 {
				for k := range c.K {
					h := f32ToF16(r.Float32()*2 - 1)
					row[2*k], row[2*k+1] = byte(h), byte(h>>8)
				}
			} else if err := quant.QuantizeRow(c.typ, randFloats(r, c.K), row); err != nil {
				b.Fatal(err)
			}
			w := &Weight{Type: c.typ, Rows: N, Cols: c.K, Data: make([]byte, N*rb)}
			for n := range N {
				copy(w.Data[n*rb:], row)
			}
			x := randFloats(r, c.K)
			dst := make([]float32, N)
			MatMul(p, dst, x, 1, w) // page in
			mc := memcpy()
			for b.Loop() {
				MatMul(p, dst, x, 1, w)
			}
			gbs := float64(len(w.Data)) * float64(b.N) / b.Elapsed().Seconds() / 1e9
			b.ReportMetric(gbs, "GB/s")
			b.ReportMetric(mc, "memcpy-GB/s")
			b.ReportMetric(gbs/mc, "share")
		})
	}
}
