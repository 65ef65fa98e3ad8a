package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// A forced call cut short by max_tokens returns what it has in every dialect, streamed or
// not, through each dialect's official client: the call's id and name and the arguments
// written so far, marked as cut (cutcall.go).

// cutTool takes two parameters, so that a cut can fall after a whole one.
var cutParams = map[string]any{"type": "object", "properties": map[string]any{
	"city": map[string]any{"type": "string"}, "unit": map[string]any{"type": "string"}}, "required": []string{"city"}}

const (
	cutCallText = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>"
	cutArgs     = `{"city": "Paris", "unit": "cel` // what max_tokens leaves of the arguments
)

// cutMaxTokens is the max_tokens (the byte-level fake's tokens are bytes) that stops
// cutCallText right after cutArgs.
var cutMaxTokens = strings.Index(cutCallText, cutArgs) + len(cutArgs)

func TestForcedCallCutChat(t *testing.T) {
	// Parallel calls: a whole call, then one cut short.
	two := strings.Replace(cutCallText, "<tool_call>", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>", 1)
	for _, tc := range []struct {
		name, text string
		maxTokens  int
		wantArgs   []string
	}{
		{"one", cutCallText, cutMaxTokens, []string{cutArgs}},
		{"second", two, strings.Index(two, cutArgs) + len(cutArgs), []string{`{"city":"Oslo"}`, cutArgs}},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				s, _ := newTestServer(t, newFakeGen(tc.text), agentConfig)
				ts := httptest.NewServer(s.Handler())
				t.Cleanup(ts.Close)
				client := openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
				params := openai.ChatCompletionNewParams{
					Model:      testModel,
					Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather in Paris?")},
					Tools:      []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "get_weather", Parameters: cutParams})},
					ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")},
					MaxTokens:  openai.Int(int64(tc.maxTokens)),
				}
				var msg openai.ChatCompletionMessage
				var finish string
				if !stream {
					c, err := client.Chat.Completions.New(context.Background(), params)
					if err != nil {
						t.Fatal(err)
					}
					msg, finish = c.Choices[0].Message, c.Choices[0].FinishReason
				} else {
					st := client.Chat.Completions.NewStreaming(context.Background(), params)
					var acc openai.ChatCompletionAccumulator
					for st.Next() {
						if !acc.AddChunk(st.Current()) {
							t.Errorf("the accumulator rejected %s", st.Current().RawJSON())
						}
					}
					if err := st.Err(); err != nil {
						t.Fatal(err)
					}
					msg, finish = acc.Choices[0].Message, acc.Choices[0].FinishReason
				}
				if finish != "length" || msg.Content != "" || len(msg.ToolCalls) != len(tc.wantArgs) {
					t.Fatalf("finish %q, message %s", finish, msg.RawJSON())
				}
				for i, want := range tc.wantArgs {
					c := msg.ToolCalls[i]
					if !strings.HasPrefix(c.ID, "call_") || c.Type != "function" || c.Function.Name != "get_weather" || c.Function.Arguments != want {
						t.Errorf("call %d: %s, want arguments %q", i, c.RawJSON(), want)
					}
				}
			})
		}
	}
}

func TestForcedCallCutResponses(t *testing.T) {
	for _, stream := range []bool{false, true} {
		s, _ := newTestServer(t, newFakeGen(cutCallText), agentConfig)
		client := responsesClient(t, s)
		p := responses.ResponseNewParams{
			Model:           testModel,
			Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
			Tools:           []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", cutParams, false)},
			ToolChoice:      responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
			MaxOutputTokens: openai.Int(int64(cutMaxTokens)),
		}
		r := respond(t, client, p, stream)
		if r.Status != "incomplete" || r.IncompleteDetails.Reason != "max_output_tokens" || len(r.Output) != 1 {
			t.Fatalf("stream=%v: %s", stream, r.RawJSON())
		}
		call := r.Output[0].AsFunctionCall()
		if call.Type != "function_call" || call.Status != "incomplete" || call.CallID == "" || call.Name != "get_weather" || call.Arguments != cutArgs {
			t.Errorf("stream=%v: item %s", stream, r.Output[0].RawJSON())
		}
		// Nothing inside the incomplete response says "completed", streamed events included.
		body := `{"model":"` + testModel + `","input":"weather in Paris?","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}],` +
			`"tool_choice":"required","max_output_tokens":` + fmt.Sprint(cutMaxTokens)
		if stream {
			body += `,"stream":true`
		}
		rec := do(s.Handler(), "POST", "/v1/responses", body+"}")
		if rec.Code != 200 || strings.Contains(rec.Body.String(), `"completed"`) || !strings.Contains(rec.Body.String(), `"incomplete"`) {
			t.Errorf("stream=%v: %d %s", stream, rec.Code, rec.Body)
		}
	}
}

func TestForcedCallCutMessages(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen(cutCallText), agentConfig)
	c := anthropicClient(t, s)
	tool := anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "get_weather",
		InputSchema: anthropic.ToolInputSchemaParam{Properties: cutParams["properties"], Required: []string{"city"}}}}
	params := anthropic.MessageNewParams{Model: testModel, MaxTokens: int64(cutMaxTokens), Messages: userText("weather in Paris?"),
		Tools: []anthropic.ToolUnionParam{tool}, ToolChoice: anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}}

	// Not streamed: the tool_use block with the members that were whole, as Anthropic does.
	msg, err := c.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != "max_tokens" || len(msg.Content) != 1 {
		t.Fatalf("%s", msg.RawJSON())
	}
	tu := msg.Content[0]
	if tu.Type != "tool_use" || !strings.HasPrefix(tu.ID, "toolu_") || tu.Name != "get_weather" || string(tu.Input) != `{"city":"Paris"}` {
		t.Errorf("tool_use %s", tu.RawJSON())
	}

	// Streamed: the block opens with its id and name, and its input_json_delta events carry
	// the arguments as far as they got.
	stream := c.Messages.NewStreaming(context.Background(), params)
	var acc anthropic.Message
	var partial strings.Builder
	for stream.Next() {
		ev := stream.Current()
		if ev.Type == "content_block_delta" && ev.Delta.Type == "input_json_delta" {
			partial.WriteString(ev.Delta.PartialJSON)
		}
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.StopReason != "max_tokens" || len(acc.Content) != 1 || acc.Content[0].Type != "tool_use" ||
		!strings.HasPrefix(acc.Content[0].ID, "toolu_") || acc.Content[0].Name != "get_weather" || partial.String() != cutArgs {
		t.Errorf("streamed %s, input_json_delta %q", acc.RawJSON(), partial.String())
	}
	var whole map[string]any
	if json.Unmarshal([]byte(`{"city":"Paris"}`), &whole) != nil {
		t.Fatal("bad fixture")
	}
}
