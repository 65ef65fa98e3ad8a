package server

import (
	"net/http"
	"strings"
	"testing"
)

// TestMaxOffloadTokensReachesEngine: max_offload_tokens on chat, completions, Responses and
// Messages becomes the engine request's cap; absent leaves it unset; a negative value is a
// 400 naming the field, and nothing reaches the engine.
func TestMaxOffloadTokensReachesEngine(t *testing.T) {
	gen := newFakeGen("ok")
	s, _ := newTestServer(t, gen, nil)
	for _, tc := range []struct {
		path, body string
		want       int // -1: unset
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":64}`, 64},
		{"/v1/completions", `{"prompt":"hello","max_offload_tokens":0}`, 0},
		{"/v1/responses", `{"input":"hi","max_offload_tokens":32}`, 32},
		{"/v1/messages", `{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":16}`, 16},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, -1},
	} {
		rec := do(s.Handler(), "POST", tc.path, tc.body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.path, rec.Code, rec.Body)
		}
		got := gen.lastRequest().MaxOffloadTokens
		switch {
		case tc.want < 0 && got != nil:
			t.Errorf("%s without the field: cap %d", tc.path, *got)
		case tc.want >= 0 && (got == nil || *got != tc.want):
			t.Errorf("%s: cap %v, want %d", tc.path, got, tc.want)
		}
	}
	count := func() int {
		gen.mu.Lock()
		defer gen.mu.Unlock()
		return len(gen.reqs)
	}
	n := count()
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":-1}`,
		"/v1/completions":      `{"prompt":"hi","max_offload_tokens":-8}`,
		"/v1/responses":        `{"input":"hi","max_offload_tokens":-2}`,
		"/v1/messages":         `{"model":"` + testModel + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}],"max_offload_tokens":-4}`,
	} {
		rec := do(s.Handler(), "POST", path, body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "max_offload_tokens") {
			t.Errorf("%s: negative cap: status %d %s, want 400 naming max_offload_tokens", path, rec.Code, rec.Body)
		}
	}
	if m := count(); m != n {
		t.Errorf("%d refused requests reached the engine", m-n)
	}
}
