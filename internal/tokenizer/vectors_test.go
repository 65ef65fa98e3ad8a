package tokenizer_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/tokenizer"
)

// vectorVocabs are the llama.cpp bundle's vocabularies that ship test vectors (.inp, .out)
// and whose tokenizer Stockpot supports, one or more per pre-tokenizer: SPM (llama-spm,
// phi-3), gpt-2 (gpt-2, mpt), llama3 (llama-bpe), qwen2, qwen35, and the smollm chain
// (starcoder, refact, command-r).
var vectorVocabs = []string{"llama-spm", "phi-3", "gpt-2", "mpt", "llama-bpe", "qwen2", "qwen35", "starcoder", "refact", "command-r"}

// TestVocabVectors runs llama.cpp's own test vectors (tests/test-tokenizer-0: texts split on
// "\n__ggml_vocab_test__\n", no BOS, no special-token parsing) for every vocabulary of
// vectorVocabs, through Encode and through EncodeLimit at the exact length.
func TestVocabVectors(t *testing.T) {
	for _, name := range vectorVocabs {
		t.Run(name, func(t *testing.T) {
			tok := realVocab(t, name)
			inp, err := llamaref.SourceFile("models/ggml-vocab-" + name + ".gguf.inp")
			if err != nil {
				t.Fatal(err)
			}
			out, err := llamaref.SourceFile("models/ggml-vocab-" + name + ".gguf.out")
			if err != nil {
				t.Fatal(err)
			}
			texts := splitVocabTests(string(inp))
			lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(texts) != len(lines) || len(texts) < 10 {
				t.Fatalf("%d inputs, %d outputs", len(texts), len(lines))
			}
			for i, text := range texts {
				var want []int32
				for _, w := range strings.Fields(lines[i]) {
					id, err := strconv.Atoi(w)
					if err != nil {
						t.Fatalf("line %d: %v", i, err)
					}
					want = append(want, int32(id))
				}
				got := tok.Encode(text, false, false)
				if !slices.Equal(got, want) && len(got)+len(want) > 0 {
					t.Errorf("%q:\nhave %v\nwant %v", text, got, want)
					continue
				}
				if lim, ok := tok.EncodeLimit(text, false, false, len(want)); !ok || !slices.Equal(lim, got) && len(got) > 0 {
					t.Errorf("%q: EncodeLimit(limit %d) = %v, %v; Encode %v", text, len(want), lim, ok, got)
				}
				if len(want) > 0 {
					if _, ok := tok.EncodeLimit(text, false, false, len(want)-1); ok {
						t.Errorf("%q: EncodeLimit(limit %d) fit %d tokens", text, len(want)-1, len(want))
					}
				}
			}
		})
	}
}

// vectorVocab loads a bundled vocabulary with its pre-tokenizer replaced by pre (kimi-k2
// and the default chain have no bundled vocabulary of their own).
func vectorVocab(tb testing.TB, name, pre string) *tokenizer.Tokenizer {
	tb.Helper()
	b, err := llamaref.SourceFile("models/ggml-vocab-" + name + ".gguf")
	if err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := tokenizer.VocabFromGGUF(f)
	if err != nil {
		tb.Fatal(err)
	}
	v.Pre = pre
	tk, err := tokenizer.New(v)
	if err != nil {
		tb.Fatal(err)
	}
	return tk
}
