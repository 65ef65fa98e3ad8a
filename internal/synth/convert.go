package synth

import (
	"fmt"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

// convertRow stores one row of float32 as t (F16, BF16 or a block type);
// the numerics are package quant's, which match ggml's.
func convertRow(t gguf.Type, src []float32, dst []byte) error {
	switch t {
	case gguf.TypeF16, gguf.TypeBF16:
		conv := quant.F32ToF16
		if t == gguf.TypeBF16 {
			conv = quant.F32ToBF16
		}
		if len(dst) != 2*len(src) {
			return fmt.Errorf("synth: %s row of %d needs %d bytes, have %d", t, len(src), 2*len(src), len(dst))
		}
		for i, x := range src {
			h := conv(x)
			dst[2*i], dst[2*i+1] = byte(h), byte(h>>8)
		}
		return nil
	}
	return quant.QuantizeRow(t, src, dst)
}
