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

// kimiK2Texts exercise what the kimi-k2 split does differently from qwen2/llama3: Han
// runs split off letters on both sides (and the compatibility and extension blocks
// llama.cpp counts as Han, but not kana or hangul), contractions attached to the word
// before them (any case) and none standing alone after a non-letter, combining marks
// ending a letter run, leading punctuation before a letter, and digits three at a time.
var kimiK2Texts = []string{
	"中文abc中文", "abc中文def", " 你好world", "Hello世界's", "世界's 'S", "x'LL y'Ve Z'RE",
	"'s alone", "123'd", "don't DON'T Don'T", "ひらがなカタカナ漢字", "한국어 텍스트", "豈更车 𠀀𠀁 𪜀",
	"e\u0301cole cafe\u0301s", "\u0301a", "1234567 12 3", "(中)[abc]{x}", "a\r\nb\n\n c",
	"   spaces\t\ttabs  ", "#中#a#1", "Ｆｕｌｌwidth ＡＢＣ", "Ǆǅǆ ǈ", "ⅫⅩ", "𝒜𝒷𝒸", "🍲中a",
}

// TestKimiK2MatchesLlamaCpp checks the kimi-k2 pre-tokenizer against llama.cpp's: a
// synthetic byte-level BPE vocabulary (tiny-llama3's, trained with three-digit numbers) relabelled tokenizer.ggml.pre =
// "kimi-k2", so both sides split with Kimi's rules and merge with the same ranks. The
// bundle has no ggml-vocab file for kimi-k2, so there is no real-vocabulary test vector.
func TestKimiK2MatchesLlamaCpp(t *testing.T) {
	aw, err := os.ReadFile("testdata/awkward.txt")
	if err != nil {
		t.Fatal(err)
	}
	texts := append(strings.Split(string(aw), "\n"), string(aw), "", " ", "  leading", "trailing  ", "<|im_start|>user\n中文hi<|im_end|>")
	texts = append(texts, kimiK2Texts...)
	p, err := synth.Lookup("tiny-llama3")
	if err != nil {
		t.Fatal(err)
	}
	w, err := synth.BuildPreset(p, synth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.Set("tokenizer.ggml.pre", "kimi-k2")
	path := filepath.Join(t.TempDir(), "kimi-k2.gguf")
	if err := w.WriteFile(path); err != nil {
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
				if bad <= 5 {
					t.Errorf("parse_special=%v %q:\nhave %v\nwant %v", parse, text, got, want[i])
				}
			}
		}
		if bad > 0 {
			t.Errorf("parse_special=%v: %d of %d texts differ", parse, bad, len(texts))
		}
	}
}
