package identity

import (
	"bytes"
	"testing"

	"stockpot/internal/gguf"
)

type fileSpec struct {
	name     string
	freqBase float32
	data     []byte
	typ      gguf.Type
}

func build(t *testing.T, s fileSpec) *gguf.File {
	t.Helper()
	w := gguf.NewWriter()
	w.Set("general.architecture", "llama")
	w.Set("general.name", s.name)
	w.Set("llama.rope.freq_base", s.freqBase)
	w.Set("tokenizer.ggml.tokens", []string{"a", "b"})
	if err := w.AddTensor("token_embd.weight", s.typ, []uint64{uint64(len(s.data) / s.typ.RowBytes(1)), 1}, s.data); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFingerprint(t *testing.T) {
	base := fileSpec{name: "m", freqBase: 10000, data: make([]byte, 64), typ: gguf.TypeF32}
	fp := func(s fileSpec) Fingerprint {
		f, err := Compute(build(t, s))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	want := fp(base)
	if got := fp(base); got != want {
		t.Fatalf("same file: have %s, want %s (not deterministic)", got, want)
	}
	renamed := base
	renamed.name = "another name"
	if got := fp(renamed); got != want {
		t.Errorf("renamed model: fingerprint changed to %s; descriptive keys must not enter", got)
	}
	changes := map[string]fileSpec{}
	s := base
	s.freqBase = 500000
	changes["rope base"] = s
	s = base
	s.data = append([]byte(nil), base.data...)
	s.data[63] ^= 1
	changes["one weight bit"] = s
	s = base
	s.typ = gguf.TypeF16
	s.data = make([]byte, 32)
	changes["tensor type"] = s
	for name, c := range changes {
		if got := fp(c); got == want {
			t.Errorf("%s changed: fingerprint stayed %s", name, got)
		}
	}
}

func TestDescriptorDigest(t *testing.T) {
	d := Descriptor{KVType: "f32", BlockSize: 16}
	want := d.Digest()
	for name, e := range map[string]Descriptor{
		"kv type":    {KVType: "f16", BlockSize: 16},
		"block size": {KVType: "f32", BlockSize: 32},
		"lora":       {KVType: "f32", BlockSize: 16, LoRA: "x"},
		"model":      {Model: Fingerprint{1}, KVType: "f32", BlockSize: 16},
		"tokenizer":  {Tokenizer: [32]byte{1}, KVType: "f32", BlockSize: 16},
		"state":      {KVType: "f32", BlockSize: 16, StateFormat: "gdn1/f32/layers6"},
	} {
		if e.Digest() == want {
			t.Errorf("%s differs but digest is equal", name)
		}
	}
	// Two state layouts never share an identity; no state keeps the identity it had before
	// the field existed (so the caches of models without state survive the upgrade).
	a := Descriptor{KVType: "f32", BlockSize: 16, StateFormat: "gdn1/f32/layers6/conv3x128/heads4/state16"}
	b := a
	b.StateFormat = "gdn1/f32/layers6/conv3x128/heads4/state32"
	if a.Digest() == b.Digest() {
		t.Error("two state formats, one digest")
	}
	if got := string(d.Bytes()); got != "stockpot-identity-v1\x00"+string(make([]byte, 64))+"f32\x00\x10\x00\x00\x00\x00" {
		t.Errorf("descriptor without state: %q", got)
	}
}

func BenchmarkCompute(b *testing.B) {
	data := make([]byte, 64<<20)
	w := gguf.NewWriter()
	w.Set("general.architecture", "llama")
	if err := w.AddTensor("t", gguf.TypeF32, []uint64{uint64(len(data) / 4)}, data); err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		b.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compute(f); err != nil {
			b.Fatal(err)
		}
	}
}
