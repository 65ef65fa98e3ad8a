package enginebench

import (
	"testing"

	"stockpot/internal/kernels"
)

func BenchmarkTmpDecode(b *testing.B) {
	for _, name := range []string{"q8_0", "q4_k"} {
		b.Run(name, func(b *testing.B) {
			path := "../../.cache/bench-models/smollm-135m-" + name + ".gguf"
			pool := kernels.NewPool(threads)
			defer pool.Close()
			o, done := load(b, path, pool, 2048+64, 1)
			defer done()
			o.decode(b, 1, 0, 8)
			for b.Loop() {
				b.ReportMetric(o.decode(b, 1, 0, 64), "tok/s")
			}
		})
	}
}
