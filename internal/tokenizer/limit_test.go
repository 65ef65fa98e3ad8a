package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// checkLimit checks MaxTokenBytes' bound and EncodeLimit against Encode (the oracle) for s,
// at limits around the true length.
func checkLimit(t *testing.T, name string, tk *Tokenizer, s string) {
	t.Helper()
	want := tk.Encode(s, true, true)
	if per, ok := tk.MaxTokenBytes(); ok {
		if text := len(tk.Encode(s, false, true)); text*per < len(s) {
			t.Fatalf("%s: %d tokens of at most %d bytes each cannot cover %d bytes of %q", name, text, per, len(s), s)
		}
	}
	for _, limit := range []int{0, 1, len(want) - 1, len(want), len(want) + 1, 1 << 30} {
		got, ok := tk.EncodeLimit(s, true, true, limit)
		if fits := len(want) <= limit; ok != fits || ok && !slices.Equal(got, want) {
			t.Fatalf("%s: EncodeLimit(%q, limit %d) = %v, %v; Encode gives %d tokens %v", name, s, limit, got, ok, len(want), want)
		}
	}
}

func TestEncodeLimit(t *testing.T) {
	spm, bpes := fuzzTokenizers()
	texts := append(strings.Split(trainCorpus, "\n"), "", " ", "  two  spaces ", "\xff\xfe\xc3 \xed\xa0\x80",
		"<|im_start|>user\nhi<|im_end|>", strings.Repeat("stock pot ", 300))
	for _, s := range texts {
		checkLimit(t, "spm", spm, s)
		for _, tk := range bpes {
			checkLimit(t, "bpe", tk, s)
		}
	}
	// checkLimit checked the bound wherever it holds; SPM with byte fallback always has one.
	if _, ok := spm.MaxTokenBytes(); !ok {
		t.Error("spm with byte fallback: no byte bound")
	}
	// A huge text is refused by the byte bound alone.
	huge := strings.Repeat("x", 64<<20)
	if _, ok := spm.EncodeLimit(huge, true, true, 4096); ok {
		t.Error("64 MiB of text fit in 4096 tokens")
	}
}

func FuzzEncodeLimit(f *testing.F) {
	for _, s := range strings.Split(trainCorpus, "\n") {
		f.Add(s)
	}
	f.Add("\xff\xfe\xc3 \xed\xa0\x80 \xc0\x80 \xf4\x90\x80\x80 \xf7\xbf\xbf\xbf")
	f.Add("<|im_start|>user\nhi<|im_end|>")
	f.Fuzz(func(t *testing.T, s string) {
		spm, bpes := fuzzTokenizers()
		checkLimit(t, "spm", spm, s)
		for _, tk := range bpes {
			checkLimit(t, "bpe", tk, s)
		}
	})
}
