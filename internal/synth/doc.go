// Package synth builds synthetic GGUF models: random weights, a real trained
// tokenizer, and exactly the metadata llama.cpp's loader reads, so that the
// same file runs in Stockpot and in llama.cpp (the numerical reference).
//
// Key types and functions:
//   - Preset: a named model shape (architecture, dimensions, tokenizer,
//     chat template, rope settings). Presets lists them; Lookup finds one.
//   - Options: the seed and the weight type (F32, F16, BF16, Q8_0, Q4_0,
//     Q5_0, Q4_K and Q5_K in the Q4_K_M and Q5_K_M mixes or with Small the
//     _S ones, Q6_K).
//   - Build returns a gguf.Writer holding the model; WriteFile writes it.
//
// Tokenizers come from package vocab (trained here on an embedded corpus,
// never downloaded). Each trained vocabulary is cached for the life of the
// process, so building several presets that share one trains it once.
//
// Invariants:
//   - Build is a pure function of (preset, Options): the same inputs give a
//     byte-identical file. Every tensor draws from its own generator seeded
//     by (Options.Seed, tensor name), so a tensor's values do not depend on
//     the weight type or on which other tensors exist: an F32 and a Q8_0
//     build of one preset hold the same weights before quantization.
//   - Weights are uniform with the variance of N(0, 1/fan_in), so every
//     projection keeps unit-scale activations and each layer adds O(1) to
//     the residual stream (it grows like the square root of the depth, and
//     RMS norms see no NaN or overflow). The output head, and a tied
//     embedding, have standard deviation 1.5/sqrt(embed): logits come out
//     with a spread near 1.5 (llama.cpp measures 1.44 to 1.50 on the
//     presets). Small tied embeddings keep the input token's own logit
//     from dominating (tiny tied models still repeat themselves sometimes).
//   - Norm weights are near 1, biases small. One-dimensional tensors
//     (norms, biases, rope_freqs) are always F32. Matrix types follow
//     llama-quantize's llama_tensor_get_type (tensorType): the output head
//     in Q6_K (Q8_0 when 256 does not divide its rows), the _M mixes' Q6_K
//     layers (attn_v or qwen35's attn_qkv, ffn_down) and Q4_K_S's Q5_K
//     ones, and the shape fallbacks Q4_K -> Q5_0, Q6_K -> Q8_0, then F16
//     (Q5_K -> Q5_1 is an error: Stockpot has no Q5_1). The files equal
//     llama-quantize's output for the F32 build, tensor for tensor and byte
//     for byte (TestMixMatchesLlamaQuantize).
//   - Dimensions are in GGUF order: Dims[0] is the row length (ne0).
package synth
