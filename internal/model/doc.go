// Package model runs the forward pass, read from GGUF files, of Llama-family transformers
// (llama, qwen2, qwen3), of the hybrid Qwen3.5 (qwen35: Gated DeltaNet layers beside gated
// attention; qwen35.go), of the hybrid Kimi-Linear (kimi-linear: KDA layers beside multi-head
// latent attention, with a mixture-of-experts FFN; kimi.go, mla.go, moe.go) and of Kimi-K3
// (kimi-k3: kimi-linear's layers inside a residual stream of its own, k3Forward, with banked
// attention residuals, a bounded KDA gate, gated MLA, latent experts and the SiTU activation;
// k3.go). The Gated DeltaNet and KDA layers advance their state by one shared delta-rule step
// (kernels.DeltaStepT), which differs between them only in the decay: one per head or one per channel.
//
// The model reaches the KV cache only through attention: a forward step receives, for each
// sequence in the batch, its new tokens, their positions and a paged view of its K/V blocks
// (kernels.PagedKV). It writes the new tokens' K and V into those blocks and reads the earlier
// ones. Which blocks a sequence owns, shares or reuses is the engine's business, not the model's.
// On an attention model (llama, qwen2, qwen3) a step may also run tokens at positions that are
// not consecutive (Sequence.Positions), and ForwardKV runs only the layers up to one layer's
// K/V: chunk blending's CacheBlend measures with the second and recomputes with the first.
// Only attention layers keep K/V (Config.KVLayers; the blocks' layer slots are the attention
// layers in order). An MLA layer keeps one latent row per token instead of per-head K and V,
// and two MLA layers share a slot (one in its K rows, one in its V rows), so the blocks of an
// MLA model have one K/V head of the latent width (Config.KVHeads, Config.HeadDim). A hybrid
// model's recurrent layers (Gated DeltaNet, KDA) keep instead a recurrent State per
// sequence, of a fixed size whatever the length (Config.StateBytes), which the caller passes
// with the sequence (Sequence.State) and Forward advances; it must stand at the sequence's Pos.
//
// Key types:
//   - Config: the numeric hyper-parameters read from GGUF metadata.
//   - Model: the loaded weights (views into the mmapped file where the type allows) and Forward.
//   - State: one sequence's recurrent state in a hybrid model (NewState, Reset, CopyFrom).
//
// Invariants:
//   - Forward computes every token row with the same instruction sequence whatever the batch
//     composition or chunk split (kernels' determinism rule), so the K/V written for a token and
//     the logits of a row are bitwise independent of batching. The prefix cache depends on it.
//   - A step waits for the pool's threads only at the matrix products and at attention (one
//     loop over every sequence's single query): per-row steps (norms, adds, RoPE, SwiGLU)
//     run on the caller while they are small. One sequence's decode token on a model of plain
//     attention blocks runs fused instead (fused.go): every layer in one parallel region, the
//     threads meeting at five barriers a layer with no serial work between them, every value
//     the loops' (SetFusedDecode turns it off for comparisons). Which thread computes a row
//     never changes its value.
//   - The output head writes the logits rows in place when the callers' Logits are back to
//     back in one buffer (as the engine lays them out); otherwise it copies them out.
//   - Forward is not safe for concurrent use; the engine's runner owns the model.
//   - Weight slices alias the GGUF mapping: the gguf.File must outlive the Model.
package model
