// Package identity computes what makes K/V reusable: the model fingerprint and the cache
// identity descriptor that roots every prefix hash chain.
//
// A K/V block may be reused only when everything that shaped its numbers matches: the weights,
// the metadata that changes the math (architecture, shapes, RoPE, norms), the tokenizer and chat
// template that produced the token ids, the K/V element type, the block size, any adapter (LoRA),
// and the tenant's cache salt. A file name or path proves nothing, so none of them enter.
//
// Key types:
//   - Fingerprint: SHA-256 over the numeric metadata, the tensor table and all tensor bytes.
//     Tensor bytes are hashed in 4 MiB chunks on all cores (chunk digests are then hashed in
//     order), so a 1 GB file takes ~0.4 s on two cores with SHA-NI.
//   - Descriptor: the fingerprint plus the serving choices (KV dtype, block size, tokenizer and
//     template digest, LoRA). Its Digest is the identity root the prefix package chains from.
//
// Invariants: two files whose tensor bytes, tensor table or number-affecting metadata differ in
// any byte get different fingerprints; descriptive metadata (general.name, author, license ...)
// does not enter, so renaming a model keeps its cache.
package identity
