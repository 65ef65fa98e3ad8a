package runner

import (
	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
)

// nameBlendParts names, in u's blend report, the chunks a chat marked on its messages or
// content parts (spec.BlendParts), so that usage.cache.blend says which part each chunk is.
func nameBlendParts(spec *pipeline.Spec, u *engine.Usage) {
	if u.Blend == nil || len(spec.BlendParts) == 0 {
		return
	}
	for i := range u.Blend.Chunks {
		ch := &u.Blend.Chunks[i]
		for _, p := range spec.BlendParts {
			if p.Chunk.Start == ch.Start && p.Chunk.End == ch.End {
				ch.Part = p.Param
				break
			}
		}
	}
}
