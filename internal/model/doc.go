// Package model runs the forward pass of Llama-family transformers (llama, qwen2, qwen3) read
// from GGUF files.
//
// The model reaches the KV cache only through attention: a forward step receives, for each
// sequence in the batch, its new tokens, their positions and a paged view of its K/V blocks
// (kernels.PagedKV). It writes the new tokens' K and V into those blocks and reads the earlier
// ones. Which blocks a sequence owns, shares or reuses is the engine's business, not the model's.
//
// Key types:
//   - Config: the numeric hyper-parameters read from GGUF metadata.
//   - Model: the loaded weights (views into the mmapped file where the type allows) and Forward.
//
// Invariants:
//   - Forward computes every token row with the same instruction sequence whatever the batch
//     composition or chunk split (kernels' determinism rule), so the K/V written for a token and
//     the logits of a row are bitwise independent of batching. The prefix cache depends on it.
//   - Forward is not safe for concurrent use; the engine's runner owns the model.
//   - Weight slices alias the GGUF mapping: the gguf.File must outlive the Model.
package model
