package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"stockpot/internal/api"
)

// discardRW is a ResponseWriter that keeps only a byte count (or the bytes, when keep) and
// counts flushes: the client side of a stream, at no cost.
type discardRW struct {
	h       http.Header
	n       int
	flushes int
	keep    bool
	buf     bytes.Buffer
}

func (d *discardRW) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discardRW) WriteHeader(int) {}
func (d *discardRW) Write(p []byte) (int, error) {
	d.n += len(p)
	if d.keep {
		d.buf.Write(p)
	}
	return len(p), nil
}
func (d *discardRW) Flush() { d.flushes++ }

// BenchmarkStream: tokens per second through the streaming handlers (chat and completions,
// one token per event, as the engine sends them at batch size 1, from a fake engine) against
// two peers: the same handler with the writer encoding every event with encoding/json (as it
// did before chunk templates), and a plain Write+Flush of the very same event bytes (the
// floor: what the transport alone costs).
func BenchmarkStream(b *testing.B) {
	const n = 256
	text := strings.Repeat("abcdefgh", n/8)
	for _, c := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":1000}`},
		{"completions", "/v1/completions", `{"model":"test-model","prompt":"hi","stream":true,"max_tokens":1000}`},
	} {
		t := &testing.T{}
		s, _ := newTestServer(t, newFakeGen(text), func(cfg *Config) {
			cfg.ContextLength, cfg.MaxPromptTokens = 4096, 1024
		})
		h := s.Handler()
		serve := func(w http.ResponseWriter) {
			h.ServeHTTP(w, httptest.NewRequest("POST", c.path, strings.NewReader(c.body)))
		}
		rec := &discardRW{keep: true}
		serve(rec)
		events := bytes.SplitAfter(rec.buf.Bytes(), []byte("\n\n"))
		if rec.flushes < n || !bytes.HasSuffix(rec.buf.Bytes(), []byte("data: [DONE]\n\n")) {
			b.Fatalf("%s: %d flushes, stream %q", c.name, rec.flushes, rec.buf.String())
		}
		for _, json := range []bool{false, true} {
			name := "/handler"
			if json {
				name = "/handler-encoding-json" // the writer before templates: json.Marshal per event
			}
			b.Run(c.name+name, func(b *testing.B) {
				api.NoChunkTemplates = json
				defer func() { api.NoChunkTemplates = false }()
				b.ReportAllocs()
				w := &discardRW{}
				for b.Loop() {
					serve(w)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
		b.Run(c.name+"/plain-write", func(b *testing.B) {
			b.ReportAllocs()
			w := &discardRW{}
			for b.Loop() {
				for _, e := range events {
					_, _ = w.Write(e)
					w.Flush()
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkSSESend: the writer alone, one chat text chunk per event (as chatWriter builds
// it), through the template against encoding/json (the writer before templates).
func BenchmarkSSESend(b *testing.B) {
	for _, json := range []bool{false, true} {
		name := "template"
		if json {
			name = "encoding-json"
		}
		b.Run(name, func(b *testing.B) {
			api.NoChunkTemplates = json
			defer func() { api.NoChunkTemplates = false }()
			sse := newSSE(&discardRW{})
			text := " world"
			b.ReportAllocs()
			for b.Loop() {
				t := text
				_ = sse.send(&api.ChatCompletionChunk{ID: "chatcmpl-0123456789abcdef", Object: "chat.completion.chunk", Created: 1764547200,
					Model: "qwen2.5-0.5b-instruct", SystemFingerprint: "fp_3f9a2c", Choices: []api.ChatChunkChoice{{Delta: api.ChatDelta{Content: &t}}}})
			}
		})
	}
}
