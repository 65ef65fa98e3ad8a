// Package llamaref runs llama.cpp as Stockpot's numerical reference.
//
// It owns two ways of running llama.cpp:
//
//   - The node-llama-cpp reference (Tokenize, Detokenize, Evaluate, Metadata,
//     Speed). A Go call writes one JSON document to tools/llamaref/ref.mjs, which
//     loads the GGUF once with the prebuilt llama.cpp library that node-llama-cpp
//     3.21.1 ships, runs every request in it and answers with one JSON document.
//     Batch prompts into one call: each call pays node start-up and model load
//     (about 1 to 2 s). The library is installed by `make deps` into
//     .cache/llamaref (the STOCKPOT_LLAMAREF_DIR environment variable overrides
//     the location). When it is missing, every call fails with an error that
//     wraps ErrNotInstalled and says: run "make deps". Tests that need the
//     reference must fail with that error, not skip.
//
//   - Native binaries (NativeBench), built by scripts/build-llama-native.sh from
//     the same llama.cpp source into .cache/llama.cpp-build with -march=native.
//     The prebuilt library is generic and slower, so speed ratios against
//     llama.cpp must use these. When missing, NativeBench fails with
//     ErrNativeNotBuilt: run scripts/build-llama-native.sh.
//
// Numerics of Evaluate, the contract the rest of Stockpot is tested against:
// every prompt runs alone from an empty K/V cache at position 0, flash
// attention off, K and V cache in f32 (Options.KVType; Q8_0 K/V runs with
// flash attention on, which llama.cpp requires for it), a fixed thread count,
// n_batch = n_ubatch = Options.BatchSize. Continuations are greedy (argmax,
// lowest id on ties) and do not stop at end-of-generation tokens.
// LastLogprobs are natural-log probabilities over the whole vocabulary at the
// last prompt position: llama.cpp's float32 softmax of the raw logits, then
// log in float64, rounded to float32 (tools/llamaref/README.md has the error
// bounds). Differences of log-probabilities equal differences of logits.
//
// The repository root is found from this source file's location (so tests and
// `go run` from the checkout work from any directory), then from the working
// directory upward.
package llamaref
