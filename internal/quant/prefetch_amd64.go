//go:build amd64

package quant

import (
	"golang.org/x/sys/cpu"

	"stockpot/internal/gguf"
)

// PrefetchKnob says which Prefetch distance t's kernels read on this CPU (KnobNone when
// none): calibration times only the distances a model's weights use.
func PrefetchKnob(t gguf.Type) string {
	switch t {
	case gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K:
		if useK512 {
			return KnobRows
		}
		if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
			return KnobKAhead
		}
	case gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ8_0:
		if usePairs {
			return KnobRows
		}
		if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
			// The row and tile kernels prefetch at least this far ahead (NEXTGROUP,
			// NEXTPAIR).
			return KnobKAhead
		}
	}
	return KnobNone
}
