package llamaref

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParseBench(t *testing.T) {
	b, err := os.ReadFile("testdata/llama-bench.json")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := parseBench(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	pp, tg := rs[0], rs[1]
	if pp.Test != "pp512" || pp.NPrompt != 512 || pp.Threads != 2 || pp.TypeK != "f16" || pp.FlashAttn != 0 ||
		pp.TokensPerSec != 25600 || pp.AvgNs != 20e6 || len(pp.SamplesNs) != 2 || pp.NUBatch != 512 {
		t.Errorf("pp result = %+v", pp)
	}
	if tg.Test != "tg64" || tg.NGen != 64 || tg.TokensPerSec != 1000 {
		t.Errorf("tg result = %+v", tg)
	}
}

func TestNativeNotBuilt(t *testing.T) {
	t.Setenv("STOCKPOT_LLAMA_NATIVE_BIN", t.TempDir())
	_, err := NativeBench(tinyModel, []int{16}, 4, 1, BenchOptions{})
	if !errors.Is(err, ErrNativeNotBuilt) || !strings.Contains(err.Error(), "run scripts/build-llama-native.sh") {
		t.Errorf("NativeBench without binaries: err = %v, want ErrNativeNotBuilt", err)
	}
	if _, err := NativeBench(tinyModel, []int{16}, 4, 1, BenchOptions{KVType: "f32"}); err == nil || !strings.Contains(err.Error(), "f32") {
		t.Errorf("f32 K/V: err = %v, want llama-bench's missing f32 named", err)
	}
}

// BenchmarkNativeBench runs the real llama-bench on the tiny model. It is a
// benchmark, not a test, because it needs scripts/build-llama-native.sh (about
// 40 minutes on 2 cores), which `make test` does not run; like `make bench`, it
// fails (never skips) when the binaries are missing:
//
//	go test -run '^$' -bench NativeBench -benchtime 1x ./internal/llamaref
func BenchmarkNativeBench(b *testing.B) {
	for range b.N {
		// One thread and one repetition: this checks the plumbing, not the speed.
		rs, err := NativeBench(tinyModel, []int{32}, 4, 1, BenchOptions{Repetitions: 1})
		if err != nil {
			b.Fatal(err)
		}
		if len(rs) != 2 || rs[0].Test != "pp32" || rs[1].Test != "tg4" {
			b.Fatalf("tests %+v, want pp32 and tg4", rs)
		}
		for _, r := range rs {
			if r.Threads != 1 || r.TypeK != "f16" || r.TypeV != "f16" || r.FlashAttn != 0 || !(r.TokensPerSec > 0) {
				b.Errorf("%s: %+v, want 1 thread, f16 K/V, flash attention off, a positive rate", r.Test, r)
			}
			b.ReportMetric(r.TokensPerSec, r.Test+"-tok/s")
		}
	}
}
