package server

import (
	"strings"
	"testing"

	"stockpot/internal/api"
)

// TestTokenBudget: /tokenize counts at most the context length, chats and prompts over it are
// 400s naming the field, and the server keeps serving.
func TestTokenBudget(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("ok"), func(c *Config) { c.MaxBodyBytes = 1 << 20 })
	h := s.Handler()
	long := strings.Repeat("x", 500) // 500 tokens with the byte-level fake; context 128
	for _, tc := range []struct{ path, body, param string }{
		{"/tokenize", `{"prompt":"` + long + `"}`, "prompt"},
		{"/tokenize", `{"messages":[{"role":"user","content":"` + long + `"}]}`, "messages"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"` + long + `"}]}`, "messages"},
		{"/v1/completions", `{"prompt":"` + long + `"}`, "prompt"},
		{"/v1/completions", `{"prompt":"x","stop":[""]}`, "stop"},
		{"/v1/completions", `{"prompt":"x","top_k":1000000000000}`, "top_k"},
		{"/v1/completions", `{"prompt":"x","cache_salt":"` + strings.Repeat("s", 1<<10) + `"}`, "cache_salt"},
	} {
		rec := do(h, "POST", tc.path, tc.body)
		if rec.Code != 400 {
			t.Errorf("%s %.60s: %d %s", tc.path, tc.body, rec.Code, rec.Body)
			continue
		}
		if e := decode[api.ErrorBody](t, rec); e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Errorf("%s %.60s: error %s, want param %s", tc.path, tc.body, rec.Body, tc.param)
		}
	}
	if rec := do(h, "POST", "/tokenize", `{"prompt":"`+long[:127]+`"}`); rec.Code != 200 {
		t.Errorf("a prompt of the context length: %d %s", rec.Code, rec.Body)
	}
	if rec := do(h, "POST", "/v1/completions", `{"prompt":"x"}`); rec.Code != 200 {
		t.Errorf("after the bad inputs: %d %s", rec.Code, rec.Body)
	}
}
