package tokenizer

import (
	"fmt"
	"testing"
)

// TestSplitKimiK2Words pins the words of the kimi-k2 split on the cases where it parts
// from qwen2/llama3 (each worked from llama.cpp's unicode_regex_split_custom_kimi_k2).
func TestSplitKimiK2Words(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"abc中文def", []string{"abc", "中文", "def"}},
		{" 你好world", []string{" ", "你好", "world"}},
		{"don't DON'T it'S", []string{"don't", " DON'T", " it'S"}},
		{"x'll y'VE z're", []string{"x'll", " y'VE", " z're"}},
		{"'s 中's", []string{"'s", " ", "中", "'s"}},
		{"1234567", []string{"123", "456", "7"}},
		{"e\u0301cole", []string{"e", "\u0301cole"}},
		{"ひらがな漢字カナ", []string{"ひらがな", "漢字", "カナ"}},
		{"豈𠀀a", []string{"豈𠀀", "a"}},
		{"(abc) !!\n\nx  y", []string{"(abc", ")", " !!\n\n", "x", " ", " y"}},
	} {
		got := wordTexts(preKimiK2, c.in)
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", c.want) {
			t.Errorf("%q: have %q, want %q", c.in, got, c.want)
		}
	}
}
