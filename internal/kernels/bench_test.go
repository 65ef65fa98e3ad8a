package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
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
