// Package blendeval measures what chunk blending costs in accuracy, against the full prefill
// of the same prompt on the same model: the quality gate of issue 38.
//
// Measure replays the engine's blend (package blend's plan: each chunk's full blocks
// computed at position 0, copied into the prompt with keys re-rotated, then under EPIC
// SelectEPIC's ranges recomputed in position order, under CacheBlend the measuring pass
// through the check layer, SelectCacheBlend's pick and RecomputePositions in order)
// directly on a model.Model with private K/V slabs, because a
// measurement needs what the engine never exposes: every layer's K/V and the whole logits
// vector. That it measures what the engine serves is a test, not an assumption
// (TestMeasureIsTheEngine: the replay's greedy tokens and blended counts are the engine's for
// the same request). The model's determinism rule (a token's K/V does not depend on how the
// prompt was cut into steps) makes the replay's step sizes irrelevant.
//
// For each recompute fraction and policy it reports the relative L2 deviation of K and V per layer over
// the chunks' positions, the KL divergence of the next-token distribution (the full
// prefill's as the reference), the top-1 agreement over the next Steps tokens of the full
// prefill's greedy continuation (teacher-forced: both runs are fed the reference tokens, so
// one early difference does not cascade), how many free-running greedy tokens agree before
// the first difference, and whether everything is bitwise the full prefill's (fraction 1
// must be).
//
// On synthetic models with random weights these numbers say how far the arithmetic moves,
// not how good the answers are: a random model has no task quality to lose. The published
// task-level evaluations (CacheBlend, EPIC) on real models are the reference for that.
package blendeval
