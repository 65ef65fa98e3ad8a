package clienttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/respjson"
	"github.com/openai/openai-go/v3/shared"
)

// The two tools of the openai-go loop. Their schemas bound every value (enums, integer
// ranges) so that a random-weight model's forced call ends within a few tokens.
var (
	weatherTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "get_weather",
		Description: openai.String("Weather forecast for a city."),
		Parameters: shared.FunctionParameters{
			"type": "object",
			"properties": map[string]any{
				"city": map[string]any{"type": "string", "enum": []string{"Paris", "Oslo", "Lima", "Cairo"}},
				"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 5},
			},
			"required":             []string{"city", "days"},
			"additionalProperties": false,
		},
	})
	convertTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name:        "convert_temperature",
		Description: openai.String("Convert a Celsius temperature to Fahrenheit or Kelvin."),
		Parameters: shared.FunctionParameters{
			"type": "object",
			"properties": map[string]any{
				"celsius": map[string]any{"type": "integer", "minimum": -40, "maximum": 50},
				"unit":    map[string]any{"type": "string", "enum": []string{"F", "K"}},
			},
			"required":             []string{"celsius", "unit"},
			"additionalProperties": false,
		},
	})
)

// maxTokens must fit a whole forced call: the server's grammar lets bounded JSON whitespace
// (up to a newline and 20 spaces) stand in each slot of the call, and a random-weight model
// takes it, so a two-property call can run to ~200 tokens (the greedy runs here use ~60). A
// call cut short comes back as text, not as a tool call.
const maxTokens = 256

type weatherArgs struct {
	City string `json:"city"`
	Days int    `json:"days"`
}

type convertArgs struct {
	Celsius int    `json:"celsius"`
	Unit    string `json:"unit"`
}

// toolbox runs the tools the model calls and remembers each run.
type toolbox struct {
	runs []string
}

func (b *toolbox) run(name, arguments string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(arguments)))
	dec.DisallowUnknownFields()
	switch name {
	case "get_weather":
		var a weatherArgs
		if err := dec.Decode(&a); err != nil {
			return "", fmt.Errorf("get_weather arguments %s: %w", arguments, err)
		}
		b.runs = append(b.runs, fmt.Sprintf("get_weather(%s, %d)", a.City, a.Days))
		if a.Days < 1 || a.Days > 5 {
			return "", fmt.Errorf("get_weather days %d outside the schema's 1..5", a.Days)
		}
		out, _ := json.Marshal(map[string]any{"city": a.City, "celsius": []int{18, 17, 19, 21, 20}[:a.Days]})
		return string(out), nil
	case "convert_temperature":
		var a convertArgs
		if err := dec.Decode(&a); err != nil {
			return "", fmt.Errorf("convert_temperature arguments %s: %w", arguments, err)
		}
		b.runs = append(b.runs, fmt.Sprintf("convert_temperature(%d, %s)", a.Celsius, a.Unit))
		if a.Unit == "F" {
			return fmt.Sprint(float64(a.Celsius)*9/5 + 32), nil
		}
		return fmt.Sprint(float64(a.Celsius) + 273.15), nil
	}
	return "", fmt.Errorf("no tool %q", name)
}

func newOpenAIClient(t *testing.T, s *server) (openai.Client, *recorder) {
	rec := &recorder{}
	t.Cleanup(func() {
		if t.Failed() {
			for i, ex := range rec.chat() {
				t.Logf("exchange %d: %s %s → %d\n  request:  %s\n  response: %s", i, ex.Method, ex.Path, ex.Status, clip(ex.Request), clip(responseText(ex)))
			}
		}
	})
	return openai.NewClient(
		option.WithBaseURL(s.url+"/v1/"),
		option.WithAPIKey("unused"),
		option.WithMaxRetries(0),
		option.WithMiddleware(rec.middleware),
	), rec
}

// answer is what one chat call gave the client, streamed or not. reasoning is the
// message's reasoning_content (the client keeps it as an extra field, and its accumulator
// drops it from deltas, so a stream's is joined here).
type answer struct {
	msg       openai.ChatCompletionMessage
	finish    string
	usage     openai.CompletionUsage
	reasoning string
}

// extraString is a string field the client does not know, "" when absent or null.
func extraString(fields map[string]respjson.Field, name string) string {
	f, ok := fields[name]
	if !ok {
		return ""
	}
	var s string
	_ = json.Unmarshal([]byte(f.Raw()), &s)
	return s
}

// complete makes one chat call (opts add to the request, as chat_template_kwargs). Streamed, it goes through the client's accumulator, as the
// openai-go docs show, and checks that every chunk was accepted and that each tool call was
// reported finished once.
func complete(t *testing.T, ctx context.Context, client openai.Client, params openai.ChatCompletionNewParams, stream bool, opts ...option.RequestOption) answer {
	t.Helper()
	if !stream {
		c, err := client.Chat.Completions.New(ctx, params, opts...)
		if err != nil {
			t.Fatalf("chat completion: %v", err)
		}
		if len(c.Choices) != 1 {
			t.Fatalf("%d choices", len(c.Choices))
		}
		m := c.Choices[0].Message
		return answer{msg: m, finish: c.Choices[0].FinishReason, usage: c.Usage, reasoning: extraString(m.JSON.ExtraFields, "reasoning_content")}
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	s := client.Chat.Completions.NewStreaming(ctx, params, opts...)
	defer s.Close()
	var acc openai.ChatCompletionAccumulator
	var reasoning strings.Builder
	finished := 0
	for s.Next() {
		chunk := s.Current()
		for _, c := range chunk.Choices {
			reasoning.WriteString(extraString(c.Delta.JSON.ExtraFields, "reasoning_content"))
		}
		if !acc.AddChunk(chunk) {
			t.Errorf("the accumulator rejected a chunk: %s", chunk.RawJSON())
		}
		if _, ok := acc.JustFinishedToolCall(); ok {
			finished++
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("chat stream: %v", err)
	}
	if len(acc.Choices) != 1 {
		t.Fatalf("accumulated %d choices", len(acc.Choices))
	}
	msg := acc.Choices[0].Message
	if finished != len(msg.ToolCalls) {
		t.Errorf("accumulator reported %d finished tool calls, assembled %d", finished, len(msg.ToolCalls))
	}
	return answer{msg: msg, finish: acc.Choices[0].FinishReason, usage: acc.Usage, reasoning: reasoning.String()}
}

// TestOpenAIGoToolLoop: the official Go client runs a tool loop of three turns: tool_choice
// "required", then a named function, each call run and answered with a tool message; then the
// answer (tool_choice "none", or "auto" when streamed).
func TestOpenAIGoToolLoop(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			s := startServer(t)
			client, rec := newOpenAIClient(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			model := firstModel(t, ctx, client)
			params := openai.ChatCompletionNewParams{
				Model: model,
				Messages: []openai.ChatCompletionMessageParamUnion{
					openai.SystemMessage("You plan trips. Use the tools for facts, then answer in one sentence."),
					openai.UserMessage("What will the weather be in Paris over the next three days?"),
				},
				Tools:       []openai.ChatCompletionToolUnionParam{weatherTool, convertTool},
				MaxTokens:   openai.Int(maxTokens),
				Temperature: openai.Float(0),
			}
			var box toolbox
			finalChoice := "none"
			if stream {
				finalChoice = "auto"
			}
			steps := []struct {
				choice openai.ChatCompletionToolChoiceOptionUnionParam
				want   string // the function every call must name; "" for any tool
				then   string // the user's next message
			}{
				{choice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}, then: "And how warm is that in Fahrenheit?"},
				{choice: openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "convert_temperature"}), want: "convert_temperature"},
			}
			for i, step := range steps {
				params.ToolChoice = step.choice
				a := complete(t, ctx, client, params, stream)
				if a.finish != "tool_calls" || len(a.msg.ToolCalls) == 0 {
					t.Fatalf("step %d: finish_reason %q with %d tool calls, want tool_calls; content %q", i, a.finish, len(a.msg.ToolCalls), a.msg.Content)
				}
				params.Messages = append(params.Messages, a.msg.ToParam())
				for _, call := range a.msg.ToolCalls {
					if step.want != "" && call.Function.Name != step.want {
						t.Errorf("step %d: called %q, tool_choice named %q", i, call.Function.Name, step.want)
					}
					out, err := box.run(call.Function.Name, call.Function.Arguments)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					params.Messages = append(params.Messages, openai.ToolMessage(out, call.ID))
				}
				if step.then != "" {
					params.Messages = append(params.Messages, openai.UserMessage(step.then))
				}
			}
			params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String(finalChoice)}
			a := complete(t, ctx, client, params, stream)
			if len(a.msg.ToolCalls) != 0 || (a.finish != "stop" && a.finish != "length") {
				t.Errorf("final answer (tool_choice %s): finish_reason %q, %d tool calls", finalChoice, a.finish, len(a.msg.ToolCalls))
			}
			if a.usage.PromptTokensDetails.CachedTokens == 0 {
				t.Errorf("final answer: the client saw cached_tokens 0 (usage %s)", a.usage.RawJSON())
			}
			t.Logf("tools ran: %v; final answer %q", box.runs, a.msg.Content)
			if len(box.runs) < len(steps) {
				t.Errorf("%d tool runs, want at least %d", len(box.runs), len(steps))
			}
			checkExchanges(t, rec.chat())
		})
	}
}

// TestOpenAIGoPlainChat: two plain turns, non-streamed then streamed (the harness on a
// server without tools).
func TestOpenAIGoPlainChat(t *testing.T) {
	s := startServer(t)
	client, rec := newOpenAIClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	params := openai.ChatCompletionNewParams{
		Model: firstModel(t, ctx, client),
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("You are terse."),
			openai.UserMessage("Name a soup."),
		},
		MaxTokens:   openai.Int(32),
		Temperature: openai.Float(0),
	}
	a := complete(t, ctx, client, params, false)
	params.Messages = append(params.Messages, a.msg.ToParam(), openai.UserMessage("Another one."))
	b := complete(t, ctx, client, params, true)
	if b.usage.PromptTokensDetails.CachedTokens == 0 {
		t.Errorf("second turn: the client saw cached_tokens 0 (usage %s)", b.usage.RawJSON())
	}
	checkExchanges(t, rec.chat())
}

func firstModel(t *testing.T, ctx context.Context, client openai.Client) string {
	t.Helper()
	page, err := client.Models.List(ctx)
	if err != nil {
		t.Fatalf("models: %v", err)
	}
	if len(page.Data) == 0 {
		t.Fatal("no models listed")
	}
	return page.Data[0].ID
}

// TestOpenAIGoErrors: a client's mistakes come back as the OpenAI error the Go client parses
// (*openai.Error with the status, a message and a type), for plain and streamed calls.
func TestOpenAIGoErrors(t *testing.T) {
	s := startServer(t)
	client, _ := newOpenAIClient(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	model := firstModel(t, ctx, client)
	base := func() openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{
			Model:     model,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Lima?")},
			MaxTokens: openai.Int(8),
		}
	}
	cases := []struct {
		name   string
		mutate func(*openai.ChatCompletionNewParams)
		status int
	}{
		{"unknown model", func(p *openai.ChatCompletionNewParams) { p.Model = "gpt-9" }, 404},
		{"tool_choice names a function not in tools", func(p *openai.ChatCompletionNewParams) {
			p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool}
			p.ToolChoice = openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "book_flight"})
		}, 400},
		{"tool_choice required without tools", func(p *openai.ChatCompletionNewParams) {
			p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}
		}, 400},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			p := base()
			tc.mutate(&p)
			var err error
			if stream {
				st := client.Chat.Completions.NewStreaming(ctx, p)
				for st.Next() {
				}
				err = st.Err()
				st.Close()
			} else {
				_, err = client.Chat.Completions.New(ctx, p)
			}
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Errorf("%s (stream=%v): error %v, want an *openai.Error", tc.name, stream, err)
				continue
			}
			if apiErr.StatusCode != tc.status || apiErr.Message == "" || apiErr.Type == "" {
				t.Errorf("%s (stream=%v): status %d, message %q, type %q; want status %d with a message and a type (body %s)",
					tc.name, stream, apiErr.StatusCode, apiErr.Message, apiErr.Type, tc.status, apiErr.RawJSON())
			}
			t.Logf("%s (stream=%v): %d %s: %s", tc.name, stream, apiErr.StatusCode, apiErr.Type, apiErr.Message)
		}
	}
	// The server still serves after the mistakes.
	if a := complete(t, ctx, client, base(), false); a.usage.CompletionTokens == 0 {
		t.Error("no tokens after the bad requests")
	}
}
