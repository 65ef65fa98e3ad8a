package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"stockpot/internal/api"
)

// The Messages API through Anthropic's own Go client, unchanged, against the server on a
// loopback listener with the scripted fake generator.

func anthropicClient(t *testing.T, s *Server, opts ...option.RequestOption) anthropic.Client {
	t.Helper()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return anthropic.NewClient(append([]option.RequestOption{option.WithBaseURL(ts.URL), option.WithAPIKey("k"),
		option.WithMaxRetries(0)}, opts...)...)
}

var weatherTool = anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("forecast"),
	InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}

func userText(s string) []anthropic.MessageParam {
	return []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(s))}
}

func TestMessagesText(t *testing.T) {
	gen := newFakeGen("Bonjour.")
	s, _ := newTestServer(t, gen, agentConfig)
	c := anthropicClient(t, s)
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 50,
		System:        []anthropic.TextBlockParam{{Text: "be brief", CacheControl: anthropic.CacheControlEphemeralParam{TTL: anthropic.CacheControlEphemeralTTLTTL1h}}},
		Messages:      userText("hello"),
		Metadata:      anthropic.MetadataParam{UserID: anthropic.String("u1")},
		StopSequences: []string{"zzz"},
	}, option.WithJSONSet("temperature", 0.5), option.WithJSONSet("top_k", 5), option.WithJSONSet("top_p", 0.9))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Role != "assistant" || !strings.HasPrefix(msg.ID, "msg_") || msg.StopReason != "end_turn" ||
		len(msg.Content) != 1 || msg.Content[0].Type != "text" || msg.Content[0].Text != "Bonjour." {
		t.Fatalf("message %+v", msg)
	}
	req := gen.lastRequest()
	prompt := fakeTok{}.Decode(req.Prompt)
	if !strings.Contains(prompt, "<|system|>be brief\n<|user|>hello\n<|assistant|>") {
		t.Errorf("prompt %q", prompt)
	}
	if req.MaxTokens != 50 || req.Sampling.Temperature != 0.5 || req.Sampling.TopK != 5 || req.Sampling.TopP != float32(0.9) {
		t.Errorf("engine request %+v", req)
	}
	n := len(req.Prompt)
	u := msg.Usage
	read := fakeUsage(n).CachedTokens()
	if u.CacheReadInputTokens != int64(read) || u.InputTokens != int64(n-read) || u.CacheCreationInputTokens != 0 ||
		u.OutputTokens != int64(len("Bonjour."))+1 {
		t.Errorf("usage %+v (prompt %d)", u, n)
	}
	if !strings.Contains(msg.RawJSON(), `"cache":{"device_tokens":`) || !strings.Contains(msg.RawJSON(), `"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0}`) {
		t.Errorf("usage lacks the per-tier split or the cache_creation object: %s", msg.RawJSON())
	}
}

func TestMessagesStopSequenceAndMaxTokens(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("one two three"), agentConfig)
	c := anthropicClient(t, s)
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 50,
		Messages: userText("count"), StopSequences: []string{"three", " two"}})
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != "stop_sequence" || msg.StopSequence != " two" || msg.Content[0].Text != "one" {
		t.Errorf("stop: %+v", msg)
	}
	msg, err = c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 3, Messages: userText("count")})
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != "max_tokens" || msg.Content[0].Text != "one" {
		t.Errorf("max_tokens: %+v", msg)
	}
}

func TestMessagesToolUse(t *testing.T) {
	gen := newFakeGen(hermesCall)
	s, _ := newTestServer(t, gen, agentConfig)
	c := anthropicClient(t, s)
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 200,
		Messages: userText("weather in Paris?"), Tools: []anthropic.ToolUnionParam{weatherTool}})
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != "tool_use" || len(msg.Content) != 2 || msg.Content[0].Text != "Let me check." {
		t.Fatalf("message %s", msg.RawJSON())
	}
	tu := msg.Content[1]
	var in map[string]string
	if tu.Type != "tool_use" || !strings.HasPrefix(tu.ID, "toolu_") || tu.Name != "get_weather" || json.Unmarshal(tu.Input, &in) != nil || in["city"] != "Paris" {
		t.Errorf("tool_use %s", tu.RawJSON())
	}
	if p := (fakeTok{}).Decode(gen.lastRequest().Prompt); !strings.Contains(p, `"name":"get_weather"`) {
		t.Errorf("prompt lacks the tool: %q", p)
	}

	// The turn's history goes back as tool_use and tool_result; any forces a call (constrained).
	hist := []anthropic.MessageParam{
		anthropic.NewUserMessage(anthropic.NewTextBlock("weather in Paris?")),
		msg.ToParam(),
		anthropic.NewUserMessage(anthropic.NewToolResultBlock(tu.ID, "sunny", false), anthropic.NewTextBlock("and Rome?")),
	}
	_, err = c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 200,
		Messages: hist, Tools: []anthropic.ToolUnionParam{weatherTool},
		ToolChoice: anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}})
	if err != nil {
		t.Fatal(err)
	}
	req := gen.lastRequest()
	p := fakeTok{}.Decode(req.Prompt)
	want := `<|assistant|>Let me check.<call ` + tu.ID + ` get_weather {"city":"Paris"}>` + "\n<|tool|>sunny<result " + tu.ID + ">\n<|user|>and Rome?\n"
	if !strings.Contains(p, want) {
		t.Errorf("history rendered as %q, want %q inside", p, want)
	}
	if req.Sampling.Constraint == nil {
		t.Error("tool_choice any did not constrain the output")
	}
}

func TestMessagesStreamToolUse(t *testing.T) {
	gen := newFakeGen(hermesCall)
	s, _ := newTestServer(t, gen, agentConfig)
	c := anthropicClient(t, s)
	stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 200,
		Messages: userText("weather in Paris?"), Tools: []anthropic.ToolUnionParam{weatherTool}})
	var msg anthropic.Message
	events := map[string]int{}
	for stream.Next() {
		ev := stream.Current()
		events[ev.Type]++
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if events["message_start"] != 1 || events["message_stop"] != 1 || events["message_delta"] != 1 || events["content_block_start"] != 2 || events["content_block_stop"] != 2 {
		t.Errorf("events %v", events)
	}
	if msg.StopReason != "tool_use" || len(msg.Content) != 2 || msg.Content[0].Text != "Let me check." {
		t.Fatalf("accumulated %s", msg.RawJSON())
	}
	var in map[string]string
	if tu := msg.Content[1]; tu.Name != "get_weather" || json.Unmarshal(tu.Input, &in) != nil || in["city"] != "Paris" {
		t.Errorf("tool_use %s", tu.RawJSON())
	}
	if msg.Usage.OutputTokens == 0 || msg.Usage.CacheReadInputTokens == 0 {
		t.Errorf("usage %+v", msg.Usage)
	}
}

func TestMessagesStreamText(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("Hi there"), agentConfig)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	resp, err := http.Post(ts.URL+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"`+testModel+`","max_tokens":20,"stream":true,"messages":[{"role":"user","content":"q"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	body := string(raw)
	order := []string{"event: message_start\n", "event: ping\n", "event: content_block_start\n", "event: content_block_delta\n",
		`"type":"text_delta"`, "event: content_block_stop\n", "event: message_delta\n", `"stop_reason":"end_turn"`, "event: message_stop\n"}
	at := 0
	for _, o := range order {
		i := strings.Index(body[at:], o)
		if i < 0 {
			t.Fatalf("%q missing after offset %d in\n%s", o, at, body)
		}
		at += i
	}
	if strings.Contains(body, "[DONE]") {
		t.Error("an Anthropic stream has no [DONE]")
	}
}

func TestMessagesCountTokens(t *testing.T) {
	gen := newFakeGen("x")
	s, _ := newTestServer(t, gen, agentConfig)
	c := anthropicClient(t, s)
	n, err := c.Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{Model: testModel,
		System:   anthropic.MessageCountTokensParamsSystemUnion{OfString: anthropic.String("sys")},
		Messages: userText("hello")})
	if err != nil {
		t.Fatal(err)
	}
	// The same request generated: its prompt has exactly that many tokens.
	if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 5,
		System: []anthropic.TextBlockParam{{Text: "sys"}}, Messages: userText("hello")}); err != nil {
		t.Fatal(err)
	}
	if want := len(gen.lastRequest().Prompt); n.InputTokens != int64(want) {
		t.Errorf("count_tokens %d, the prompt has %d", n.InputTokens, want)
	}
}

func TestMessagesErrors(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { agentConfig(c); c.APIKeys = []string{"k"} })
	c := anthropicClient(t, s)
	_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 5,
		System:   []anthropic.TextBlockParam{{Text: "", CacheControl: anthropic.NewCacheControlEphemeralParam()}},
		Messages: userText("q")})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Error(), "empty text blocks") {
		t.Fatalf("cache_control on an empty block: %v", err)
	}
	bad := anthropicClient(t, s, option.WithAPIKey("wrong"))
	if _, err := bad.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 5, Messages: userText("q")}); !errors.As(err, &ae) || ae.StatusCode != 401 {
		t.Fatalf("wrong key: %v", err)
	}

	cc := `,"cache_control":{"type":"ephemeral"}`
	for _, tc := range []struct {
		name, body string
		status     int
		typ, msg   string
	}{
		{"no max_tokens", `{"messages":[{"role":"user","content":"q"}]}`, 400, "invalid_request_error", "max_tokens"},
		{"ttl", `{"max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"2h"}}],"messages":[{"role":"user","content":"q"}]}`, 400, "invalid_request_error", "ttl"},
		{"five breakpoints", `{"max_tokens":5,"system":[{"type":"text","text":"a"` + cc + `},{"type":"text","text":"b"` + cc + `}],"messages":[{"role":"user","content":[{"type":"text","text":"c"` + cc + `},{"type":"text","text":"d"` + cc + `},{"type":"text","text":"e"` + cc + `}]}]}`, 400, "invalid_request_error", "maximum of 4"},
		{"unknown tool", `{"max_tokens":5,"tools":[{"name":"a","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"b"},"messages":[{"role":"user","content":"q"}]}`, 400, "invalid_request_error", "not in tools"},
		{"bad block", `{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","id":"x","name":"a","input":{}}]}]}`, 400, "invalid_request_error", "only allowed in assistant"},
		{"role", `{"max_tokens":5,"messages":[{"role":"system","content":"q"}]}`, 400, "invalid_request_error", "role"},
		{"model", `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"q"}]}`, 404, "not_found_error", "claude-x"},
		{"not json", `{`, 400, "invalid_request_error", "not a valid"},
		// As Anthropic: cache_control on a message object, or on a thinking block, is refused.
		{"message cache_control", `{"max_tokens":5,"messages":[{"role":"user","content":"q"` + cc + `}]}`, 400, "invalid_request_error", "messages[0].cache_control: Extra inputs are not permitted"},
		{"thinking cache_control", `{"max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"` + cc + `},{"type":"text","text":"a"}]},{"role":"user","content":"r"}]}`, 400, "invalid_request_error", "messages[1].content[0].thinking.cache_control: Extra inputs are not permitted"},
		{"redacted_thinking cache_control", `{"max_tokens":5,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"redacted_thinking","data":"d"` + cc + `},{"type":"text","text":"a"}]},{"role":"user","content":"r"}]}`, 400, "invalid_request_error", "messages[1].content[0].redacted_thinking.cache_control"},
		{"too large", `{"max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("x", 1<<16) + `"}]}`, 413, "request_too_large", "limit"},
	} {
		rec := do(s.Handler(), "POST", "/v1/messages", tc.body, "x-api-key", "k", "anthropic-version", "2023-06-01")
		e := decode[api.AnthropicErrorBody](t, rec)
		if rec.Code != tc.status || e.Type != "error" || e.Error.Type != tc.typ || !strings.Contains(e.Error.Message, tc.msg) {
			t.Errorf("%s: %d %s", tc.name, rec.Code, rec.Body)
		}
	}
	rec := do(s.Handler(), "POST", "/v1/messages", `{}`)
	if e := decode[api.AnthropicErrorBody](t, rec); rec.Code != 401 || e.Error.Type != "authentication_error" {
		t.Errorf("no key: %d %s", rec.Code, rec.Body)
	}
	s.draining.Store(true)
	rec = do(s.Handler(), "POST", "/v1/messages", `{"max_tokens":5,"messages":[{"role":"user","content":"q"}]}`, "x-api-key", "k")
	if e := decode[api.AnthropicErrorBody](t, rec); rec.Code != 529 || e.Error.Type != "overloaded_error" {
		t.Errorf("draining: %d %s", rec.Code, rec.Body)
	}
}

func TestMessagesThinking(t *testing.T) {
	gen := newFakeGen("<think>\nPlan first.\n</think>\n\nThe answer.")
	s, _ := newTestServerTok(t, gen, thinkTok{}, agentConfig)
	c := anthropicClient(t, s)
	params := anthropic.MessageNewParams{Model: testModel, MaxTokens: 100, Messages: userText("q")}
	msg, err := c.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	check := func(how string, msg anthropic.Message) {
		t.Helper()
		if len(msg.Content) != 2 || msg.Content[0].Type != "thinking" || strings.TrimSpace(msg.Content[0].Thinking) != "Plan first." ||
			msg.Content[1].Type != "text" || strings.TrimSpace(msg.Content[1].Text) != "The answer." || msg.StopReason != "end_turn" {
			t.Errorf("%s: %s", how, msg.RawJSON())
		}
	}
	check("whole", *msg)
	stream := c.Messages.NewStreaming(context.Background(), params)
	var acc anthropic.Message
	thinkingDeltas := 0
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "content_block_delta" && ev.Delta.Type == "thinking_delta" {
			thinkingDeltas++
		}
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	check("streamed", acc)
	if thinkingDeltas == 0 {
		t.Error("no thinking_delta events")
	}

	// A thinking block in the history goes back as the assistant's reasoning.
	hist := append(userText("q"), acc.ToParam(), anthropic.NewUserMessage(anthropic.NewTextBlock("more")))
	if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 10, Messages: hist}); err != nil {
		t.Fatal(err)
	}
}

func TestMessagesStreamError(t *testing.T) {
	gen := newFakeGen("partial")
	gen.block, gen.streamErr = true, errors.New("device lost")
	s, _ := newTestServer(t, gen, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/messages", `{"max_tokens":20,"stream":true,"messages":[{"role":"user","content":"q"}]}`)
	body := rec.Body.String()
	if !strings.Contains(body, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\"") || strings.Contains(body, "message_stop") {
		t.Errorf("stream error: %s", body)
	}
	c := anthropicClient(t, s)
	stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: testModel, MaxTokens: 20, Messages: userText("q")})
	for stream.Next() {
	}
	if stream.Err() == nil {
		t.Error("the client saw no error")
	}
}
