package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"stockpot/internal/api"
)

var weatherParams = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
	"required": []string{"city"}}

func responsesClient(t *testing.T, s *Server) openai.Client {
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return openai.NewClient(option.WithBaseURL(ts.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
}

// respond runs one turn, streamed or not, and returns the final response as the client
// sees it; streamed, it also checks the event order and that the deltas add up.
func respond(t *testing.T, client openai.Client, p responses.ResponseNewParams, stream bool) *responses.Response {
	t.Helper()
	ctx := context.Background()
	if !stream {
		r, err := client.Responses.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	st := client.Responses.NewStreaming(ctx, p)
	var types []string
	var text, args strings.Builder
	var final *responses.Response
	seq := int64(-1)
	for st.Next() {
		e := st.Current()
		types = append(types, e.Type)
		if e.SequenceNumber != seq+1 {
			t.Errorf("sequence_number %d after %d", e.SequenceNumber, seq)
		}
		seq = e.SequenceNumber
		switch e.Type {
		case "response.output_text.delta":
			text.WriteString(e.Delta)
		case "response.function_call_arguments.delta":
			args.WriteString(e.Delta)
		case "response.function_call_arguments.done":
			if e.Arguments != args.String() {
				t.Errorf("arguments.done %q, deltas %q", e.Arguments, args.String())
			}
			args.Reset() // the next call's deltas start afresh
		case "response.output_text.done":
			if e.Text != text.String() {
				t.Errorf("output_text.done %q, deltas %q", e.Text, text.String())
			}
		case "response.completed", "response.incomplete":
			r := e.Response
			final = &r
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(types) < 4 || types[0] != "response.created" || types[1] != "response.in_progress" || final == nil {
		t.Fatalf("events %v", types)
	}
	return final
}

func TestResponsesFunctionCallRoundTrip(t *testing.T) {
	for _, stream := range []bool{false, true} {
		gen := newFakeGen(hermesCall)
		s, _ := newTestServer(t, gen, agentConfig)
		client := responsesClient(t, s)
		p := responses.ResponseNewParams{
			Model:        testModel,
			Instructions: openai.String("be brief"),
			Input:        responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
			Tools:        []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", weatherParams, true)},
			ToolChoice: responses.ResponseNewParamsToolChoiceUnion{
				OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)},
			MaxOutputTokens: openai.Int(200),
		}
		r := respond(t, client, p, stream)
		if r.Status != "completed" || len(r.Output) != 1 || r.Output[0].Type != "function_call" {
			t.Fatalf("stream=%v: first turn %s", stream, r.RawJSON())
		}
		call := r.Output[0].AsFunctionCall()
		var args map[string]string
		if call.CallID == "" || call.Name != "get_weather" || json.Unmarshal([]byte(call.Arguments), &args) != nil || args["city"] != "Paris" {
			t.Fatalf("stream=%v: call %s", stream, r.Output[0].RawJSON())
		}
		if r.Usage.InputTokens == 0 || r.Usage.TotalTokens != r.Usage.InputTokens+r.Usage.OutputTokens {
			t.Errorf("usage %s", r.Usage.RawJSON())
		}
		// tool_choice required: the call is constrained by the tools' grammar.
		if gen.lastRequest().Sampling.Constraint == nil {
			t.Error("tool_choice required did not constrain the output")
		}

		// The client sends the call and its output back, statelessly.
		gen.text = "It is sunny in Paris."
		p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsAuto)}
		p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("weather in Paris?", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
			responses.ResponseInputItemParamOfFunctionCallOutput[string](`{"forecast":"sunny"}`),
		}}
		p.Input.OfInputItemList[2].OfFunctionCallOutput.CallID = openai.String(call.CallID)
		r = respond(t, client, p, stream)
		if r.Status != "completed" || r.OutputText() != "It is sunny in Paris." || r.Output[0].Type != "message" {
			t.Fatalf("stream=%v: final turn %s", stream, r.RawJSON())
		}
		prompt := fakeTok{}.Decode(gen.lastRequest().Prompt)
		for _, want := range []string{"<|system|>be brief", `<|tool|>{"forecast":"sunny"}<result ` + call.CallID, `{"type":"function","function":{"name":"get_weather"`, "Paris"} {
			if !strings.Contains(prompt, want) {
				t.Errorf("stream=%v: prompt lacks %q: %q", stream, want, prompt)
			}
		}
		if gen.lastRequest().Sampling.Constraint != nil {
			t.Error("tool_choice auto constrained the output")
		}
	}
}

func TestResponsesPreviousResponseID(t *testing.T) {
	gen := newFakeGen("first answer")
	s, _ := newTestServer(t, gen, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/responses", `{"input":"remember me","max_output_tokens":50}`)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	first := decode[api.Response](t, rec)
	if !strings.HasPrefix(first.ID, "resp_") || first.Object != "response" || first.OutputText != "first answer" {
		t.Fatalf("first %s", rec.Body)
	}
	gen.text = "second"
	rec = do(s.Handler(), "POST", "/v1/responses", `{"input":"and now?","previous_response_id":"`+first.ID+`","store":false}`)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	second := decode[api.Response](t, rec)
	prompt := fakeTok{}.Decode(gen.lastRequest().Prompt)
	if !strings.Contains(prompt, "remember me") || !strings.Contains(prompt, "first answer") || !strings.Contains(prompt, "and now?") {
		t.Errorf("the earlier turn was not prepended: %q", prompt)
	}
	// store:false: the second cannot be continued.
	rec = do(s.Handler(), "POST", "/v1/responses", `{"input":"x","previous_response_id":"`+second.ID+`"}`)
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "previous_response_id") {
		t.Errorf("unstored id: %d %s", rec.Code, rec.Body)
	}
}

func TestResponsesIncompleteAndFormat(t *testing.T) {
	gen := newFakeGen("a long answer that is cut")
	s, _ := newTestServer(t, gen, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/responses", `{"input":"q","max_output_tokens":3}`)
	r := decode[api.Response](t, rec)
	if r.Status != "incomplete" || r.IncompleteDetails == nil || r.IncompleteDetails.Reason != "max_output_tokens" || r.Usage.OutputTokens != 3 {
		t.Errorf("cut response %s", rec.Body)
	}
	gen.text = `{"a":1}`
	rec = do(s.Handler(), "POST", "/v1/responses", `{"input":"q","text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object","properties":{"a":{"type":"integer"}}},"strict":true}}}`)
	if rec.Code != 200 || gen.lastRequest().Sampling.Constraint == nil {
		t.Errorf("json_schema format: %d %s", rec.Code, rec.Body)
	}
}

func TestResponsesErrors(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), agentConfig)
	for _, tc := range []struct {
		body   string
		status int
		param  string
	}{
		{`{}`, 400, "input"},
		{`{"input":5}`, 400, "input"},
		{`{"input":[{"type":"image","role":"user"}]}`, 400, "input[0].type"},
		{`{"input":[{"role":"robot","content":"x"}]}`, 400, "input[0].role"},
		{`{"input":[{"role":"user","content":[{"type":"input_image"}]}]}`, 400, "input[0].content[0].type"},
		{`{"input":[{"type":"function_call_output","call_id":"nope","output":"x"}]}`, 400, "input[0].tool_call_id"},
		{`{"input":"q","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, 400, "tool_choice"},
		{`{"input":"q","tools":[{"type":"web_search"}]}`, 400, "tools[0].type"},
		{`{"input":"q","max_output_tokens":0}`, 400, "max_output_tokens"},
		{`{"input":"q","text":{"format":{"type":"yaml"}}}`, 400, "text.format.type"},
		{`{"input":"q","model":"other"}`, 404, "model"},
		{`{"input":"q","previous_response_id":"resp_missing"}`, 404, "previous_response_id"},
	} {
		rec := do(s.Handler(), "POST", "/v1/responses", tc.body)
		var e api.ErrorBody
		if rec.Code != tc.status || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Param == nil || !strings.HasPrefix(*e.Error.Param, tc.param) {
			t.Errorf("%s: %d %s", tc.body, rec.Code, rec.Body)
		}
	}
}

func TestResponsesTextThenCall(t *testing.T) {
	for _, stream := range []bool{false, true} {
		s, _ := newTestServer(t, newFakeGen(hermesCall), agentConfig)
		client := responsesClient(t, s)
		r := respond(t, client, responses.ResponseNewParams{
			Model: testModel,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
			Tools: []responses.ToolUnionParam{responses.ToolParamOfFunction("get_weather", weatherParams, false)},
		}, stream)
		if len(r.Output) != 2 || r.Output[0].Type != "message" || r.OutputText() != "Let me check." ||
			r.Output[1].Type != "function_call" || r.Output[1].AsFunctionCall().Arguments != `{"city":"Paris"}` {
			t.Errorf("stream=%v: %s", stream, r.RawJSON())
		}
	}
}

func TestResponsesReasoning(t *testing.T) {
	for _, stream := range []bool{false, true} {
		s, _ := newTestServerTok(t, newFakeGen("<think>hmm</think>the answer"), thinkTok{}, agentConfig)
		r := respond(t, responsesClient(t, s), responses.ResponseNewParams{Model: testModel,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("q")}}, stream)
		if len(r.Output) != 2 || r.Output[0].Type != "reasoning" || r.Output[1].Type != "message" || r.OutputText() != "the answer" {
			t.Errorf("stream=%v: %s", stream, r.RawJSON())
		}
		if rs := r.Output[0].AsReasoning(); len(rs.Content) != 1 || rs.Content[0].Text != "hmm" {
			t.Errorf("stream=%v: reasoning %s", stream, r.Output[0].RawJSON())
		}
	}
}

func TestResponsesStreamError(t *testing.T) {
	gen := newFakeGen("partial")
	gen.block, gen.streamErr = true, errors.New("engine broke")
	s, _ := newTestServer(t, gen, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/responses", `{"input":"q","stream":true}`)
	body := rec.Body.String()
	if !strings.Contains(body, "event: response.created") || !strings.Contains(body, "event: error\ndata: ") || strings.Contains(body, "response.completed") {
		t.Errorf("stream error: %s", body)
	}
	// Not stored: a failed response cannot be continued.
	var created struct {
		Response api.Response `json:"response"`
	}
	first := strings.SplitN(strings.SplitN(body, "data: ", 2)[1], "\n", 2)[0]
	if err := json.Unmarshal([]byte(first), &created); err != nil {
		t.Fatal(err)
	}
	if rec := do(s.Handler(), "POST", "/v1/responses", `{"input":"q","previous_response_id":"`+created.Response.ID+`"}`); rec.Code != 404 {
		t.Errorf("failed response was stored: %d", rec.Code)
	}
}

// TestResponsesStoreBudgetHTTP: through /v1/responses, a response larger than the whole
// store is not kept, and naming it later is the 404 that says why; the store's bytes stay
// within --responses-store-bytes over many turns.
func TestResponsesStoreBudgetHTTP(t *testing.T) {
	const budget = 2048
	s, _ := newTestServer(t, newFakeGen("ok"), func(c *Config) { agentConfig(c); c.ResponsesStoreBytes = budget })
	h := s.Handler()
	var ids []string
	for i := range 40 {
		text := strings.Repeat("w", 100+i*40) // the last ones are over the whole budget
		rec := do(h, "POST", "/v1/responses", `{"input":"`+text+`"}`)
		if rec.Code != 200 {
			t.Fatalf("turn %d: %d %s", i, rec.Code, rec.Body)
		}
		ids = append(ids, decode[api.Response](t, rec).ID)
		if _, bytes := s.responses.Usage(); bytes > budget {
			t.Fatalf("turn %d: the store holds %d bytes, over its %d", i, bytes, budget)
		}
	}
	rec := do(h, "POST", "/v1/responses", `{"input":"more","previous_response_id":"`+ids[len(ids)-1]+`"}`)
	if rec.Code != 404 || !strings.Contains(rec.Body.String(), "previous_response_not_found") || !strings.Contains(rec.Body.String(), "--responses-store-bytes") {
		t.Errorf("a response over the budget: %d %s", rec.Code, rec.Body)
	}
	// A negative budget keeps none; the default keeps them.
	s, _ = newTestServer(t, newFakeGen("ok"), func(c *Config) { agentConfig(c); c.ResponsesStoreBytes = -1 })
	id := decode[api.Response](t, do(s.Handler(), "POST", "/v1/responses", `{"input":"q"}`)).ID
	if rec := do(s.Handler(), "POST", "/v1/responses", `{"input":"q","previous_response_id":"`+id+`"}`); rec.Code != 404 {
		t.Errorf("store of none: %d %s", rec.Code, rec.Body)
	}
}

// TestResponsesHugeCallID: the probe's shape, a function_call with a huge call_id, is a 400
// naming the field and stores nothing.
func TestResponsesHugeCallID(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("ok"), func(c *Config) { agentConfig(c); c.MaxBodyBytes = 16 << 20 })
	callID := strings.Repeat("c", 7_500_000)
	body := `{"input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"` + callID + `","name":"f","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"` + callID + `","output":"r"}]}`
	rec := do(s.Handler(), "POST", "/v1/responses", body)
	if rec.Code != 400 {
		t.Fatalf("have %d, want 400", rec.Code)
	}
	e := decode[api.ErrorBody](t, rec)
	if e.Error.Param == nil || *e.Error.Param != "input[1].call_id" || e.Error.Code == nil || *e.Error.Code != "string_above_max_length" {
		t.Errorf("error %+v", e.Error)
	}
	if rec.Body.Len() > 1024 {
		t.Errorf("the error is %d bytes", rec.Body.Len())
	}
	if n, _ := s.responses.Usage(); n != 0 {
		t.Errorf("%d responses stored", n)
	}
}
