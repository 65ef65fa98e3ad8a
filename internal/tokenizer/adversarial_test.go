package tokenizer_test

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"

	"stockpot/internal/tokenizer"
)

// preVocabs names a tokenizer for each pre-tokenizer: a bundled llama.cpp vocabulary, with
// its tokenizer.ggml.pre replaced where the pre-tokenizer has no bundled vocabulary of its
// own (kimi-k2 and the default chain run on llama-bpe's and gpt-2's merges).
var preVocabs = []struct{ pre, vocab, relabel string }{
	{"spm", "llama-spm", ""},
	{"gpt2", "gpt-2", ""},
	{"llama3", "llama-bpe", ""},
	{"qwen2", "qwen2", ""},
	{"qwen35", "qwen35", ""},
	{"smollm", "starcoder", ""},
	{"kimi-k2", "llama-bpe", "kimi-k2"},
	{"default", "gpt-2", "default"},
}

func preVocab(tb testing.TB, vocab, relabel string) *tokenizer.Tokenizer {
	if relabel == "" {
		return realVocab(tb, vocab)
	}
	vocabMu.Lock()
	defer vocabMu.Unlock()
	key := vocab + "/" + relabel
	if tk := vocabCache[key]; tk != nil {
		return tk
	}
	tk := vectorVocab(tb, vocab, relabel)
	vocabCache[key] = tk
	return tk
}

// adversarialShapes are the inputs that make a careless pre-tokenizer or merge loop
// superlinear: one huge word of a single class, classes alternating at every character,
// and bytes that are not UTF-8. Each returns about n bytes.
var adversarialShapes = []struct {
	name string
	make func(n int) string
}{
	{"spaces", func(n int) string { return strings.Repeat(" ", n) }},
	{"letter", func(n int) string { return strings.Repeat("a", n) }},
	{"digits", func(n int) string { return strings.Repeat("7", n) }},
	{"newlines", func(n int) string { return strings.Repeat("\n", n) }},
	{"punct", func(n int) string { return strings.Repeat("!", n) }},
	{"rune", func(n int) string { return strings.Repeat("中", n/3) }},
	{"alternating", func(n int) string { return strings.Repeat("a 1!\n\t中'", n/12) }},
	{"invalid", func(n int) string { return strings.Repeat("\xff\xc3", n/2) }},
	{"spaces-word", func(n int) string { return strings.Repeat(" ", n-1) + "x" }},
}

// BenchmarkEncodeAdversarial tokenizes each adversarial shape at 1 MiB and 4 MiB with each
// pre-tokenizer: the 4 MiB time over the 1 MiB time shows whether the work is linear (4x)
// or not.
func BenchmarkEncodeAdversarial(b *testing.B) {
	for _, pv := range preVocabs {
		for _, sh := range adversarialShapes {
			for _, mib := range []int{1, 4} {
				b.Run(fmt.Sprintf("pre=%s/shape=%s/MiB=%d", pv.pre, sh.name, mib), func(b *testing.B) {
					tk := preVocab(b, pv.vocab, pv.relabel)
					text := sh.make(mib << 20)
					b.SetBytes(int64(len(text)))
					b.ReportAllocs()
					for b.Loop() {
						tk.Encode(text, false, false)
					}
				})
			}
		}
	}
}

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc: every allocation
// counts, whether or not it is still live; nothing else runs in this test binary meanwhile).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestEncodeLinear checks, for every pre-tokenizer and every adversarial shape, that
// tokenizing 4n bytes allocates about 4 times what n bytes do and at most a fixed number
// of bytes per input byte and per character merged (invalid UTF-8 triples the characters:
// each bad byte is a 3-byte U+FFFD), and that the merges' heap updates are bounded by a
// constant per character: counted, never timed. The old splitters and merge loop allocated
// 600 bytes per byte of one run of spaces (2.5 GB for 4 MiB on llama-bpe); now about 30.
func TestEncodeLinear(t *testing.T) {
	const n = 32 << 10
	const perChar, perByte = 36, 24 // bytes allocated per character merged and per input byte, at most
	for _, pv := range preVocabs {
		tk := preVocab(t, pv.vocab, pv.relabel)
		tk.MaxTokenBytes() // computed once, outside the measurements
		for _, sh := range adversarialShapes {
			var alloc [2]uint64
			for i, size := range []int{n, 4 * n} {
				text := sh.make(size)
				var ids []int32
				var work tokenizer.MergeWork
				var ok bool
				alloc[i] = allocated(func() { ids, ok, work = tk.EncodeCounted(text, math.MaxInt) })
				if !ok || !slices.Equal(ids, tk.Encode(text, false, false)) {
					t.Fatalf("%s %s: EncodeCounted differs from Encode", pv.pre, sh.name)
				}
				if work.Chars > 6*len(text) || work.HeapOps > 4*work.Chars {
					t.Errorf("%s %s %d bytes: %d characters merged, %d heap updates; want at most 6 per byte and 4 per character",
						pv.pre, sh.name, len(text), work.Chars, work.HeapOps)
				}
				if alloc[i] > uint64(tokenizer.EncodeBytesPerByte*len(text)+(256<<10)) {
					t.Errorf("%s %s: %d bytes allocated for %d bytes of text, over EncodeBytesPerByte (%d)",
						pv.pre, sh.name, alloc[i], len(text), tokenizer.EncodeBytesPerByte)
				}
				if alloc[i] > uint64(perChar*work.Chars+perByte*len(text)+(256<<10)) {
					t.Errorf("%s %s: %d bytes allocated for %d bytes of text, %d characters merged (%.1f per byte), want at most %d per character and %d per byte",
						pv.pre, sh.name, alloc[i], len(text), work.Chars, float64(alloc[i])/float64(len(text)), perChar, perByte)
				}
			}
			if alloc[1] > 6*alloc[0]+(256<<10) {
				t.Errorf("%s %s: %d bytes allocated for %d bytes of text, %d for 4 times as much: not linear",
					pv.pre, sh.name, alloc[0], n, alloc[1])
			}
		}
	}
}

// TestEncodeLimitStopsEarly: EncodeLimit's work is in proportion to its limit, not to the
// text. 4 MiB of spaces under a limit of 1000 is refused by the byte bound before any
// tokenizing; 4 MiB of short words under the largest limit that bound lets through is
// refused after about limit words, without the pre-tokenizer reading the rest. SPM has no
// pre-tokenizer: its merge is global over a fragment (a later, higher-scoring merge can
// change an earlier symbol), so it stops between special-token fragments only, and its
// work within one is linear (TestEncodeLinear), not in proportion to the limit.
func TestEncodeLimitStopsEarly(t *testing.T) {
	for _, pv := range preVocabs {
		tk := preVocab(t, pv.vocab, pv.relabel)
		per, bound := tk.MaxTokenBytes()
		spaces := strings.Repeat(" ", 4<<20)
		var ok bool
		if !bound {
			// (starcoder's merges make tokens its vocabulary lacks: no byte bound, so the
			// spaces are merged before they are counted; linearly, TestEncodeLinear.)
			t.Logf("%s (%s): no byte bound", pv.pre, pv.vocab)
		} else if a := allocated(func() { _, ok = tk.EncodeLimit(spaces, true, true, 1000) }); ok || a > 4<<10 {
			t.Errorf("%s: EncodeLimit(4 MiB of spaces, 1000) = %v after allocating %d bytes", pv.pre, ok, a)
		}
		if tk.Kind() == tokenizer.KindSPM {
			continue
		}
		words := strings.Repeat("a ", 2<<20)
		limit := 1000
		if bound {
			limit = (len(words) + per - 1) / per // the byte bound alone cannot refuse it
		}
		var work tokenizer.MergeWork
		a := allocated(func() { _, ok, work = tk.EncodeCounted(words, limit) })
		if ok {
			t.Fatalf("%s: 4 MiB of words fit %d tokens", pv.pre, limit)
		}
		// Each word is a token or two; the output slice (4 bytes a token, grown by append)
		// and the merge buffers are all that is allocated.
		if work.Chars > 8*limit || a > uint64(64*limit+(64<<10)) {
			t.Errorf("%s: refusing 4 MiB of words at limit %d merged %d characters and allocated %d bytes; want about the limit's worth",
				pv.pre, limit, work.Chars, a)
		}
	}
}
