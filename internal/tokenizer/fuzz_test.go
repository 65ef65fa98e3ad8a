package tokenizer

import (
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

var fuzzTokenizers = sync.OnceValues(func() (*Tokenizer, []*Tokenizer) {
	spm, err := New(spmFromCorpus(trainCorpus))
	if err != nil {
		panic(err)
	}
	var bpe []*Tokenizer
	for _, pre := range []string{"llama-bpe", "qwen2", "qwen35", "kimi-k2", "smollm", "gpt-2", "default"} {
		tk, err := New(trainBPE(nil, trainCorpus, 200, pre, "<|endoftext|>", "<|im_start|>", "<|im_end|>"))
		if err != nil {
			panic(err)
		}
		bpe = append(bpe, tk)
	}
	return spm, bpe
})

// llamaNormalize is the text llama.cpp's byte-level BPE actually encodes:
// s decoded its way (invalid bytes become U+FFFD) and re-encoded.
func llamaNormalize(s string) string {
	var b []byte
	for _, r := range decodeCodepoints(s) {
		b = appendCodepoint(b, r)
	}
	return string(b)
}

func checkIDs(t *testing.T, tk *Tokenizer, ids []int32) {
	for _, id := range ids {
		if !tk.valid(id) {
			t.Fatalf("id %d out of range", id)
		}
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range strings.Split(trainCorpus, "\n") {
		f.Add(s)
	}
	f.Add("\xff\xfe\xc3 \xed\xa0\x80 \xc0\x80 \xf4\x90\x80\x80 \xf7\xbf\xbf\xbf")
	f.Add("<|im_start|>user\nhi<|im_end|>")
	f.Fuzz(func(t *testing.T, s string) {
		spm, bpes := fuzzTokenizers()

		ids := spm.Encode(s, true, true)
		checkIDs(t, spm, ids)
		if ids[0] != spm.BOS() {
			t.Fatalf("spm: no BOS: %v", ids)
		}
		if !strings.Contains(s, "<") && utf8.ValidString(s) {
			// No special text can match: SPM keeps every character (byte
			// fallback) and maps spaces through ▁. (With invalid UTF-8 a
			// lead byte can swallow half of a ▁, which then decodes as
			// bytes, as in llama.cpp.)
			ids = spm.Encode(s, false, false)
			want := ""
			if s != "" {
				want = " " + strings.ReplaceAll(s, "\u2581", " ")
			}
			if got := spm.Decode(ids); got != want {
				t.Fatalf("spm: Decode(Encode(%q)) = %q, want %q", s, got, want)
			}
		}

		for _, tk := range bpes {
			ids := tk.Encode(s, false, false)
			checkIDs(t, tk, ids)
			if got, want := tk.Decode(ids), llamaNormalize(s); got != want {
				t.Fatalf("bpe %v: Decode(Encode(%q)) = %q, want %q", tk.pre, s, got, want)
			}
			checkIDs(t, tk, tk.Encode(s, true, true))
		}
	})
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, 10, 0, 0, 0})
	f.Add([]byte("\xc3\x00\x00\x00\xa9\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		spm, bpes := fuzzTokenizers()
		for _, tk := range []*Tokenizer{spm, bpes[0]} {
			ids := make([]int32, 0, len(data)/2)
			inRange := true
			for i := 0; i+1 < len(data); i += 2 {
				// Mostly small ids (so that pieces combine into UTF-8),
				// sometimes anything.
				id := int32(data[i]) | int32(data[i+1])<<8
				if data[i+1]&0x80 != 0 {
					id = -id
				}
				ids = append(ids, id)
				inRange = inRange && tk.valid(id)
			}
			dec := tk.Decode(ids)
			checked, err := tk.DecodeChecked(ids)
			if inRange != (err == nil) || (err == nil && checked != dec) {
				t.Fatalf("DecodeChecked = %q, %v; Decode = %q", checked, err, dec)
			}
			sd := tk.NewStreamDecoder()
			var got strings.Builder
			for _, id := range ids {
				part := sd.Add(id)
				if !utf8.ValidString(part) {
					t.Fatalf("stream emitted invalid UTF-8 %q", part)
				}
				got.WriteString(part)
			}
			got.WriteString(sd.Flush())
			var want strings.Builder
			for _, r := range dec {
				want.WriteRune(r)
			}
			if got.String() != want.String() {
				t.Fatalf("stream = %q, want %q", got.String(), want.String())
			}
		}
	})
}
