package server

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/pipeline"
	"stockpot/internal/synth"
	"stockpot/internal/tokenizer"
)

// kimiTokenizer is a real byte-level BPE tokenizer with the kimi-k2 pre-tokenizer (the
// tiny-llama3 preset's vocabulary relabelled, as internal/tokenizer's kimi-k2 test does).
func kimiTokenizer(t *testing.T) pipeline.Tokenizer {
	t.Helper()
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
	return pipeline.FromTokenizer(tok)
}

// TestTokenizeBounded is the probe's /tokenize of 4 MiB of spaces (kimi-k3: 0.66 GB and
// 7.7 s before any length check) on a server with only an admin key, where /tokenize,
// like the rest of the API, needs no key: the text is refused from its byte length before
// it is tokenized, so the request allocates little beyond its body; a text that fits is
// tokenized and counted. Under a context length too large for the byte bound to refuse
// anything, 1 MiB of spaces (one word) is tokenized within tokenizer.EncodeBytesPerByte
// (the old merge loop took 600 bytes a byte).
func TestTokenizeBounded(t *testing.T) {
	tok := kimiTokenizer(t)
	s, _ := newTestServerTok(t, &fakeGen{}, tok, func(c *Config) {
		c.AdminKeys = []string{"adm"}
		c.ContextLength, c.MaxPromptTokens = 4096, 4095
		c.MaxBodyBytes = 8 << 20
	})
	body := `{"prompt": "` + strings.Repeat(" ", 4<<20) + `"}`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := do(s.Handler(), http.MethodPost, "/tokenize", body)
	runtime.ReadMemStats(&after)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "more than 4096 tokens") {
		t.Fatalf("4 MiB of spaces: %d %s", rec.Code, rec.Body.String())
	}
	// The body is read and parsed (a few copies of 4 MiB); tokenizing it would cost 30 bytes
	// a byte more (120 MiB) without the bound.
	if a := after.TotalAlloc - before.TotalAlloc; a > 48<<20 {
		t.Errorf("refusing 4 MiB of spaces allocated %d MiB", a>>20)
	}
	rec = do(s.Handler(), http.MethodPost, "/tokenize", `{"prompt": "`+strings.Repeat(" ", 2000)+`x"}`)
	var got struct {
		Count int `json:"count"`
	}
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.Count == 0 {
		t.Fatalf("2001 bytes: %d %s", rec.Code, rec.Body.String())
	}

	big, _ := newTestServerTok(t, &fakeGen{}, tok, func(c *Config) {
		c.ContextLength, c.MaxPromptTokens = 1<<22, 1<<22-1
		c.MaxBodyBytes = 8 << 20
	})
	const n = 1 << 20
	runtime.ReadMemStats(&before)
	rec = do(big.Handler(), http.MethodPost, "/tokenize", `{"prompt": "`+strings.Repeat(" ", n)+`"}`)
	runtime.ReadMemStats(&after)
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &got) != nil || got.Count == 0 {
		t.Fatalf("1 MiB of spaces: %d %.200s", rec.Code, rec.Body.String())
	}
	// Tokenizing, plus the body's copies and the answer (a few bytes a token).
	if a := after.TotalAlloc - before.TotalAlloc; a > tokenizer.EncodeBytesPerByte*n+(32<<20) {
		t.Errorf("tokenizing 1 MiB of spaces (%d tokens) allocated %d MiB", got.Count, a>>20)
	} else {
		t.Logf("1 MiB of spaces: %d tokens, %d MiB allocated", got.Count, a>>20)
	}
}
