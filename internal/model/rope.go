package model

import "stockpot/internal/kernels"

// RoPE returns the rotary-embedding parameters the attention layers rotate queries and keys
// with (chunk blending re-rotates cached keys with them: package blend).
func (m *Model) RoPE() kernels.RoPEParams { return m.rope }
