package server

import "testing"

// TestPromptCacheKeyCounted: every generation endpoint that takes prompt_cache_key counts the
// requests carrying one; a too-long key is a 400 before any count.
func TestPromptCacheKeyCounted(t *testing.T) {
	s, reg := newTestServer(t, newFakeGen("ok"), nil)
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt":"hi","max_tokens":2,"prompt_cache_key":"a"}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"prompt_cache_key":"a"}`},
		{"/v1/responses", `{"input":"hi","max_output_tokens":2,"prompt_cache_key":"a"}`},
		{"/v1/completions", `{"prompt":"hi","max_tokens":2}`},
	} {
		if rec := do(s.Handler(), "POST", c.path, c.body); rec.Code != 200 {
			t.Fatalf("%s: HTTP %d %s", c.path, rec.Code, rec.Body)
		}
	}
	if rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":"hi","prompt_cache_key":7}`); rec.Code != 400 {
		t.Errorf("a numeric key: HTTP %d, want 400", rec.Code)
	}
	if got := counterValue(t, reg, "stockpot_prompt_cache_key_requests_total", "", ""); got != 3 {
		t.Errorf("stockpot_prompt_cache_key_requests_total = %v, want 3", got)
	}
}
