package tokenizer_test

import (
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/tokenizer"
)

// realVocabs are llama.cpp's vocabulary files for the tokenizer kinds people run: SPM
// (Llama 2, 32K), byte-level BPE (Llama 3, 128K; Qwen2, 152K).
var realVocabs = []string{"llama-spm", "llama-bpe", "qwen2"}

var (
	vocabMu    sync.Mutex
	vocabCache = map[string]*tokenizer.Tokenizer{}
)

func realVocab(tb testing.TB, name string) *tokenizer.Tokenizer {
	tb.Helper()
	vocabMu.Lock()
	defer vocabMu.Unlock()
	if tk := vocabCache[name]; tk != nil {
		return tk
	}
	b, err := llamaref.SourceFile("models/ggml-vocab-" + name + ".gguf")
	if err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		tb.Fatal(err)
	}
	tk, err := tokenizer.FromGGUF(f)
	if err != nil {
		tb.Fatal(err)
	}
	vocabCache[name] = tk
	return tk
}

// streamed decodes ids one at a time, as the server does.
func streamed(tk *tokenizer.Tokenizer, ids []int32) string {
	sd := tk.NewStreamDecoder()
	var out strings.Builder
	for _, id := range ids {
		out.WriteString(sd.Add(id))
	}
	out.WriteString(sd.Flush())
	return out.String()
}

// wholeAsRunes is Decode with each invalid byte as U+FFFD (what a stream emits for it).
func wholeAsRunes(tk *tokenizer.Tokenizer, ids []int32) string {
	var out strings.Builder
	for _, r := range tk.Decode(ids) {
		out.WriteRune(r)
	}
	return out.String()
}

// TestStreamDecoderRealVocab: on real vocabularies, streaming random ids (any token, and runs
// of byte tokens that split characters) gives the whole decode, with only valid UTF-8 parts.
func TestStreamDecoderRealVocab(t *testing.T) {
	aw, err := os.ReadFile("testdata/awkward.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range realVocabs {
		t.Run(name, func(t *testing.T) {
			tk := realVocab(t, name)
			r := rand.New(rand.NewPCG(3, 4))
			seqs := [][]int32{tk.Encode(string(aw), true, true)}
			for range 200 {
				ids := make([]int32, r.IntN(40))
				for i := range ids {
					switch r.IntN(4) {
					case 0: // a byte token of SPM, or a low id (BPE's single bytes)
						ids[i] = int32(r.IntN(260))
					case 1:
						ids[i] = int32(r.IntN(tk.VocabSize()+3)) - 1 // sometimes out of range
					default:
						ids[i] = int32(r.IntN(tk.VocabSize()))
					}
				}
				seqs = append(seqs, ids)
			}
			for _, ids := range seqs {
				sd := tk.NewStreamDecoder()
				for _, id := range ids {
					if part := sd.Add(id); !utf8.ValidString(part) {
						t.Fatalf("stream emitted invalid UTF-8 %q", part)
					}
				}
				if have, want := streamed(tk, ids), wholeAsRunes(tk, ids); have != want {
					t.Fatalf("ids %v: stream %q, whole %q", ids, have, want)
				}
				var each strings.Builder
				for _, id := range ids {
					each.WriteString(tk.Decode([]int32{id}))
				}
				if have, want := each.String(), tk.Decode(ids); have != want {
					t.Fatalf("ids %v: one by one %q, together %q", ids, have, want)
				}
			}
		})
	}
}

// BenchmarkStreamDecoder: the per-token cost of streaming decode on real vocabularies, over
// the awkward corpus's tokens (Unicode, CJK, emoji, code), against the peer: decoding the
// same ids in one Decode call (per token).
func BenchmarkStreamDecoder(b *testing.B) {
	aw, err := os.ReadFile("testdata/awkward.txt")
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range realVocabs {
		tk := realVocab(b, name)
		ids := tk.Encode(string(aw), false, false)
		b.Run(name+"/stream", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sd := tk.NewStreamDecoder()
				for _, id := range ids {
					_ = sd.Add(id)
				}
				_ = sd.Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/token")
		})
		b.Run(name+"/whole-decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = tk.Decode(ids)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/token")
		})
	}
}

// FuzzStreamDecoderRealVocab: streamed decode equals whole decode on real vocabularies for
// any id sequence (three bytes an id, reduced to the vocabulary, with the top bit choosing a
// low id, where BPE's byte tokens and SPM's <0xXX> tokens live).
func FuzzStreamDecoderRealVocab(f *testing.F) {
	f.Add([]byte{0, 0, 200, 0x80, 0, 3, 0x80, 0, 0xa9})
	f.Add([]byte("\x80\x00\xe4\x80\x00\xbd\x80\x00\xa0hello"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, name := range realVocabs {
			tk := realVocab(t, name)
			ids := make([]int32, 0, len(data)/3)
			for i := 0; i+2 < len(data); i += 3 {
				v := int(data[i]&0x7f)<<16 | int(data[i+1])<<8 | int(data[i+2])
				if data[i]&0x80 != 0 {
					v %= 300
				}
				ids = append(ids, int32(v%tk.VocabSize()))
			}
			sd := tk.NewStreamDecoder()
			var got strings.Builder
			for _, id := range ids {
				part := sd.Add(id)
				if !utf8.ValidString(part) {
					t.Fatalf("%s: stream emitted invalid UTF-8 %q", name, part)
				}
				got.WriteString(part)
			}
			got.WriteString(sd.Flush())
			if want := wholeAsRunes(tk, ids); got.String() != want {
				t.Fatalf("%s ids %v: stream %q, whole %q", name, ids, got.String(), want)
			}
		}
	})
}
