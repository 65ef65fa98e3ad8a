package clienttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

// Kimi-K3 end to end: the tiny-kimi-k3 preset (Kimi's BPE vocabulary with Kimi-K3's
// control tokens <|open|>, <|sep|>, <|close|> and <|end_of_msg|>, and its real chat
// template), synthesized by the binary under test and served by it, driven by openai-go
// (chat completions and Responses) and anthropic-sdk-go (Messages), unchanged.
//
// Random weights write no tool syntax by themselves, so calls are forced (tool_choice
// required or a named function, Anthropic's any and tool) and structured answers
// constrained (response_format json_schema, Responses' text.format). Constrained decoding
// writes them in Kimi-K3's own markup (the think channel the prompt opened closed at once,
// JSON inside the response channel, calls after it, the message closed), so what comes
// back shows the server parsed that markup: tool calls with arguments valid against their
// schema, content that is exactly the JSON document, no reasoning and none of the tags.
// Unconstrained turns show the channels: with thinking on (the template's default) the
// generation starts in the think channel, and what a random model writes there is
// reasoning, not content; with chat_template_kwargs thinking=false it starts in the
// response channel and is content, never reasoning.

// startKimiK3 synthesizes tiny-kimi-k3 with the binary under test and serves it.
func startKimiK3(t *testing.T) *server {
	t.Helper()
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	path := filepath.Join(t.TempDir(), "tiny-kimi-k3.gguf")
	if out, err := exec.Command(binPath, "model", "synth", "--preset", "tiny-kimi-k3", "--out", path).CombinedOutput(); err != nil {
		t.Fatalf("stockpot model synth --preset tiny-kimi-k3: %v\n%s", err, out)
	}
	return startServer(t, "--model", path)
}

// k3Markup are texts of Kimi-K3's markup that must never reach a client of a constrained
// turn, raw or JSON-escaped.
var k3Markup = []string{"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", `\u003c|`, `|\u003e`}

func checkNoMarkup(t *testing.T, how string, body []byte) {
	t.Helper()
	for _, m := range k3Markup {
		if bytes.Contains(body, []byte(m)) {
			t.Errorf("%s: Kimi-K3 markup %q reached the client: %s", how, m, clip(body))
		}
	}
}

// personSchema is a json_schema response format whose every value is bounded, so that a
// random model's constrained answer ends within max_tokens.
var personSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"city":   map[string]any{"type": "string", "enum": []string{"Paris", "Oslo", "Lima"}},
		"rating": map[string]any{"type": "integer", "minimum": 1, "maximum": 5},
		"sunny":  map[string]any{"type": "boolean"},
	},
	"required":             []string{"city", "rating", "sunny"},
	"additionalProperties": false,
}

// checkDocument: content is one JSON object valid against personSchema.
func checkDocument(t *testing.T, how, content string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(content), &v); err != nil {
		t.Errorf("%s: content %q is not JSON: %v", how, content, err)
		return
	}
	for _, e := range validate(personSchema, v, "content") {
		t.Errorf("%s: %s (content %s)", how, e, content)
	}
}

// TestKimiK3OpenAIGoToolLoop: openai-go's agent loop against a served Kimi-K3 model: a
// required call, a named call (after the tool results went back through the template,
// answered by id), then a structured answer; plain and streamed (through the
// accumulator). Every exchange is checked against the OpenAI wire format and for cache
// reuse across turns, and none carries Kimi-K3's markup or a reasoning the model did not
// write.
func TestKimiK3OpenAIGoToolLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			s := startKimiK3(t)
			client, rec := newOpenAIClient(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			params := openai.ChatCompletionNewParams{
				Model: firstModel(t, ctx, client),
				Messages: []openai.ChatCompletionMessageParamUnion{
					openai.SystemMessage("You plan trips. Use the tools for facts."),
					openai.UserMessage("What will the weather be in Paris over the next three days?"),
				},
				Tools:       []openai.ChatCompletionToolUnionParam{weatherTool, convertTool},
				MaxTokens:   openai.Int(maxTokens),
				Temperature: openai.Float(0),
			}
			var box toolbox
			for i, choice := range []openai.ChatCompletionToolChoiceOptionUnionParam{
				{OfAuto: openai.String("required")},
				openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "convert_temperature"}),
			} {
				params.ToolChoice = choice
				a := complete(t, ctx, client, params, stream)
				if a.finish != "tool_calls" || len(a.msg.ToolCalls) == 0 || a.msg.Content != "" || a.reasoning != "" {
					t.Fatalf("step %d: finish %q, %d calls, content %q, reasoning %q", i, a.finish, len(a.msg.ToolCalls), a.msg.Content, a.reasoning)
				}
				params.Messages = append(params.Messages, a.msg.ToParam())
				for _, call := range a.msg.ToolCalls {
					out, err := box.run(call.Function.Name, call.Function.Arguments)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					params.Messages = append(params.Messages, openai.ToolMessage(out, call.ID))
				}
			}
			params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
			params.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "report", Schema: personSchema, Strict: openai.Bool(true)}}}
			a := complete(t, ctx, client, params, stream)
			if a.finish != "stop" || len(a.msg.ToolCalls) != 0 || a.reasoning != "" {
				t.Errorf("structured answer: finish %q, %d calls, reasoning %q", a.finish, len(a.msg.ToolCalls), a.reasoning)
			}
			checkDocument(t, "structured answer", a.msg.Content)
			t.Logf("tools ran: %v; answer %s", box.runs, a.msg.Content)
			for i, ex := range rec.chat() {
				checkNoMarkup(t, fmt.Sprintf("exchange %d", i), responseText(ex))
			}
			checkExchanges(t, rec.chat())
		})
	}
}

// TestKimiK3OpenAIGoChannels: unconstrained turns through openai-go. With thinking on,
// the generation starts in the think channel: what the model writes is reasoning_content
// (a random model hardly ever closes the channel); with thinking=false it starts in the
// response channel and comes back as content, with no reasoning at all. A
// thinking_effort the template refuses is a 400 quoting it.
func TestKimiK3OpenAIGoChannels(t *testing.T) {
	s := startKimiK3(t)
	client, rec := newOpenAIClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model:       firstModel(t, ctx, client),
		Messages:    []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		MaxTokens:   openai.Int(24),
		Temperature: openai.Float(0),
	}
	for _, stream := range []bool{false, true} {
		a := complete(t, ctx, client, params, stream)
		if a.usage.CompletionTokens == 0 {
			t.Fatalf("thinking on (stream=%v): no tokens generated", stream)
		}
		if r := a.reasoning; r == "" || a.msg.Content != "" {
			t.Errorf("thinking on (stream=%v): reasoning %q, content %q; want the think channel as reasoning", stream, r, a.msg.Content)
		}
		off := complete(t, ctx, client, params, stream, option.WithJSONSet("chat_template_kwargs", map[string]any{"thinking": false}))
		if r := off.reasoning; r != "" || off.msg.Content == "" {
			t.Errorf("thinking off (stream=%v): reasoning %q, content %q; want content only", stream, r, off.msg.Content)
		}
	}
	_, err := client.Chat.Completions.New(ctx, params, option.WithJSONSet("chat_template_kwargs", map[string]any{"thinking_effort": "medium"}))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "Unsupported thinking_effort=medium") {
		t.Errorf("thinking_effort medium: %v, want a 400 quoting the template", err)
	}
	// Each turn is a fresh one-message chat, not a continuation: checked one by one.
	for i, ex := range rec.chat() {
		if ex.Status != 200 {
			continue
		}
		for _, p := range checkTurn(parseTurn(ex)) {
			t.Errorf("turn %d: %s\n  request:  %s\n  response: %s", i, p, clip(ex.Request), clip(responseText(ex)))
		}
	}
}

// TestKimiK3Anthropic: anthropic-sdk-go's tool loop through /v1/messages: tool_choice any,
// then a named tool after the tool_result went back, plain and streamed (through the SDK's
// accumulator); the tool_use inputs are valid, no thinking block comes from a constrained
// answer, and no markup reaches the client. An unconstrained turn's think channel comes back
// as a thinking block.
func TestKimiK3Anthropic(t *testing.T) {
	s := startKimiK3(t)
	rec := &recorder{}
	client := anthropic.NewClient(anthropicoption.WithBaseURL(s.url), anthropicoption.WithAPIKey("unused"), anthropicoption.WithMaxRetries(0),
		anthropicoption.WithMiddleware(rec.middleware),
		anthropicoption.WithJSONSet("temperature", 0)) // greedy, as the other tests: every run the same
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	oc, _ := newOpenAIClient(t, s)
	model := firstModel(t, ctx, oc)
	tools := []anthropic.ToolUnionParam{
		{OfTool: &anthropic.ToolParam{Name: "get_weather", Description: anthropic.String("Weather forecast for a city."),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: weatherTool.OfFunction.Function.Parameters["properties"], Required: []string{"city", "days"}}}},
		{OfTool: &anthropic.ToolParam{Name: "convert_temperature", Description: anthropic.String("Convert Celsius."),
			InputSchema: anthropic.ToolInputSchemaParam{Properties: convertTool.OfFunction.Function.Parameters["properties"], Required: []string{"celsius", "unit"}}}},
	}
	// send makes one Messages call; the exchange as recorded below the SDK is checked for
	// markup when the answer was constrained (an unconstrained random model may write
	// anything, markup-like text included).
	send := func(p anthropic.MessageNewParams, stream, constrained bool) anthropic.Message {
		t.Helper()
		if constrained {
			defer func() {
				rec.mu.Lock()
				ex := rec.exchanges[len(rec.exchanges)-1]
				rec.mu.Unlock()
				checkNoMarkup(t, fmt.Sprintf("messages stream=%v", stream), responseText(ex))
			}()
		}
		if !stream {
			m, err := client.Messages.New(ctx, p)
			if err != nil {
				t.Fatalf("messages: %v", err)
			}
			return *m
		}
		st := client.Messages.NewStreaming(ctx, p)
		var m anthropic.Message
		for st.Next() {
			if err := m.Accumulate(st.Current()); err != nil {
				t.Fatalf("accumulate: %v", err)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatalf("messages stream: %v", err)
		}
		return m
	}
	for _, stream := range []bool{false, true} {
		p := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: maxTokens, Tools: tools,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Weather in Paris for three days?"))}}
		var box toolbox
		for i, choice := range []anthropic.ToolChoiceUnionParam{
			{OfAny: &anthropic.ToolChoiceAnyParam{}},
			anthropic.ToolChoiceParamOfTool("convert_temperature"),
		} {
			p.ToolChoice = choice
			m := send(p, stream, true)
			var results []anthropic.ContentBlockParamUnion
			for _, b := range m.Content {
				switch b.Type {
				case "tool_use":
					out, err := box.run(b.Name, string(b.Input))
					if err != nil {
						t.Fatalf("stream=%v step %d: %v", stream, i, err)
					}
					results = append(results, anthropic.NewToolResultBlock(b.ID, out, false))
				case "thinking":
					t.Errorf("stream=%v step %d: a thinking block from a constrained answer: %q", stream, i, b.Thinking)
				case "text":
					if b.Text != "" {
						t.Errorf("stream=%v step %d: text %q beside forced calls", stream, i, b.Text)
					}
				}
			}
			if m.StopReason != "tool_use" || len(results) == 0 {
				t.Fatalf("stream=%v step %d: stop_reason %q, %d tool_use blocks: %s", stream, i, m.StopReason, len(results), m.RawJSON())
			}
			p.Messages = append(p.Messages, m.ToParam(), anthropic.NewUserMessage(results...))
		}
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfNone: &anthropic.ToolChoiceNoneParam{}}
		p.MaxTokens = 24
		m := send(p, stream, false)
		if len(m.Content) == 0 || m.Content[0].Type != "thinking" || m.Content[0].Thinking == "" {
			t.Errorf("stream=%v unconstrained: want the think channel as a thinking block: %s", stream, m.RawJSON())
		}
		t.Logf("stream=%v: tools ran %v", stream, box.runs)
	}
}

// TestKimiK3Responses: openai-go's Responses client: a required call, the function call and
// its output sent back, then a structured answer (text.format json_schema); plain and
// streamed. Function calls come back as function_call items with valid arguments, the
// answer as one output_text that is the JSON document, with no reasoning item and no markup.
func TestKimiK3Responses(t *testing.T) {
	s := startKimiK3(t)
	client, _ := newOpenAIClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	model := firstModel(t, ctx, client)
	tools := []responses.ToolUnionParam{
		{OfFunction: &responses.FunctionToolParam{Name: "get_weather", Parameters: weatherTool.OfFunction.Function.Parameters, Strict: openai.Bool(true)}},
	}
	for _, stream := range []bool{false, true} {
		input := responses.ResponseInputParam{responses.ResponseInputItemParamOfMessage("Weather in Oslo for two days?", responses.EasyInputMessageRoleUser)}
		p := responses.ResponseNewParams{Model: model, Tools: tools, MaxOutputTokens: openai.Int(maxTokens), Temperature: openai.Float(0),
			ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
			Input:      responses.ResponseNewParamsInputUnion{OfInputItemList: input}}
		r := respondK3(t, ctx, client, p, stream)
		var box toolbox
		for _, it := range r.Output {
			switch it.Type {
			case "function_call":
				fc := it.AsFunctionCall()
				out, err := box.run(fc.Name, fc.Arguments)
				if err != nil {
					t.Fatalf("stream=%v: %v", stream, err)
				}
				output := responses.ResponseInputItemParamOfFunctionCallOutput(out)
				output.OfFunctionCallOutput.CallID = openai.String(fc.CallID)
				input = append(input, responses.ResponseInputItemParamOfFunctionCall(fc.Arguments, fc.CallID, fc.Name), output)
			default:
				t.Errorf("stream=%v: %s item beside a required call: %s", stream, it.Type, it.RawJSON())
			}
		}
		if len(box.runs) == 0 {
			t.Fatalf("stream=%v: no function_call: %s", stream, r.RawJSON())
		}
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: input}
		p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsNone)}
		p.Text = responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
			OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "report", Schema: personSchema, Strict: openai.Bool(true)}}}
		r = respondK3(t, ctx, client, p, stream)
		if len(r.Output) != 1 || r.Output[0].Type != "message" {
			t.Fatalf("stream=%v: structured answer items: %s", stream, r.RawJSON())
		}
		checkDocument(t, fmt.Sprintf("stream=%v structured answer", stream), r.OutputText())
		t.Logf("stream=%v: tools ran %v; answer %s", stream, box.runs, r.OutputText())
	}
}

// respondK3 makes one Responses call, streamed or not, returns the final response and
// checks that no event or body carried Kimi-K3's markup.
func respondK3(t *testing.T, ctx context.Context, client openai.Client, p responses.ResponseNewParams, stream bool) *responses.Response {
	t.Helper()
	if !stream {
		r, err := client.Responses.New(ctx, p)
		if err != nil {
			t.Fatalf("responses: %v", err)
		}
		checkNoMarkup(t, "response", []byte(r.RawJSON()))
		return r
	}
	st := client.Responses.NewStreaming(ctx, p)
	var final *responses.Response
	for st.Next() {
		ev := st.Current()
		checkNoMarkup(t, "response event "+ev.Type, []byte(ev.RawJSON()))
		if ev.Type == "response.completed" || ev.Type == "response.incomplete" {
			r := ev.Response
			final = &r
		}
	}
	if err := st.Err(); err != nil {
		t.Fatalf("responses stream: %v", err)
	}
	if final == nil {
		t.Fatal("responses stream: no final response")
	}
	return final
}
