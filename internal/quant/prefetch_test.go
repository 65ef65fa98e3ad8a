package quant

import (
	"fmt"
	"math"
	"testing"
)

// TestPrefetchDistancesKeepValues: whatever distances calibration picks, every kernel
// variant gives the reference's bits (a prefetch only moves bytes closer; the distance is
// read from memory by the generated code, so a wrong register would show here), on decode
// rows (M=1) and on a few rows, over matrices long enough that the distance crosses many
// rows and runs past the end.
func TestPrefetchDistancesKeepValues(t *testing.T) {
	defer SetPrefetch(CurrentPrefetch())
	settings := []Prefetch{{0, 0}, {64, 64}, {4096, 512}, DefaultPrefetch, {32768, 8192}, {1 << 20, 1 << 20}}
	for _, v := range variants() {
		undo := v.set()
		for _, pf := range settings {
			SetPrefetch(pf)
			if got := CurrentPrefetch(); got != pf {
				t.Fatalf("SetPrefetch(%+v) left %+v", pf, got)
			}
			for _, ty := range weightTypes {
				for _, sh := range []struct{ M, N, K int }{{1, 67, 2048}, {3, 41, 1024}} {
					xq, w := randomOperands(ty, sh.M, sh.N, sh.K, uint64(sh.N))
					want := make([]float32, sh.M*sh.N)
					have := make([]float32, sh.M*sh.N)
					refKernels[ty](want, sh.N, xq, sh.M, w, sh.K, 0, sh.N)
					MatMul(ty, have, sh.N, xq, sh.M, w, sh.K, 0, sh.N)
					for i := range want {
						if math.Float32bits(have[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s %s prefetch %+v M=%d: element %d is %v, reference %v", ty, v.name, pf, sh.M, i, have[i], want[i])
						}
					}
				}
			}
		}
		undo()
	}
	SetPrefetch(Prefetch{Rows: -5, KAhead: 1 << 30})
	if got := CurrentPrefetch(); got != (Prefetch{0, 1 << 20}) {
		t.Fatalf("out-of-range distances not clamped: %+v", got)
	}
	for _, ty := range weightTypes {
		switch k := PrefetchKnob(ty); k {
		case KnobNone, KnobRows, KnobKAhead:
		default:
			t.Fatal(fmt.Sprintf("%s: knob %q", ty, k))
		}
	}
}
