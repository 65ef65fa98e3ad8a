package tokenizer_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/tokenizer"
)

// TestQwen35Vocab runs llama.cpp's own test vectors for the real Qwen3.5 vocabulary
// (models/ggml-vocab-qwen35.gguf with its .inp and .out, as tests/test-tokenizer-0 reads
// them: texts split on "\n__ggml_vocab_test__\n", no BOS, no special-token parsing).
func TestQwen35Vocab(t *testing.T) {
	data, err := llamaref.SourceFile("models/ggml-vocab-qwen35.gguf")
	if err != nil {
		t.Fatal(err)
	}
	inp, err := llamaref.SourceFile("models/ggml-vocab-qwen35.gguf.inp")
	if err != nil {
		t.Fatal(err)
	}
	out, err := llamaref.SourceFile("models/ggml-vocab-qwen35.gguf.out")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "qwen35.gguf")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if pre, _ := f.String("tokenizer.ggml.pre"); pre != "qwen35" {
		t.Fatalf("tokenizer.ggml.pre = %q, want qwen35", pre)
	}
	tok, err := tokenizer.FromGGUF(f)
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
		if len(got) == 0 && len(want) == 0 {
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q:\nhave %v\nwant %v", text, got, want)
		}
	}
}

func splitVocabTests(raw string) []string {
	const sep = "\n__ggml_vocab_test__\n"
	var out []string
	for pos := 0; pos < len(raw); {
		next := strings.Index(raw[pos:], sep)
		if next < 0 {
			out = append(out, raw[pos:])
			break
		}
		out = append(out, raw[pos:pos+next])
		pos += next + len(sep)
	}
	return out
}
