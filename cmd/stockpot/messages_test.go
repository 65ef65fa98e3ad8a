package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// The Anthropic Messages API end to end: Anthropic's own Go client, unchanged, against serve
// with the real engine and the embedded default model (random weights, Qwen2.5's template).

func TestMessagesEndToEnd(t *testing.T) {
	url := agentInstance(t, true)
	c := anthropic.NewClient(option.WithBaseURL(url), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()

	// A long system prompt with a 1h breakpoint, twice: the second reads it from the cache.
	long := strings.Repeat("You are a careful assistant who answers in one short sentence. ", 40)
	params := anthropic.MessageNewParams{MaxTokens: 4,
		System:   []anthropic.TextBlockParam{{Text: long, CacheControl: anthropic.CacheControlEphemeralParam{TTL: anthropic.CacheControlEphemeralTTLTTL1h}}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
	first, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	u1, u2 := first.Usage, second.Usage
	t.Logf("first: input %d, cache read %d, creation %d (5m %d, 1h %d); second: input %d, cache read %d, creation %d",
		u1.InputTokens, u1.CacheReadInputTokens, u1.CacheCreationInputTokens, u1.CacheCreation.Ephemeral5mInputTokens,
		u1.CacheCreation.Ephemeral1hInputTokens, u2.InputTokens, u2.CacheReadInputTokens, u2.CacheCreationInputTokens)
	total := u1.InputTokens + u1.CacheReadInputTokens + u1.CacheCreationInputTokens
	// The first writes the system prompt's blocks to the cache, pinned for 1h; the second
	// reads them (and writes nothing: they are pinned already).
	if u1.CacheCreationInputTokens < total/2 || u1.CacheCreation.Ephemeral1hInputTokens != u1.CacheCreationInputTokens ||
		u1.CacheCreation.Ephemeral5mInputTokens != 0 || u1.CacheReadInputTokens != 0 {
		t.Errorf("first: usage %+v, want the system prompt as 1h cache writes", u1)
	}
	if u2.CacheReadInputTokens < u1.CacheCreationInputTokens || u2.CacheCreationInputTokens != 0 ||
		u2.InputTokens+u2.CacheReadInputTokens+u2.CacheCreationInputTokens != total || u1.OutputTokens == 0 ||
		first.Type != "message" || len(first.Content) == 0 {
		t.Errorf("second: usage %+v, want the first's writes read back", u2)
	}
	if !strings.Contains(second.RawJSON(), `"pinned_tokens":`) {
		t.Errorf("usage.cache lacks pinned_tokens: %s", second.RawJSON())
	}

	// count_tokens counts the same prompt.
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Messages: params.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System}})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens != total {
		t.Errorf("count_tokens %d, the generation's prompt had %d", n.InputTokens, total)
	}

	// A streamed tool-use turn with tool_choice any: the input is valid for the schema.
	schemaText := boundedSchemas[0]
	var schema struct {
		Properties map[string]any `json:"properties"`
		Required   []string       `json:"required"`
	}
	if err := json.Unmarshal([]byte(schemaText), &schema); err != nil {
		t.Fatal(err)
	}
	tool := anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("Weather forecast for a city"),
		InputSchema: anthropic.ToolInputSchemaParam{Properties: schema.Properties, Required: schema.Required,
			ExtraFields: map[string]any{"additionalProperties": false}}}}
	stream := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{MaxTokens: 384,
		Messages:   []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("weather in Paris for 3 days?"))},
		Tools:      []anthropic.ToolUnionParam{tool},
		ToolChoice: anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{DisableParallelToolUse: anthropic.Bool(true)}}})
	var msg anthropic.Message
	deltas := 0
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "content_block_delta" && ev.Delta.Type == "input_json_delta" {
			deltas++
		}
		if err := msg.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != "tool_use" || len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" || deltas == 0 {
		t.Fatalf("streamed turn %s", msg.RawJSON())
	}
	tu := msg.Content[0]
	t.Logf("tool_use input %s in %d input_json_delta events", tu.Input, deltas)
	if err := validateJSON(t, compileSchema(t, schemaText), string(tu.Input)); err != nil || tu.Name != "get_weather" || tu.ID == "" {
		t.Errorf("tool_use %s: %v", tu.RawJSON(), err)
	}

	// An error case: tool_choice names a tool that is not there.
	_, err = c.Messages.New(ctx, anthropic.MessageNewParams{MaxTokens: 4, Messages: params.Messages,
		Tools: []anthropic.ToolUnionParam{tool}, ToolChoice: anthropic.ToolChoiceParamOfTool("nope")})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Error(), "invalid_request_error") || !strings.Contains(ae.Error(), "nope") {
		t.Errorf("unknown tool: %v", err)
	}
}

// TestMessagesPinBudget: with no room for pins, a breakpoint pins nothing (all input, no
// write), and pin_strict turns that into Anthropic's 400 invalid_request_error.
func TestMessagesPinBudget(t *testing.T) {
	_, ts := newTestInstance(t, func(o *serveOptions) {
		o.model, o.engine.KVMemory, o.engine.PinBudget = "synthetic:default", 64<<20, -1 // Qwen2.5's template: a system prompt renders first
	})
	c := anthropic.NewClient(option.WithBaseURL(ts.URL), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{MaxTokens: 2,
		System:   []anthropic.TextBlockParam{{Text: longText(200), CacheControl: anthropic.CacheControlEphemeralParam{TTL: anthropic.CacheControlEphemeralTTLTTL5m}}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello"))}}
	msg, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if u := msg.Usage; u.CacheCreationInputTokens != 0 || !strings.Contains(msg.RawJSON(), `"pinned_tokens":0`) ||
		strings.Contains(msg.RawJSON(), `"pin_requested_tokens":0`) {
		t.Errorf("pins off: usage %s, want no cache writes and pinned_tokens 0", msg.RawJSON())
	}
	_, err = c.Messages.New(ctx, params, option.WithJSONSet("pin_strict", true))
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 || !strings.Contains(ae.Error(), "invalid_request_error") || !strings.Contains(ae.Error(), "pin budget") {
		t.Errorf("strict pin over budget: %v, want a 400 invalid_request_error", err)
	}
}
