package synth

import (
	"fmt"

	"stockpot/internal/gguf"
)

// convertRow stores one row as t. F16/BF16 and the block quantizers belong
// to package quant, which is not written yet; until it is, only F32 builds.
func convertRow(t gguf.Type, src []float32, dst []byte) error {
	return fmt.Errorf("synth: %s needs package quant, not available yet", t)
}
