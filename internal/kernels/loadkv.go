package kernels

import "fmt"

// LoadKV reads back one token's K and V (KVHeads*HeadDim each) for layer at position pos:
// StoreKV's inverse, widening f16 exactly. A Q8_0 arena stores its rows Hadamard-rotated and
// quantized, which LoadKV does not undo: it reports false and reads nothing (chunk blending,
// its one caller, refuses such a cache). A store of what LoadKV read rewrites the same
// bytes (f16 round trips exactly).
func LoadKV(kv *PagedKV, layer, pos int, k, v []float32) bool {
	row := kv.KVHeads * kv.HeadDim
	if len(k) < row || len(v) < row || layer < 0 || layer >= kv.Layers || pos < 0 {
		panic(fmt.Sprintf("kernels: LoadKV layer %d pos %d with len(k)=%d len(v)=%d, row %d", layer, pos, len(k), len(v), row))
	}
	if kv.Q8 != nil {
		return false
	}
	ko, vo := kv.offset(layer, 0, pos), kv.offset(layer, 1, pos)
	if kv.F16 != nil {
		for i := range row {
			k[i] = f16ToF32(kv.F16[ko+i])
			v[i] = f16ToF32(kv.F16[vo+i])
		}
		return true
	}
	copy(k[:row], kv.F32[ko:ko+row])
	copy(v[:row], kv.F32[vo:vo+row])
	return true
}
