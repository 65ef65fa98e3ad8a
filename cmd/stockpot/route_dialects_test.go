package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"stockpot/internal/router"
)

// TestRouteDialectsAgentPrefix: an agent with 12 tools and chat_template_kwargs, two turns
// through a kv-aware router in front of two real replicas (the embedded default model, the
// Qwen2.5 tool template), for chat, Responses and Messages: the second turn lands on the
// replica that served the first and reuses its prefix well past the system prompt (the tools
// are rendered in it), because the router places each dialect by the prompt as the replica
// renders it (POST /tokenize/render). Each replica's load line reaches the router
// (GET /backends replica_load).
func TestRouteDialectsAgentPrefix(t *testing.T) {
	var urls []string
	for range 2 {
		_, ts := newTestInstance(t, func(o *serveOptions) { o.model = "synthetic:default"; o.engine.KVMemory = 64 << 20 })
		urls = append(urls, ts.URL)
	}
	cfg := router.DefaultConfig()
	cfg.Backends, cfg.Policy, cfg.HealthInterval = urls, "kv-aware", 50*time.Millisecond
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	rts := httptest.NewServer(rt.Handler())
	t.Cleanup(rts.Close)
	waitUntil(t, "events and load from both replicas", func() bool {
		for _, st := range rt.Backends() {
			if st.Events == nil || !st.Events.Synced || st.Replica == nil {
				return false
			}
		}
		return len(rt.Backends()) == 2
	})

	var tools, rtools, mtools []map[string]any
	for i := range 12 {
		params := map[string]any{"type": "object", "properties": map[string]any{"arg": map[string]any{"type": "string", "description": fmt.Sprintf("argument of tool %d", i)}}}
		name, desc := fmt.Sprintf("tool_%02d", i), fmt.Sprintf("Tool number %d does a thing with its argument and reports back.", i)
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": name, "description": desc, "parameters": params}})
		rtools = append(rtools, map[string]any{"type": "function", "name": name, "description": desc, "parameters": params})
		mtools = append(mtools, map[string]any{"name": name, "description": desc, "input_schema": params})
	}
	const system = "You are an agent."
	post := func(path string, body map[string]any) (string, []byte) {
		t.Helper()
		b, _ := json.Marshal(body)
		resp, err := http.Post(rts.URL+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, out)
		}
		return resp.Header.Get("X-Stockpot-Backend"), out
	}
	kwargs := map[string]any{"enable_thinking": false}
	for _, c := range []struct {
		path   string
		turn   func(n int) map[string]any
		cached func([]byte) int
	}{
		{"/v1/chat/completions", func(n int) map[string]any {
			msgs := []map[string]any{{"role": "system", "content": system}}
			for i := range n {
				msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("chat step %d: call a tool", i)}, map[string]any{"role": "assistant", "content": "ok"})
			}
			return map[string]any{"messages": msgs[:len(msgs)-1], "tools": tools, "chat_template_kwargs": kwargs, "max_tokens": 2, "temperature": 0}
		}, func(b []byte) int {
			var a struct{ Usage apiUsage }
			_ = json.Unmarshal(b, &a)
			return *a.Usage.PromptTokensDetails.CachedTokens
		}},
		{"/v1/responses", func(n int) map[string]any {
			var items []map[string]any
			for i := range n {
				items = append(items, map[string]any{"role": "user", "content": fmt.Sprintf("responses step %d: call a tool", i)}, map[string]any{"role": "assistant", "content": "ok"})
			}
			return map[string]any{"instructions": system, "input": items[:len(items)-1], "tools": rtools, "max_output_tokens": 2, "temperature": 0}
		}, func(b []byte) int {
			var a struct {
				Usage struct {
					Details struct {
						Cached int `json:"cached_tokens"`
					} `json:"input_tokens_details"`
				} `json:"usage"`
			}
			_ = json.Unmarshal(b, &a)
			return a.Usage.Details.Cached
		}},
		{"/v1/messages", func(n int) map[string]any {
			var msgs []map[string]any
			for i := range n {
				msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("messages step %d: call a tool", i)}, map[string]any{"role": "assistant", "content": "ok"})
			}
			return map[string]any{"system": system, "messages": msgs[:len(msgs)-1], "tools": mtools, "max_tokens": 2, "temperature": 0}
		}, func(b []byte) int {
			var a struct {
				Usage struct {
					Read int `json:"cache_read_input_tokens"`
				} `json:"usage"`
			}
			_ = json.Unmarshal(b, &a)
			return a.Usage.Read
		}},
	} {
		blocks := func(id string) int {
			for _, st := range rt.Backends() {
				if st.ID == id {
					return st.IndexBlocks
				}
			}
			return 0
		}
		first, out1 := post(c.path, c.turn(1))
		seen := c.cached(out1)
		waitUntil(t, "the first turn's blocks in the router's index", func() bool { return blocks(first)*16 >= seen+200 })
		second, out := post(c.path, c.turn(2))
		cached := c.cached(out)
		t.Logf("%s: turn 1 on %s, turn 2 on %s with %d cached tokens", c.path, first, second, cached)
		if second != first {
			t.Errorf("%s: turn 2 went to %s, turn 1 to %s", c.path, second, first)
		}
		// The 12 tools render to hundreds of tokens ahead of the turns; the system prompt alone is ~20.
		if cached < 200 {
			t.Errorf("%s: turn 2 reused %d tokens, want the tools' prefix (>= 200)", c.path, cached)
		}
	}
}
