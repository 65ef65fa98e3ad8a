package server

import (
	"encoding/json"
	"strings"
	"testing"

	"stockpot/internal/engine"
)

// A decode the engine stopped because it outgrew the KV pool keeps finish_reason "length"
// (Anthropic's "max_tokens", Responses' "incomplete"), and says why in usage.cache.stopped_by
// in all four dialects, streamed or not, and in stockpot_requests_stopped_total.
func TestPoolExhaustedStopSaysSo(t *testing.T) {
	gen := newFakeGen("Hello there, a long answer")
	gen.stoppedBy = engine.StopPoolExhausted
	s, reg := newTestServer(t, gen, agentConfig)
	const want = `"stopped_by":"kv_pool_exhausted"`
	routes := []struct {
		path, body string
		finish     func(map[string]any) any
	}{
		{"/v1/completions", `{"prompt":"hi","max_tokens":5`, func(m map[string]any) any { return m["choices"].([]any)[0].(map[string]any)["finish_reason"] }},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5`, func(m map[string]any) any { return m["choices"].([]any)[0].(map[string]any)["finish_reason"] }},
		{"/v1/responses", `{"input":"hi","max_output_tokens":5`, func(m map[string]any) any { return m["status"] }},
		{"/v1/messages", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":5`, func(m map[string]any) any { return m["stop_reason"] }},
	}
	wantFinish := []string{"length", "length", "incomplete", "max_tokens"}
	for i, r := range routes {
		rec := do(s.Handler(), "POST", r.path, r.body+"}")
		var m map[string]any
		if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &m) != nil {
			t.Fatalf("%s: %d %s", r.path, rec.Code, rec.Body)
		}
		cache, _ := m["usage"].(map[string]any)["cache"].(map[string]any)
		if r.finish(m) != wantFinish[i] || cache["stopped_by"] != engine.StopPoolExhausted {
			t.Errorf("%s: finish %v, usage %v", r.path, r.finish(m), m["usage"])
		}
		// Streamed: the usage the stream ends with says it once.
		rec = do(s.Handler(), "POST", r.path, r.body+`,"stream":true,"stream_options":{"include_usage":true}}`)
		if rec.Code != 200 || strings.Count(rec.Body.String(), want) != 1 {
			t.Errorf("%s streamed: %d %s", r.path, rec.Code, rec.Body)
		}
	}
	if got := counterValue(t, reg, "stockpot_requests_stopped_total", "reason", engine.StopPoolExhausted); got != float64(2*len(routes)) {
		t.Errorf("stockpot_requests_stopped_total{reason=kv_pool_exhausted} = %v, want %d", got, 2*len(routes))
	}

	// A max_tokens stop says nothing and counts nothing.
	gen.stoppedBy = ""
	rec := do(s.Handler(), "POST", "/v1/chat/completions", routes[1].body+"}")
	if rec.Code != 200 || strings.Contains(rec.Body.String(), "stopped_by") || !strings.Contains(rec.Body.String(), `"finish_reason":"length"`) {
		t.Errorf("max_tokens stop: %d %s", rec.Code, rec.Body)
	}
	if got := counterValue(t, reg, "stockpot_requests_stopped_total", "reason", engine.StopPoolExhausted); got != float64(2*len(routes)) {
		t.Errorf("after a max_tokens stop: %v", got)
	}
}
