package blend

import "stockpot/internal/kernels"

// Rerotate moves one token's keys (nHeads heads of headDim, RoPE'd at some position p) to
// position p+delta in place: one more rotation by delta's angles, with the model's
// parameters. Exact (bitwise what RoPE at p+delta stores) when p = 0, since the rotation at
// 0 is the identity; otherwise equal up to float rounding, the angles being linear in the
// position. delta 0 leaves k untouched.
func Rerotate(k []float32, nHeads, headDim, delta int, r kernels.RoPEParams) {
	if delta == 0 {
		return
	}
	kernels.RoPE(k, nHeads, headDim, delta, r)
}
