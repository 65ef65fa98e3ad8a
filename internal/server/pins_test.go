package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"stockpot/internal/api"
	"stockpot/internal/engine"
)

// TestMessagesBreakpointPins: each cache_control breakpoint pins the prompt up to the end of
// its block: the common prefix of the full render and the render cut after the block.
func TestMessagesBreakpointPins(t *testing.T) {
	gen := newFakeGen("ok")
	s, _ := newTestServer(t, gen, nil)
	body := `{"model":"` + testModel + `","max_tokens":4,"pin_strict":true,
		"system":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral","ttl":"1h"}}],
		"messages":[{"role":"user","content":[{"type":"text","text":"hello","cache_control":{"type":"ephemeral"}},{"type":"text","text":"more"}]}]}`
	if rec := do(s.Handler(), "POST", "/v1/messages", body); rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	req := gen.lastRequest()
	if len(req.Pins) != 2 || !req.PinStrict {
		t.Fatalf("pins %+v strict %v, want 2 strict pins", req.Pins, req.PinStrict)
	}
	full := fakeTok{}.Decode(req.Prompt)
	for i, want := range []struct {
		ttl    time.Duration
		suffix string
	}{{time.Hour, "<|system|>be brief\n"}, {5 * time.Minute, "<|user|>hello\n"}} {
		p := req.Pins[i]
		got := fakeTok{}.Decode(req.Prompt[:p.Tokens])
		if p.TTL != want.ttl || !strings.HasSuffix(got, want.suffix) || !strings.HasPrefix(full, got) {
			t.Errorf("pin %d: %v over %q, want %v ending %q (prompt %q)", i, p.TTL, got, want.ttl, want.suffix, full)
		}
	}
}

// TestRetentionPins: prompt_cache_retention pins the whole prompt on chat, completions and
// Responses; an unknown value is a 400 naming the field.
func TestRetentionPins(t *testing.T) {
	gen := newFakeGen("ok")
	s, _ := newTestServer(t, gen, nil)
	for _, tc := range []struct {
		path, body string
		ttl        time.Duration
		strict     bool
	}{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"prompt_cache_retention":"24h"}`, 24 * time.Hour, false},
		{"/v1/completions", `{"prompt":"hello","prompt_cache_retention":"in_memory","pin_strict":true}`, api.RetentionInMemory, true},
		{"/v1/responses", `{"input":"hi","prompt_cache_retention":"24h","pin_strict":true}`, 24 * time.Hour, true},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`, 0, false},
	} {
		rec := do(s.Handler(), "POST", tc.path, tc.body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.path, rec.Code, rec.Body)
		}
		req := gen.lastRequest()
		switch {
		case tc.ttl == 0 && len(req.Pins) != 0:
			t.Errorf("%s without retention: pins %+v", tc.path, req.Pins)
		case tc.ttl != 0 && (len(req.Pins) != 1 || req.Pins[0].Tokens != len(req.Prompt) || req.Pins[0].TTL != tc.ttl || req.PinStrict != tc.strict):
			t.Errorf("%s: pins %+v strict %v, want the whole prompt (%d) for %v, strict %v", tc.path, req.Pins, req.PinStrict, len(req.Prompt), tc.ttl, tc.strict)
		}
	}
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/responses"} {
		body := map[string]string{
			"/v1/chat/completions": `{"messages":[{"role":"user","content":"hi"}],"prompt_cache_retention":"forever"}`,
			"/v1/completions":      `{"prompt":"hi","prompt_cache_retention":"forever"}`,
			"/v1/responses":        `{"input":"hi","prompt_cache_retention":"forever"}`,
		}[path]
		rec := do(s.Handler(), "POST", path, body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "prompt_cache_retention") {
			t.Errorf("%s: unknown retention: status %d %s, want 400 naming prompt_cache_retention", path, rec.Code, rec.Body)
		}
	}
}

// TestPinBudgetErrors: a strict pin over the budget is a 400 in each dialect's shape.
func TestPinBudgetErrors(t *testing.T) {
	gen := newFakeGen("ok")
	gen.genErr = fmt.Errorf("%w: 4 new blocks to pin, 0 free", engine.ErrPinBudget)
	s, _ := newTestServer(t, gen, nil)
	rec := do(s.Handler(), "POST", "/v1/messages", `{"max_tokens":4,"pin_strict":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"type":"error"`) || !strings.Contains(rec.Body.String(), `"invalid_request_error"`) ||
		!strings.Contains(rec.Body.String(), "pin budget") {
		t.Errorf("messages: %d %s, want a 400 invalid_request_error in Anthropic's shape", rec.Code, rec.Body)
	}
	rec = do(s.Handler(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"prompt_cache_retention":"24h","pin_strict":true}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"param":"pin_strict"`) {
		t.Errorf("chat: %d %s, want a 400 naming pin_strict", rec.Code, rec.Body)
	}
}

// TestPinUsage: the engine's pin results in each dialect's usage.
func TestPinUsage(t *testing.T) {
	u := engine.Usage{PromptTokens: 100, DeviceTokens: 32, ComputedTokens: 68, Pins: []engine.PinResult{
		{TTL: 5 * time.Minute, Requested: 96, Pinned: 80, Created: 48}, // partial: the budget ran out
		{TTL: time.Hour, Requested: 64, Pinned: 64, Created: 32},
	}}
	m := messagesUsage(u)
	if m.CacheReadInputTokens != 32 || m.CacheCreationInputTokens != 48 || m.CacheCreation.Ephemeral1h != 32 ||
		m.CacheCreation.Ephemeral5m != 16 || m.InputTokens != 20 {
		t.Errorf("anthropic usage %+v", m)
	}
	if m.InputTokens+m.CacheReadInputTokens+m.CacheCreationInputTokens != u.PromptTokens {
		t.Errorf("input + read + creation != prompt")
	}
	c := usageOf(u).Cache
	if c.PinnedTokens == nil || *c.PinnedTokens != 80 || *c.PinRequestedTokens != 96 {
		t.Errorf("usage.cache pins %v / %v, want 80 of 96", c.PinnedTokens, c.PinRequestedTokens)
	}
	if c := usageOf(engine.Usage{PromptTokens: 3}).Cache; c.PinnedTokens != nil || c.PinRequestedTokens != nil {
		t.Errorf("no pin asked: pinned fields present")
	}
}
