package gguf

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteSeedCorpus regenerates testdata/fuzz/FuzzParse when
// GGUF_WRITE_CORPUS=1: small valid files from the Writer and truncations.
func TestWriteSeedCorpus(t *testing.T) {
	if os.Getenv("GGUF_WRITE_CORPUS") != "1" {
		t.Skip("set GGUF_WRITE_CORPUS=1 to regenerate the seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	full := encode(t, sampleWriter(t))
	small := NewWriter()
	small.Set("general.architecture", "llama")
	small.Set("tokenizer.ggml.tokens", []string{"a", "b"})
	if err := small.AddTensor("w", TypeQ8_0, []uint64{32, 1}, make([]byte, 34)); err != nil {
		t.Fatal(err)
	}
	aligned := sampleWriter(t)
	aligned.Set(AlignmentKey, uint32(64))
	seeds := [][]byte{full, encode(t, small), encode(t, aligned), encode(t, NewWriter())}
	for _, n := range []int{3, 23, 40, 120, 300, len(full) - 1} {
		seeds = append(seeds, full[:n])
	}
	for _, s := range seeds {
		name := fmt.Sprintf("%x", sha256.Sum256(s))[:16]
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
