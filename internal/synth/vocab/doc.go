// Package vocab trains the tokenizer vocabularies of Stockpot's synthetic
// models, deterministically and without any network or model hub.
//
// It owns two trainers over one shipped corpus (Corpus):
//   - TrainBPE: a byte-level BPE in the GPT-2 style. Text is split into
//     pre-tokens by an approximation of the llama.cpp pre-tokenizer the
//     vocabulary is meant for (PreLlama3, PreQwen2, PreSmolLM), every byte is
//     a base token spelled with the GPT-2 byte-to-unicode mapping, and pairs
//     are merged by corpus frequency.
//   - TrainSPM: a SentencePiece-style BPE vocabulary: pieces start with "▁"
//     for a space, <unk> <s> </s> are ids 0 1 2, the 256 byte-fallback
//     tokens <0x00>..<0xFF> follow with type Byte, and merged pieces carry
//     score -rank so that llama.cpp's SPM tokenizer (which repeatedly merges
//     the adjacent pair whose concatenation has the highest score) replays
//     the training merges in order.
//
// Invariants:
//   - Training is a pure function of its Config and the corpus: the same
//     Config gives the same Vocab, byte for byte, on every machine. Ties in
//     pair frequency are broken by the smaller (left id, right id), and
//     every id is assigned in a fixed order; no map iteration order leaks.
//   - Token texts are unique. A merge whose result already exists (as a
//     special, a byte token or an earlier merge) adds no token.
//   - BPE training is greedy, so the merges for a smaller vocabulary are a
//     prefix of those for a larger one with the same pre-tokenizer.
//
// The corpus is embedded (corpus/): prose and code extracted from the Go
// distribution's sources (BSD licence, corpus/LICENSE-go, extracted by
// gencorpus.go) plus text generated here from fixed word lists and a fixed
// seed (generated.go): sentences, dialogue, numbers, dates, CJK and emoji.
package vocab
