package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The agents' API against the real engine and the embedded default model (random weights,
// the Qwen2.5 tool template): constrained outputs are complete and valid against their
// schemas, tool calls come back parsed, and constrained greedy outputs do not depend on the
// prefix cache.

type chatAnswer struct {
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage apiUsage `json:"usage"`
}

func agentInstance(t *testing.T, prefixCache bool) string {
	_, ts := newTestInstance(t, func(o *serveOptions) {
		o.model = "synthetic:default"
		o.engine.KVMemory = 64 << 20
		o.engine.PrefixCache = prefixCache
		o.engine.Dedup = prefixCache
	})
	return ts.URL
}

// boundedSchemas are schemas whose instances have a bounded size, so any model finishes them.
var boundedSchemas = []string{
	`{"type":"object","properties":{"city":{"type":"string","maxLength":12},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","days"],"additionalProperties":false}`,
	`{"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit"]},"ok":{"type":"boolean"},"note":{"type":"string","minLength":1,"maxLength":8}},"required":["unit","ok"],"additionalProperties":false}`,
	`{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string","maxLength":6},"minItems":1,"maxItems":3},"score":{"type":"number","minimum":0,"maximum":10}},"required":["tags"],"additionalProperties":false}`,
	`{"$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer","minimum":-5,"maximum":5},"y":{"type":"integer","minimum":-5,"maximum":5}},"required":["x","y"],"additionalProperties":false}},"type":"object","properties":{"from":{"$ref":"#/$defs/pt"},"to":{"$ref":"#/$defs/pt"}},"required":["from","to"],"additionalProperties":false}`,
	`{"type":"object","properties":{"answer":{"anyOf":[{"type":"integer","minimum":0,"maximum":99},{"type":"string","maxLength":5},{"type":"null"}]},"const":{"const":"v1"}},"required":["answer","const"],"additionalProperties":false}`,
}

func compileSchema(t *testing.T, src string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validateJSON(t *testing.T, s *jsonschema.Schema, text string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	return s.Validate(v)
}

func chatPost(t *testing.T, url string, body map[string]any) chatAnswer {
	t.Helper()
	code, b := post(t, url+"/v1/chat/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, b)
	}
	var a chatAnswer
	if err := json.Unmarshal(b, &a); err != nil || len(a.Choices) != 1 {
		t.Fatalf("answer %s: %v", b, err)
	}
	return a
}

func weatherTool(schema string) map[string]any {
	return map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Weather forecast for a city", "parameters": json.RawMessage(schema)}}
}

// TestConstrainedOutputs sends 200 constrained requests (json_schema answers and required tool
// calls, sampled with different seeds) and checks every output with a JSON-schema validator.
func TestConstrainedOutputs(t *testing.T) {
	url := agentInstance(t, true)
	compiled := make([]*jsonschema.Schema, len(boundedSchemas))
	for i, s := range boundedSchemas {
		compiled[i] = compileSchema(t, s)
	}
	const n = 200
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []string
		sem  = make(chan struct{}, 8)
	)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			k := i % len(boundedSchemas)
			body := map[string]any{
				"messages":    []map[string]any{{"role": "user", "content": fmt.Sprintf("request %d: answer in JSON", i)}},
				"max_tokens":  384,
				"temperature": 1.0,
				"seed":        i,
			}
			tools := i%2 == 1
			if tools {
				body["tools"] = []any{weatherTool(boundedSchemas[k])}
				body["tool_choice"] = "required"
				// Up to 4 parallel calls on every fourth request, one call on the others.
				body["parallel_tool_calls"] = i%4 == 3
			} else {
				body["response_format"] = map[string]any{"type": "json_schema",
					"json_schema": map[string]any{"name": "out", "strict": true, "schema": json.RawMessage(boundedSchemas[k])}}
			}
			b, _ := json.Marshal(body)
			code, raw := postBytes(url+"/v1/chat/completions", b)
			fail := func(format string, args ...any) {
				mu.Lock()
				errs = append(errs, fmt.Sprintf("request %d (schema %d, tools %v): ", i, k, tools)+fmt.Sprintf(format, args...))
				mu.Unlock()
			}
			if code != 200 {
				fail("status %d: %s", code, raw)
				return
			}
			var a chatAnswer
			if err := json.Unmarshal(raw, &a); err != nil || len(a.Choices) != 1 {
				fail("answer %s", raw)
				return
			}
			c := a.Choices[0]
			var out string
			if tools {
				if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) == 0 {
					fail("finish %q, %d tool calls: %s", c.FinishReason, len(c.Message.ToolCalls), raw)
					return
				}
				for _, tc := range c.Message.ToolCalls {
					if tc.Function.Name != "get_weather" || tc.Type != "function" || tc.ID == "" {
						fail("tool call %+v", tc)
					}
					if err := validateJSON(t, compiled[k], tc.Function.Arguments); err != nil {
						fail("arguments %s: %v", tc.Function.Arguments, err)
					}
				}
				return
			}
			if c.FinishReason != "stop" || c.Message.Content == nil {
				fail("finish %q: %s", c.FinishReason, raw)
				return
			}
			out = *c.Message.Content
			if err := validateJSON(t, compiled[k], out); err != nil {
				fail("output %q: %v", out, err)
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		t.Error(e)
	}
	t.Logf("%d constrained requests, %d failures", n, len(errs))
}

func postBytes(url string, b []byte) (int, []byte) {
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

// TestConstrainedCacheInvariance: greedy constrained outputs are bitwise equal with the
// prefix cache on and off, over a session whose turns share their prefix.
func TestConstrainedCacheInvariance(t *testing.T) {
	on, off := agentInstance(t, true), agentInstance(t, false)
	msgs := []map[string]any{{"role": "system", "content": strings.Repeat("You are a careful weather agent. ", 20)}}
	for turn := range 4 {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("turn %d: plan the trip", turn)})
		body := map[string]any{"messages": msgs, "max_tokens": 96, "temperature": 0,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "plan", "schema": json.RawMessage(boundedSchemas[turn%len(boundedSchemas)])}}}
		if turn%2 == 1 {
			delete(body, "response_format")
			body["tools"] = []any{weatherTool(boundedSchemas[0])}
			body["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
		}
		a, b := chatPost(t, on, body), chatPost(t, off, body)
		for _, x := range []*chatAnswer{&a, &b} { // call ids are random
			for i := range x.Choices[0].Message.ToolCalls {
				x.Choices[0].Message.ToolCalls[i].ID = ""
			}
		}
		ja, _ := json.Marshal(a.Choices[0].Message)
		jb, _ := json.Marshal(b.Choices[0].Message)
		if !bytes.Equal(ja, jb) {
			t.Fatalf("turn %d: cache on %s, off %s", turn, ja, jb)
		}
		if turn > 0 && (a.Usage.PromptTokensDetails == nil || a.Usage.PromptTokensDetails.CachedTokens == nil || *a.Usage.PromptTokensDetails.CachedTokens == 0) {
			t.Errorf("turn %d: the cache-on server reused nothing: %+v", turn, a.Usage)
		}
		t.Logf("turn %d: %s (cached %d of %d)", turn, ja, *a.Usage.PromptTokensDetails.CachedTokens, a.Usage.PromptTokens)
		msgs = append(msgs, map[string]any{"role": "assistant", "content": "noted"})
	}
}

// TestToolLoop runs request → tool_calls → tool result → answer on the real model, and checks
// that the second turn reuses the first turn's prompt from the cache.
func TestToolLoop(t *testing.T) {
	url := agentInstance(t, true)
	schema := boundedSchemas[0]
	msgs := []any{
		map[string]any{"role": "system", "content": "You are an agent with tools."},
		map[string]any{"role": "user", "content": "What's the weather in Paris for 3 days?"},
	}
	tools := []any{weatherTool(schema), map[string]any{"type": "function", "function": map[string]any{"name": "get_time",
		"parameters": json.RawMessage(`{"type":"object","properties":{"tz":{"enum":["UTC","CET"]}},"required":["tz"]}`)}}}
	a := chatPost(t, url, map[string]any{"messages": msgs, "tools": tools, "tool_choice": "required", "max_tokens": 128, "temperature": 0})
	c := a.Choices[0]
	if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) == 0 {
		t.Fatalf("first turn: %+v", c)
	}
	var calls []any
	for _, tc := range c.Message.ToolCalls {
		calls = append(calls, map[string]any{"id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Function.Name, "arguments": tc.Function.Arguments}})
	}
	msgs = append(msgs, map[string]any{"role": "assistant", "content": nil, "tool_calls": calls})
	for _, tc := range c.Message.ToolCalls {
		msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": tc.ID, "content": `{"forecast":"sunny","high":21}`})
	}
	b := chatPost(t, url, map[string]any{"messages": msgs, "tools": tools, "tool_choice": "none", "max_tokens": 16, "temperature": 0})
	if len(b.Choices[0].Message.ToolCalls) != 0 || b.Choices[0].Message.Content == nil {
		t.Fatalf("answer turn with tool_choice none: %+v", b.Choices[0])
	}
	prev := a.Usage.PromptTokens
	cached := *b.Usage.PromptTokensDetails.CachedTokens
	if want := (prev - 1) / 16 * 16; cached < want {
		t.Errorf("second turn cached %d tokens, want at least the first prompt's full blocks %d", cached, want)
	}
	t.Logf("turn 1: %d prompt tokens; turn 2: %d prompt tokens, %d cached", prev, b.Usage.PromptTokens, cached)
}
