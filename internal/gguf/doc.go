// Package gguf reads and writes GGUF files (versions 2 and 3), the container
// llama.cpp uses for model weights and metadata.
//
// It owns the byte format and nothing above it: metadata key/value pairs,
// tensor descriptors (name, shape, ggml type, offset) and the views of tensor
// bytes. It knows block sizes and byte sizes of the tensor types Stockpot
// computes with, but not their numerics (package quant owns those).
//
// Key types:
//   - File: a parsed GGUF file. Open maps the file read-only and Parse reads
//     a byte slice; both use the same parser. TensorData returns views into
//     the mapping, valid until Close, that must never be written.
//   - Value: one metadata value (scalar, string or array, arrays may nest).
//   - Type: a ggml tensor type with BlockSize/BlockBytes/RowBytes.
//   - Writer: builds a version 3 file deterministically: keys and tensors in
//     insertion order, every tensor padded to the alignment.
//
// Invariants of the parser (it is fuzzed, see FuzzParse):
//   - It never panics and never allocates from an unchecked count: every
//     string length and array count is checked against the bytes left before
//     anything is allocated, and arrays nest at most maxDepth deep.
//   - Every tensor it returns has 1..4 dims, a known Type, a row length that
//     is a multiple of the block size, a byte size that does not overflow,
//     an aligned offset, and data that lies inside the file.
//   - Errors wrap ErrFormat and say what and where, with the numbers.
package gguf
