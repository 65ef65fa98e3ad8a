// Package blend holds the pure parts of chunk blending: reuse of K/V that is not a prefix.
//
// # The problem
//
// A RAG request puts k retrieved chunks after a system prompt, in an order and combination
// that rarely repeats. Prefix caching (package prefix) reuses a block only when every token
// before it matches, so it reuses the system prompt and recomputes every chunk. Blending
// caches each chunk on its own and places its K/V at whatever position the chunk takes in a
// later prompt (Prompt Cache, CacheBlend, EPIC in the literature).
//
// # What is cached: a chunk as if it began the sequence
//
// A marked chunk [start, end) of the prompt is computed at positions 0..end-start-1 with
// nothing before it, and its full blocks are committed to the ordinary prefix cache under
// the chunk's own chain: root ChunkRoot(root) = prefix.DerivedRoot(root, "blend-chunk"), where
// root is the request's own Root(identity, cache_salt). So a chunk's blocks name the model,
// the tenant's salt and the chunk's tokens, like any block, live in every tier like any
// block (the events, the write-back and the restore see a block and its hash), and can
// never be mistaken for a prefix's blocks: the derived root is no prefix root. A chunk's
// trailing partial block is not cached (its K/V is final but the block is not full); those
// tokens are recomputed where the chunk is used.
//
// # Placing a chunk: re-rotation
//
// With RoPE a key at position p is R(p)·k, R a rotation by angles linear in p, so a key
// cached at chunk position j moves to prompt position start+j by one more rotation, R(start)
// (Rerotate): R(start)·R(j)·k = R(start+j)·k, up to float rounding. For j = 0 the cached key
// is k itself (R(0) is exactly the identity in ggml's arithmetic), and Rerotate(start) is
// bitwise the key a full prefill stores. Values carry no position and are copied as they are.
// MLA (kimi) would rotate only its decoupled rope part of the latent row; it is not wired
// (see Hybrids).
//
// # Recompute: which tokens, and why the result is still sound
//
// A chunk's cached K/V never saw the tokens before it (its attention ran over the chunk
// alone), so its deeper layers deviate from a full prefill's. Blending recomputes a fraction
// f of the prompt's chunk tokens, in position order, attending over the blended K/V; every
// token not covered by a cached chunk is computed as usual, and the last prompt token always
// is (its logits give the first output token). Two policies choose the tokens:
//
//   - EPIC (Policy EPIC, SelectEPIC): the first ⌈f·len⌉ tokens of each chunk. The deviation
//     concentrates at a chunk's start (the attention sink the chunk formed on its own first
//     tokens); recomputing them is position-static and needs nothing but the marks.
//   - CacheBlend (Policy CacheBlend, SelectCacheBlend): measure, then pick. Every position
//     from the exact prefix to the last copied one runs through layers 0..L−1 and layer L's
//     K/V projection (model.ForwardKV; L is DefaultCheckLayer, 1, in the engine's config),
//     with attention over the true K/V of every earlier position, so its layer-L K/V are a
//     full prefill's. A copied position's deviation is the L2 distance, over every head,
//     of those fresh K and V from its cached ones (key re-rotated). Layer 0 cannot serve: a
//     token's layer-0 K/V depend on its embedding and position alone and never deviate
//     after re-rotation. The ⌈f·n⌉ positions that deviate most, of the request's n copied
//     ones (per request, not per chunk: a later chunk missed more context and may need more
//     of the budget), ties to the earlier position, are recomputed through every layer at
//     their own positions (not consecutive: model.Sequence.Positions), in one position-
//     ordered list with the positions no chunk covers (RecomputePositions), attending over
//     the blended K/V; the others keep the cached K/V in every layer (the copies, applied
//     after the measuring pass, overwrite all it wrote). The pass costs (L+1)/layers of a
//     prefill of the chunks' span.
//
// f = 1 recomputes every token in position order, under either policy: the K/V and the
// logits are bitwise those of a full prefill (the model's determinism rule: a token's K/V does not depend on how the
// prompt was cut into steps). That is the oracle the engine's tests hold blending to. f = 0
// with a chunk at position 0 and nothing before it also reuses exactly: the cached K/V is
// what a full prefill computes there. Below 1 the output deviates; how much is measured per
// layer and at the logits, not assumed.
//
// A blended request's output depends only on the request: whether its chunks were cached
// before or computed by this very request, the K/V it blends is the same (a chunk at
// position 0 is computed deterministically), so a cold and a warm blend answer alike.
//
// # What a blended request commits
//
// Only blocks that a full prefill would hold bitwise may enter the prefix cache under the
// prompt's chain: those wholly before the first blended (copied, not recomputed) position.
// Past it every block depends on approximate K/V, so the request keeps it to itself and
// commits nothing there (and no generated block): a later plain request never reuses
// blended K/V, and outputs without blending stay bitwise what they were.
//
// Above f = 0 that prefix runs through each first chunk's recomputed head (exact: it attends
// only to exact K/V), so a later request with the same first chunk matches it partway into
// the chunk. That chunk is still blended (SelectEPIC): its cached blocks are at chunk
// positions, so it is looked up whole, and the part past the prefix is copied from chunk
// position from−start on; what EPIC recomputes of it is the part of its head past the
// prefix. The K/V are then bitwise those the request would blend with only the system
// prompt matched (the head's positions before from hold the same exact K/V either way).
//
// # Hybrids
//
// qwen35 (Gated DeltaNet), kimi-linear and kimi-k3 (KDA) carry a recurrent state that
// depends on every token before. A chunk's state computed at position 0 summarises the chunk
// alone; there is no analogue of re-rotation that turns it into the state after the system
// prompt and the earlier chunks (the recurrence is a product of data-dependent decays and
// rank-one updates, not a rotation). Blending only the attention layers would still have to
// run every recurrent layer over every chunk token to produce the state the next layer
// reads, so it saves only the attention layers' share, and the attention layers' inputs then
// come from exact recurrent outputs while their cached K/V came from chunk-local ones: a
// mix neither CacheBlend nor EPIC measured. The engine therefore refuses blending on hybrid
// models with a clear error (ErrHybrid) rather than serve an unmeasured approximation; MLA's
// decoupled rope part is the re-rotation such a path would need.
//
// # Key types and functions
//
//   - Spec, Chunk, Policy: a request's marks, validated by Spec.Validate against the prompt
//     and Limits (Normalize sorts them); every error wraps ErrInvalid.
//   - ChunkRoot: the chain root of a request's chunks.
//   - Placement, SelectEPIC, Selection: what the engine copies and what it recomputes.
//   - SelectCacheBlend, CacheBlendCount, RecomputePositions: CacheBlend's pick from the
//     measured deviations, and the order it recomputes in.
//   - Rerotate: the key rotation from chunk position to prompt position.
//
// # How the engine uses it
//
// engine.Request.Blend carries the Spec. At the first step after admission (the prefix
// match is known then: a prompt's exact prefix is reused as usual and blending starts after
// it) the engine looks each chunk's full blocks up under ChunkRoot, allocates and computes
// the missing ones at position 0 (plan items over the chunk's own block table), commits
// them, then copies and re-rotates every cached chunk block into the request's own blocks
// (Plan.Blends, applied by the runner before the forward pass) and runs SelectEPIC's
// recompute ranges as ordinary prefill items, the last one with logits. Under CacheBlend
// the measuring pass comes first and the copies after it (engine/blend_cacheblend.go); at
// f = 0 its answer is EPIC's at 0 bitwise. Decode is unchanged.
package blend
