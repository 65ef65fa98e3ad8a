package tokenizer

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestNewErrors(t *testing.T) {
	base := trainBPE(t, "ab ab ab", 2, "qwen2")
	cases := []struct {
		name string
		edit func(v *Vocab)
	}{
		{"empty", func(v *Vocab) { v.Tokens = nil }},
		{"model", func(v *Vocab) { v.Model = "t5" }},
		{"pre", func(v *Vocab) { v.Pre = "no-such-pre" }},
		{"merges", func(v *Vocab) { v.Merges = nil }},
		{"dup", func(v *Vocab) {
			v.Tokens = append(slices.Clone(v.Tokens), "a")
			v.Types = append(slices.Clone(v.Types), 1)
		}},
		{"types", func(v *Vocab) { v.Types = v.Types[:1] }},
		{"addeos", func(v *Vocab) { v.Tokens = v.Tokens[:5]; v.Types = v.Types[:5]; v.AddEOS = Bool(true) }},
	}
	for _, c := range cases {
		v := base
		c.edit(&v)
		if _, err := New(v); !errors.Is(err, ErrVocab) {
			t.Errorf("%s: err = %v, want ErrVocab", c.name, err)
		}
	}
}

func TestSpecialDefaults(t *testing.T) {
	lv := trainBPE(t, trainCorpus, 50, "llama-bpe", "<|begin_of_text|>", "<|eot_id|>")
	lv.BOS = ID(int32(len(lv.Tokens) - 2)) // without the key, llama.cpp's gpt2 default is id 11
	llama3 := mustNew(t, lv)
	qwen := mustNew(t, trainBPE(t, trainCorpus, 50, "qwen2", "<|endoftext|>", "<|im_start|>", "<|im_end|>"))
	if !llama3.AddBOS() || qwen.AddBOS() {
		t.Errorf("AddBOS: llama3 %v qwen2 %v, want true false", llama3.AddBOS(), qwen.AddBOS())
	}
	n := int32(qwen.VocabSize())
	for _, id := range []int32{n - 3, n - 1} { // <|endoftext|>, <|im_end|>
		if !qwen.IsEOG(id) || !qwen.IsControl(id) {
			t.Errorf("qwen2: %q not EOG/control", qwen.Token(id))
		}
	}
	if qwen.IsEOG(n - 2) {
		t.Errorf("<|im_start|> is EOG")
	}
	if got := qwen.EOT(); got != n-3 {
		t.Errorf("EOT = %d, want %d", got, n-3)
	}
	ids := qwen.Encode("hi", true, false) // add_bos off: nothing added
	if got := qwen.Decode(ids); got != "hi" {
		t.Errorf("Decode = %q", got)
	}
	ids = llama3.Encode("hi<|eot_id|>", true, true)
	if ids[0] != llama3.BOS() || ids[len(ids)-1] != int32(llama3.VocabSize()-1) {
		t.Errorf("llama3 ids %v", ids)
	}
	if got := llama3.Decode(ids); got != "hi" {
		t.Errorf("control tokens rendered: %q", got)
	}
	if got := string(llama3.Piece(int32(llama3.VocabSize() - 1))); got != "<|eot_id|>" {
		t.Errorf("Piece = %q", got)
	}
}

func TestDecodeChecked(t *testing.T) {
	tk := mustNew(t, spmTestVocab("▁a"))
	if _, err := tk.DecodeChecked([]int32{3, -1}); !errors.Is(err, ErrTokenRange) {
		t.Errorf("err = %v", err)
	}
	if _, err := tk.DecodeChecked([]int32{int32(tk.VocabSize())}); !errors.Is(err, ErrTokenRange) {
		t.Errorf("err = %v", err)
	}
	if got, err := tk.DecodeChecked([]int32{1, 3 + 'h', 3 + 'i', 2}); err != nil || got != "hi" {
		t.Errorf("DecodeChecked = %q, %v", got, err)
	}
	if tk.Piece(-5) != nil || tk.Decode([]int32{-5, 1 << 30}) != "" {
		t.Errorf("out-of-range ids rendered")
	}
}

func TestStreamDecoder(t *testing.T) {
	tk := mustNew(t, spmTestVocab())
	b := func(x byte) int32 { return 3 + int32(x) } // <0xXX> ids
	sd := tk.NewStreamDecoder()
	steps := []struct {
		id   int32
		want string
	}{
		{b('a'), "a"},
		{b(0xE6), ""}, {b(0x97), ""}, {b(0xA5), "日"},
		{b(0xF0), ""}, {b(0x9F), ""}, {b(0x98), ""}, {b(0x80), "😀"},
		{b(0xC3), ""}, {b('x'), "\uFFFDx"}, // can never complete
		{b(0x80), "\uFFFD"}, // stray continuation byte
		{2, ""},             // </s> renders as nothing
		{b(0xE2), ""},
	}
	for i, s := range steps {
		if got := sd.Add(s.id); got != s.want {
			t.Errorf("step %d: Add = %q, want %q", i, got, s.want)
		}
	}
	if got := sd.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %q", got)
	}
	if got := sd.Flush(); got != "" {
		t.Errorf("second Flush = %q", got)
	}
}

func TestDigest(t *testing.T) {
	v := trainBPE(t, trainCorpus, 50, "qwen2", "<|im_end|>")
	d := mustNew(t, v).Digest()
	if mustNew(t, v).Digest() != d {
		t.Fatal("digest not deterministic")
	}
	edits := []func(v *Vocab){
		func(v *Vocab) { v.Pre = "llama-bpe" },
		func(v *Vocab) { v.Merges = v.Merges[:len(v.Merges)-1] },
		func(v *Vocab) { v.Types = slices.Clone(v.Types); v.Types[len(v.Types)-1] = TypeUserDefined },
		func(v *Vocab) { v.ChatTemplate = TemplateChatML },
		func(v *Vocab) { v.AddEOS = Bool(true) },
		func(v *Vocab) { v.EOS = ID(3) },
	}
	for i, e := range edits {
		w := v
		e(&w)
		if mustNew(t, w).Digest() == d {
			t.Errorf("edit %d does not change the digest", i)
		}
	}
}

func TestPreTokenizerSplits(t *testing.T) {
	split := func(p preType, s string) string { return strings.Join(wordTexts(p, s), "|") }
	cases := []struct {
		p        preType
		in, want string
	}{
		{preLlama3, "I'M 12345 ok  \n\n x", "I|'M| |123|45| ok|  \n\n| x"},
		{preQwen2, "a12 日本", "a|1|2| 日本"},
		// A combining acute (U+0301) ends a qwen2 word and stays inside a qwen35 one.
		{preQwen2, "cafe\u0301 x", "cafe|\u0301| x"},
		{preQwen35, "cafe\u0301 x", "cafe\u0301| x"},
		{preQwen35, "\u0301a 12", "\u0301a| |1|2"},
		{preGPT2, "it's  a\tb 42", "it|'s| | a|\t|b| 42"},
		{preSmolLM, "x 42", "x| |4|2"},
		{preDefault, "a+b=1234567", "a|+|b|=|123|456|7"},
		{preLlama3, "😀!!\r\nx", "😀!!\r\n|x"},
	}
	for _, c := range cases {
		if got := split(c.p, c.in); got != c.want {
			t.Errorf("%v %q: got %q, want %q", c.p, c.in, got, c.want)
		}
	}
}
