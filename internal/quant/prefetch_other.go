//go:build !amd64

package quant

import "stockpot/internal/gguf"

// PrefetchKnob: the portable kernels prefetch nothing.
func PrefetchKnob(gguf.Type) string { return KnobNone }
