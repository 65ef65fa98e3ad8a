package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// The Responses API against the real engine and the embedded default model, with the
// official openai-go client: a required call comes back with arguments valid against the
// tool's schema, its output goes back statelessly, and the second turn reads the first
// turn's prefix from the cache.
func TestResponsesRoundTrip(t *testing.T) {
	url := agentInstance(t, true)
	client := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	schema := boundedSchemas[0]
	compiled := compileSchema(t, schema)
	var params map[string]any
	if err := json.Unmarshal([]byte(schema), &params); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, stream := range []bool{false, true} {
		run := func(p responses.ResponseNewParams) *responses.Response {
			t.Helper()
			if !stream {
				r, err := client.Responses.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				return r
			}
			st := client.Responses.NewStreaming(ctx, p)
			var final *responses.Response
			for st.Next() {
				if e := st.Current(); e.Type == "response.completed" || e.Type == "response.incomplete" {
					r := e.Response
					final = &r
				}
			}
			if err := st.Err(); err != nil || final == nil {
				t.Fatalf("stream: %v, final %v", err, final)
			}
			return final
		}
		user := "stream " + map[bool]string{false: "off", true: "on"}[stream] + ": what is the weather in Oslo for three days?"
		p := responses.ResponseNewParams{
			Instructions:    openai.String("You are a weather assistant. Use the tools."),
			Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String(user)},
			Tools:           []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", params, true)},
			ToolChoice:      responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
			MaxOutputTokens: openai.Int(384),
			Temperature:     openai.Float(0),
		}
		r := run(p)
		if r.Status != "completed" || len(r.Output) == 0 || r.Output[0].Type != "function_call" {
			t.Fatalf("stream=%v: first turn %s", stream, r.RawJSON())
		}
		firstInput := r.Usage.InputTokens
		call := r.Output[0].AsFunctionCall()
		if call.Name != "get_weather" || call.CallID == "" {
			t.Fatalf("stream=%v: call %s", stream, r.Output[0].RawJSON())
		}
		if err := validateJSON(t, compiled, call.Arguments); err != nil {
			t.Fatalf("stream=%v: arguments %s: %v", stream, call.Arguments, err)
		}

		out := responses.ResponseInputItemParamOfFunctionCallOutput[string](`{"forecast":"snow","high_c":-3}`)
		out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage(user, responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
			out,
		}}
		p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsNone)}
		p.MaxOutputTokens = openai.Int(16)
		r = run(p)
		if len(r.Output) != 1 || r.Output[0].Type != "message" || (r.Status != "completed" && r.Status != "incomplete") {
			t.Fatalf("stream=%v: final turn %s", stream, r.RawJSON())
		}
		// The first turn's prompt is a prefix of the second's, up to its last (partial or
		// generation-prompt) blocks: the cache serves it.
		cached := r.Usage.InputTokensDetails.CachedTokens
		if cached <= 0 || cached > r.Usage.InputTokens || cached < firstInput-2*16 {
			t.Errorf("stream=%v: second turn cached %d of %d input tokens (first turn had %d)", stream, cached, r.Usage.InputTokens, firstInput)
		}
		t.Logf("stream=%v: call %s, first turn %d input tokens, second turn cached %d of %d", stream, call.Arguments, firstInput, cached, r.Usage.InputTokens)
	}
}
