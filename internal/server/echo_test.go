package server

import (
	"strings"
	"testing"
)

// TestErrorsQuoteAPrefix: a 1 MB model name (or route, or role) is answered with an error
// that quotes a short prefix of it, in every dialect, not the whole value.
func TestErrorsQuoteAPrefix(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("ok"), func(c *Config) { agentConfig(c); c.MaxBodyBytes = 4 << 20 })
	h := s.Handler()
	huge := strings.Repeat("m", 1<<20)
	cases := []struct{ path, body string }{
		{"/v1/completions", `{"model":"` + huge + `","prompt":"hi"}`},
		{"/v1/chat/completions", `{"model":"` + huge + `","messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/chat/completions", `{"messages":[{"role":"` + huge + `","content":"hi"}]}`},
		{"/v1/responses", `{"model":"` + huge + `","input":"hi"}`},
		{"/v1/responses", `{"input":"hi","previous_response_id":"` + huge + `"}`},
		{"/v1/messages", `{"model":"` + huge + `","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{"/v1/messages", `{"max_tokens":8,"messages":[{"role":"user","content":[{"type":"` + huge + `"}]}]}`},
		{"/v1/messages/count_tokens", `{"model":"` + huge + `","messages":[{"role":"user","content":"hi"}]}`},
		{"/tokenize", `{"model":"` + huge + `","prompt":"hi"}`},
		{"/v1/" + huge, `{}`},
	}
	for _, c := range cases {
		rec := do(h, "POST", c.path, c.body)
		if rec.Code < 400 || rec.Code > 499 {
			t.Errorf("%.40s: %d", c.path, rec.Code)
		}
		if n := rec.Body.Len(); n > 1024 {
			t.Errorf("%.40s (%.60s…): the error is %d bytes: %.200s", c.path, c.body, n, rec.Body)
		}
		if !strings.Contains(rec.Body.String(), "10485") { // its length, 1048576 and more
			t.Errorf("%.40s: the error does not say the value's length: %s", c.path, rec.Body)
		}
	}
	// GET /v1/models/NAME, the route's name.
	if rec := do(h, "GET", "/v1/models/"+huge, ""); rec.Code != 404 || rec.Body.Len() > 1024 {
		t.Errorf("GET /v1/models/…: %d, %d bytes", rec.Code, rec.Body.Len())
	}
}
