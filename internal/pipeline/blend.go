package pipeline

import (
	"stockpot/internal/api"
	"stockpot/internal/blend"
)

// DefaultBlendRecompute is the fraction of chunk tokens a blend recomputes when the request
// names none: CacheBlend's operating point (about 15% kept quality within a few percent of a
// full prefill on its benchmarks); EPIC reports similar quality from far fewer tokens.
const DefaultBlendRecompute = 0.15

// blendSpec turns a request's blend object into the engine's, checked against its prompt of
// n tokens and the model's context: the bad marks of the issue (overlapping or empty spans,
// too many, longer than the context, a fraction outside [0, 1]) are 400s naming blend.
// What the engine cannot blend (a hybrid model) it refuses itself (engine.ErrBlend).
func blendSpec(bp *api.BlendParams, n, contextLength int) (*blend.Spec, error) {
	if bp == nil {
		return nil, nil
	}
	pol, err := blend.ParsePolicy(bp.Policy)
	if err != nil {
		return nil, api.Invalid("blend", "%v", err)
	}
	s := &blend.Spec{Recompute: DefaultBlendRecompute, Policy: pol, Chunks: make([]blend.Chunk, len(bp.Chunks))}
	if bp.Recompute != nil {
		s.Recompute = *bp.Recompute
	}
	for i, c := range bp.Chunks {
		s.Chunks[i] = blend.Chunk{Start: c[0], End: c[1]}
	}
	if err := s.Validate(n, blend.Limits{MaxChunks: blend.DefaultMaxChunks, ContextLength: contextLength}); err != nil {
		return nil, api.Invalid("blend", "%v", err)
	}
	return s, nil
}
