package tokenizer

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"
)

// spmTestVocab is a small SentencePiece vocabulary: <unk> <s> </s>, the 256
// byte tokens, then pieces with descending scores.
func spmTestVocab(pieces ...string) Vocab {
	v := Vocab{Model: "llama"}
	add := func(s string, score float32, ty int32) {
		v.Tokens = append(v.Tokens, s)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, ty)
	}
	add("<unk>", 0, TypeUnknown)
	add("<s>", 0, TypeControl)
	add("</s>", 0, TypeControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, TypeByte)
	}
	for i, p := range pieces {
		add(p, -float32(i), TypeNormal)
	}
	return v
}

// trainBPE learns merges from corpus with the llama3 pre-tokenizer and
// returns a gpt2 vocabulary: the 256 byte symbols, then each merge result,
// then the given special tokens (control type).
func trainBPE(t testing.TB, corpus string, nMerges int, pre string, specials ...string) Vocab {
	pt, _, _, _, ok := preTypeFor(pre)
	if !ok {
		panic("unknown pre " + pre)
	}
	counts := map[string]int{}
	pt.words(corpus, func(lo, hi int) bool {
		counts[string(appendWordBytes(nil, corpus[lo:hi]))]++
		return true
	})
	type word struct {
		syms []string
		n    int
	}
	var words []word
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var syms []string
		for _, r := range k {
			syms = append(syms, string(r))
		}
		words = append(words, word{syms, counts[k]})
	}
	v := Vocab{Model: "gpt2", Pre: pre, Merges: []string{}}
	for b := 0; b < 256; b++ {
		v.Tokens = append(v.Tokens, string(byteToRune[b]))
	}
	seen := map[string]bool{}
	for _, s := range v.Tokens {
		seen[s] = true
	}
	for len(v.Merges) < nMerges {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 1; i < len(w.syms); i++ {
				pairs[[2]string{w.syms[i-1], w.syms[i]}] += w.n
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if n > bestN || (n == bestN && (p[0] < best[0] || (p[0] == best[0] && p[1] < best[1]))) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			break
		}
		v.Merges = append(v.Merges, best[0]+" "+best[1])
		m := best[0] + best[1]
		if !seen[m] {
			seen[m] = true
			v.Tokens = append(v.Tokens, m)
		}
		for wi := range words {
			w := &words[wi]
			var out []string
			for i := 0; i < len(w.syms); i++ {
				if i+1 < len(w.syms) && w.syms[i] == best[0] && w.syms[i+1] == best[1] {
					out = append(out, m)
					i++
					continue
				}
				out = append(out, w.syms[i])
			}
			w.syms = out
		}
	}
	v.Types = slices.Repeat([]int32{TypeNormal}, len(v.Tokens))
	for _, s := range specials {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, TypeControl)
	}
	return v
}

const trainCorpus = `The quick brown fox jumps over the lazy dog. It's 2024, and they'll say we've done 12345 things!
func main() { fmt.Println("hello, world") }	// tabs	and  spaces
Ünïcödé straße café naïve 日本語のテキスト 中文文本 한국어 😀🎉 emoji  
    indented code
if x == 10 { return x * 3.14159 }
`

func mustNew(t testing.TB, v Vocab) *Tokenizer {
	t.Helper()
	tk, err := New(v)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

func TestSPMEncode(t *testing.T) {
	v := spmTestVocab("▁hello", "▁world", "▁he", "llo", "▁w", "orld", "he", "ll", "lo", "▁", "h", "e", "l", "o", "w", "r", "d", "or", "ld")
	tk := mustNew(t, v)
	id := func(s string) int32 { i, _ := tk.TokenID(s); return i }
	cases := []struct {
		text       string
		add, parse bool
		want       []int32
	}{
		{"hello world", true, false, []int32{1, id("▁hello"), id("▁world")}},
		{"hello world", false, false, []int32{id("▁hello"), id("▁world")}},
		{"", true, false, []int32{1}},
		{"é", false, false, []int32{id("▁"), id("<0xC3>"), id("<0xA9>")}},
		{"hello</s>world", false, true, []int32{id("▁hello"), 2, id("▁world")}},
		{"hello</s>", false, false, []int32{id("▁hello"), id("<0x3C>"), id("<0x2F>"), id("<0x73>"), id("<0x3E>")}},
	}
	for _, c := range cases {
		got := tk.Encode(c.text, c.add, c.parse)
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %v, %v) = %v, want %v", c.text, c.add, c.parse, got, c.want)
		}
	}
	if got := tk.Decode(tk.Encode("hello world é", true, false)); got != " hello world é" {
		t.Errorf("Decode round trip = %q", got)
	}
}

func TestBPEEncodeRoundTrip(t *testing.T) {
	for _, pre := range []string{"llama-bpe", "qwen2", "qwen35", "smollm", "gpt-2", "default"} {
		v := trainBPE(t, trainCorpus, 300, pre, "<|endoftext|>", "<|im_start|>", "<|im_end|>")
		tk := mustNew(t, v)
		for _, s := range strings.Split(trainCorpus, "\n") {
			ids := tk.Encode(s, false, false)
			if got := tk.Decode(ids); got != s {
				t.Errorf("%s: Decode(Encode(%q)) = %q", pre, s, got)
			}
		}
		ids := tk.Encode("<|im_start|>user\nhi<|im_end|>", false, true)
		if ids[0] != int32(len(v.Tokens)-2) || !tk.IsEOG(ids[len(ids)-1]) {
			t.Errorf("%s: special tokens not parsed: %v", pre, ids)
		}
		if !utf8.ValidString(tk.Decode(ids)) {
			t.Errorf("%s: invalid utf8", pre)
		}
	}
}

// spmFromCorpus builds a SentencePiece-like vocabulary from corpus: every
// substring (up to 6 characters) of the ▁-joined words that occurs at least
// twice, scored by log frequency and length.
func spmFromCorpus(corpus string) Vocab {
	text := "▁" + strings.ReplaceAll(corpus, " ", "▁")
	runes := []rune(text)
	counts := map[string]int{}
	for i := range runes {
		for n := 2; n <= 6 && i+n <= len(runes); n++ {
			counts[string(runes[i:i+n])]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k, n := range counts {
		if n >= 2 && !strings.ContainsAny(k, "\n\r") {
			keys = append(keys, k)
		}
	}
	for _, r := range runes {
		if !slices.Contains(keys, string(r)) {
			keys = append(keys, string(r))
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		si := counts[keys[i]] * utf8.RuneCountInString(keys[i])
		sj := counts[keys[j]] * utf8.RuneCountInString(keys[j])
		if si != sj {
			return si > sj
		}
		return keys[i] < keys[j]
	})
	var pieces []string
	for _, k := range keys {
		if strings.HasPrefix(k, "<0x") {
			continue
		}
		pieces = append(pieces, k)
		if len(pieces) == 1500 {
			break
		}
	}
	v := spmTestVocab(pieces...)
	v.Tokens = append(v.Tokens, "<|im_start|>", "<|im_end|>", "<|user|>")
	v.Scores = append(v.Scores, 0, 0, 0)
	v.Types = append(v.Types, TypeControl, TypeControl, TypeUserDefined)
	return v
}
