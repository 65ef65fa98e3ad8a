package server

import "stockpot/internal/engine"

// blendChunkOutcomes are stockpot_blend_chunks_total's outcome values.
var blendChunkOutcomes = []string{"hit", "miss", "declined"}

// observeBlend counts a finished request's blend (nil: it asked for none): its blended
// tokens as a source of stockpot_prompt_tokens_total, its recomputed ones, and each chunk:
// hit when some of its blocks were found in the chunk cache, miss when none were (the
// request computed them at position 0, or the chunk was inside the reused prefix or shorter
// than a block), declined when the request was computed without blending.
func (m *metrics) observeBlend(b *engine.BlendUsage) {
	if b == nil {
		return
	}
	m.promptTokens.WithLabelValues(sourceBlended).Add(float64(b.BlendedTokens))
	m.blendRecomp.Add(float64(b.RecomputedTokens))
	for _, ch := range b.Chunks {
		switch {
		case b.Declined != "":
			m.blendChunks.WithLabelValues("declined").Inc()
		case ch.Hit > 0:
			m.blendChunks.WithLabelValues("hit").Inc()
		default:
			m.blendChunks.WithLabelValues("miss").Inc()
		}
	}
}
