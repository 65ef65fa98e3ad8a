package tokenizer_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/synth"
	"stockpot/internal/tokenizer"
)

// TestMatchesLlamaCpp compares token ids with llama.cpp's tokenizer on the awkward corpus
// (Unicode, runs of spaces, tabs and newlines, digits, code, emoji, CJK, special-token text)
// for every tokenizer kind and pre-tokenizer the presets cover, with and without special-token
// parsing.
func TestMatchesLlamaCpp(t *testing.T) {
	aw, err := os.ReadFile("testdata/awkward.txt")
	if err != nil {
		t.Fatal(err)
	}
	texts := append(strings.Split(string(aw), "\n"), string(aw), "", " ", "  leading", "trailing  ", "<s>x</s>", "<|im_start|>user\nhi<|im_end|>")
	dir := t.TempDir()
	for _, preset := range []string{"tiny-llama-spm", "tiny-llama3", "tiny-qwen2", "tiny-qwen3", "tiny-qwen35", "tiny-smollm", "default"} {
		t.Run(preset, func(t *testing.T) {
			path := filepath.Join(dir, preset+".gguf")
			if err := synth.WriteFile(preset, synth.Options{}, path); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, parse := range []bool{false, true} {
				want, err := llamaref.Tokenize(path, texts, false, parse)
				if err != nil {
					t.Fatal(err)
				}
				bad := 0
				for i, text := range texts {
					got := tok.Encode(text, false, parse)
					if len(got) == 0 && len(want[i]) == 0 {
						continue
					}
					if !slices.Equal(got, want[i]) {
						bad++
						if bad <= 3 {
							t.Errorf("parse_special=%v %q:\nhave %v\nwant %v", parse, text, got, want[i])
						}
					}
				}
				if bad > 0 {
					t.Errorf("parse_special=%v: %d of %d texts differ", parse, bad, len(texts))
				}
			}
		})
	}
}
