package server

import (
	"encoding/json"
	"strings"
	"testing"

	"stockpot/internal/api"
)

// thinkTok is fakeTok with a template that knows think blocks.
type thinkTok struct{ fakeTok }

func (thinkTok) ChatTemplate(bool) string { return fakeTemplate + "{{ '<think>' }}{{ '</think>' }}" }

const weatherTools = `[{"type":"function","function":{"name":"get_weather","description":"forecast",
	"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`

const hermesCall = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"

// agentConfig leaves room for tool schemas in the byte-level fake's prompts.
func agentConfig(c *Config) {
	c.ContextLength, c.MaxPromptTokens, c.MaxBodyBytes = 4096, 4000, 1<<16
}

func chatBody(extra string) string {
	return `{"messages":[{"role":"user","content":"weather in Paris?"}],"max_tokens":200` + extra + `}`
}

func TestChatToolCall(t *testing.T) {
	gen := newFakeGen(hermesCall)
	s, _ := newTestServer(t, gen, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+weatherTools))
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	resp := decode[api.ChatCompletionResponse](t, rec)
	c := resp.Choices[0]
	if *c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
		t.Fatalf("choice %s", rec.Body)
	}
	tc := c.Message.ToolCalls[0]
	var args map[string]string
	if tc.Type != "function" || tc.ID == "" || tc.Function.Name != "get_weather" || json.Unmarshal([]byte(tc.Function.Arguments), &args) != nil || args["city"] != "Paris" {
		t.Errorf("tool call %+v", tc)
	}
	if c.Message.Content == nil || *c.Message.Content != "Let me check." {
		t.Errorf("content before the call: %s", rec.Body)
	}
	// The tools reached the template, exactly as sent.
	prompt := fakeTok{}.Decode(gen.lastRequest().Prompt)
	if !strings.Contains(prompt, `"name":"get_weather","description":"forecast"`) {
		t.Errorf("prompt lacks the tools: %q", prompt)
	}

	// tool_choice none: the same text is plain content.
	rec = do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+weatherTools+`,"tool_choice":"none"`))
	resp = decode[api.ChatCompletionResponse](t, rec)
	if c := resp.Choices[0]; *c.FinishReason != "stop" || len(c.Message.ToolCalls) != 0 || *c.Message.Content != hermesCall {
		t.Errorf("tool_choice none: %s", rec.Body)
	}
}

func TestChatBrokenToolCallIsContent(t *testing.T) {
	for _, text := range []string{
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par", // cut off
		"<tool_call>\n{name: get_weather}\n</tool_call>",                           // not JSON
	} {
		s, _ := newTestServer(t, newFakeGen(text), agentConfig)
		rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+weatherTools))
		resp := decode[api.ChatCompletionResponse](t, rec)
		c := resp.Choices[0]
		if len(c.Message.ToolCalls) != 0 || c.Message.Content == nil || *c.Message.Content != text || *c.FinishReason == "tool_calls" {
			t.Errorf("%q: %s", text, rec.Body)
		}
		// Streamed: the same text comes back as content, and no tool_calls delta at all.
		rec = do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+weatherTools+`,"stream":true`))
		content, calls, finish := collectChat(t, rec.Body.String())
		if content != text || len(calls) != 0 || finish == "tool_calls" {
			t.Errorf("streamed %q: content %q calls %v finish %q", text, content, calls, finish)
		}
	}
}

// collectChat reassembles a streamed chat answer: content, the tool calls by index (arguments
// concatenated), and the finish reason.
func collectChat(t *testing.T, body string) (string, map[int]*api.ToolCall, string) {
	t.Helper()
	events := sseEvents(t, body)
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q", events)
	}
	var content strings.Builder
	calls := map[int]*api.ToolCall{}
	finish := ""
	for _, ev := range events[:len(events)-1] {
		var c api.ChatCompletionChunk
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		if len(c.Choices) == 0 {
			continue
		}
		d := c.Choices[0].Delta
		if d.Content != nil {
			content.WriteString(*d.Content)
		}
		for _, tc := range d.ToolCalls {
			if tc.Index == nil {
				t.Fatalf("tool call delta without index: %s", ev)
			}
			have, ok := calls[*tc.Index]
			if !ok {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" {
					t.Fatalf("first delta of call %d lacks id, type or name: %s", *tc.Index, ev)
				}
				cp := tc
				calls[*tc.Index] = &cp
				continue
			}
			if tc.ID != "" || tc.Function.Name != "" {
				t.Errorf("later delta of call %d repeats id or name: %s", *tc.Index, ev)
			}
			have.Function.Arguments += tc.Function.Arguments
		}
		if f := c.Choices[0].FinishReason; f != nil {
			finish = *f
		}
	}
	return content.String(), calls, finish
}

func TestChatToolCallStream(t *testing.T) {
	two := hermesCall + "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo \\\"N\\\" ☃\"}}\n</tool_call>"
	for _, per := range []int{1, 3, 64} {
		gen := newFakeGen(two)
		gen.perOutput = per
		s, _ := newTestServer(t, gen, agentConfig)
		rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+weatherTools+`,"stream":true`))
		content, calls, finish := collectChat(t, rec.Body.String())
		if finish != "tool_calls" || len(calls) != 2 || strings.TrimSpace(content) != "Let me check." {
			t.Fatalf("per %d: content %q calls %d finish %q\n%s", per, content, len(calls), finish, rec.Body)
		}
		for i, want := range []string{"Paris", "Oslo \"N\" ☃"} {
			var args map[string]string
			if err := json.Unmarshal([]byte(calls[i].Function.Arguments), &args); err != nil || args["city"] != want {
				t.Errorf("per %d: call %d arguments %q (%v)", per, i, calls[i].Function.Arguments, err)
			}
		}
		if calls[0].ID == calls[1].ID {
			t.Errorf("calls share id %q", calls[0].ID)
		}
	}
}

func TestChatReasoning(t *testing.T) {
	gen := newFakeGen("<think>\nPlan first.\n</think>\n\nThe answer.")
	s, _ := newTestServerTok(t, gen, thinkTok{}, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(""))
	resp := decode[api.ChatCompletionResponse](t, rec)
	m := resp.Choices[0].Message
	if m.ReasoningContent == nil || strings.TrimSpace(*m.ReasoningContent) != "Plan first." || m.Content == nil || strings.TrimSpace(*m.Content) != "The answer." {
		t.Errorf("reasoning split: %s", rec.Body)
	}
}

func TestChatToolHistoryReachesTemplate(t *testing.T) {
	gen := newFakeGen("ok")
	s, _ := newTestServer(t, gen, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"q"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},
		{"role":"tool","tool_call_id":"call_9","content":"sunny"}],"tools":`+weatherTools+`}`)
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	prompt := fakeTok{}.Decode(gen.lastRequest().Prompt)
	for _, want := range []string{`<call call_9 get_weather {"city":"Rome"}>`, "<|tool|>sunny<result call_9>"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt %q lacks %q", prompt, want)
		}
	}
}

func TestChatToolErrors(t *testing.T) {
	gen := newFakeGen("ok")
	s, _ := newTestServer(t, gen, agentConfig)
	for _, tc := range []struct{ body, param string }{
		{chatBody(`,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer","multipleOf":3}}}}}],"tool_choice":"required"`), "tools[0].function.parameters"},
		{chatBody(`,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer","multipleOf":3}}}}}`), "response_format.json_schema.schema"},
		{chatBody(`,"tools":[{"type":"function"}]`), "tools[0].function"},
		{chatBody(`,"tools":` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"nope"}}`), "tool_choice"},
	} {
		rec := do(s.Handler(), "POST", "/v1/chat/completions", tc.body)
		if rec.Code != 400 {
			t.Errorf("%s: %d %s", tc.body, rec.Code, rec.Body)
			continue
		}
		e := decode[api.ErrorBody](t, rec)
		if e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Errorf("%s: param %v, want %q (%s)", tc.body, e.Error.Param, tc.param, rec.Body)
		}
	}
	// The server keeps serving.
	if rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody("")); rec.Code != 200 {
		t.Errorf("after errors: %d %s", rec.Code, rec.Body)
	}
}

func TestChatConstraintReachesEngine(t *testing.T) {
	gen := newFakeGen(`{"a": 1}`)
	s, _ := newTestServer(t, gen, agentConfig)
	rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"response_format":{"type":"json_object"}`))
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	c := gen.lastRequest().Sampling.Constraint
	if c == nil {
		t.Fatal("json_object: no constraint on the engine request")
	}
	// Drive the constraint with the fake vocabulary: {"a": 1} is allowed, token by token.
	mask := make([]uint64, (fakeVocab+63)/64)
	for _, id := range (fakeTok{}).Encode(`{"a": 1}`, false, false) {
		c.FillMask(mask)
		if mask[id/64]&(1<<(id%64)) == 0 {
			t.Fatalf("token %q not allowed", rune(id-2))
		}
		if err := c.Accept(id); err != nil {
			t.Fatal(err)
		}
	}
	if !c.Complete() {
		t.Error("a whole object is not complete")
	}
	// Without response_format or required tools nothing is constrained.
	do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+weatherTools))
	if gen.lastRequest().Sampling.Constraint != nil {
		t.Error("tool_choice auto is constrained")
	}
}

// mistralTok is fakeTok with Mistral's [TOOL_CALLS] as control token 258 and a template
// that shows the Mistral syntax.
type mistralTok struct{ fakeTok }

const mistralMarker = 258

func (mistralTok) VocabSize() int { return fakeVocab + 1 }
func (mistralTok) ChatTemplate(bool) string {
	return "{%- if message.tool_calls %}[TOOL_CALLS][{% for tc in message.tool_calls %}{{ tc.function | tojson }}{% endfor %}]{% endif %}"
}
func (t mistralTok) Piece(id int32) []byte {
	if id == mistralMarker {
		return []byte("[TOOL_CALLS]")
	}
	return t.fakeTok.Piece(id)
}
func (t mistralTok) IsControl(id int32) bool { return id == mistralMarker || t.fakeTok.IsControl(id) }

// A call marker that is a control token reaches the parser as its text, so the call is
// parsed; and the constrained grammar may use that token.
func TestChatControlTokenCall(t *testing.T) {
	gen := newFakeGen("")
	gen.ids = append([]int32{mistralMarker}, fakeTok{}.Encode(`[{"name": "get_weather", "arguments": {"city": "Paris"}}]`, false, false)...)
	gen.ids = append(gen.ids, fakeEOS)
	s, _ := newTestServerTok(t, gen, mistralTok{}, agentConfig)
	for _, stream := range []bool{false, true} {
		body := chatBody(`,"tools":` + weatherTools)
		if stream {
			body = chatBody(`,"tools":` + weatherTools + `,"stream":true`)
		}
		rec := do(s.Handler(), "POST", "/v1/chat/completions", body)
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		var calls int
		var finish string
		if stream {
			_, cs, f := collectChat(t, rec.Body.String())
			calls, finish = len(cs), f
		} else {
			resp := decode[api.ChatCompletionResponse](t, rec)
			calls, finish = len(resp.Choices[0].Message.ToolCalls), *resp.Choices[0].FinishReason
		}
		if calls != 1 || finish != "tool_calls" {
			t.Errorf("stream %v: %d calls, finish %q: %s", stream, calls, finish, rec.Body)
		}
	}
	// Without tools the control token is not text (as before).
	rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(""))
	resp := decode[api.ChatCompletionResponse](t, rec)
	if c := *resp.Choices[0].Message.Content; strings.Contains(c, "[TOOL_CALLS]") {
		t.Errorf("control text without tools: %q", c)
	}
	// The required-call grammar may start with the marker token.
	do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+weatherTools+`,"tool_choice":"required"`))
	c := gen.lastRequest().Sampling.Constraint
	if c == nil {
		t.Fatal("no constraint")
	}
	mask := make([]uint64, (fakeVocab+1+63)/64)
	c.FillMask(mask)
	if mask[mistralMarker/64]&(1<<(mistralMarker%64)) == 0 {
		t.Error("[TOOL_CALLS] control token not allowed at the start of a required call")
	}
}

// A forced call cut short by max_tokens is neither content nor a call: the markup never
// reaches the client as text.
func TestForcedCallCutByLength(t *testing.T) {
	gen := newFakeGen("<tool_call>\n{\"name\": \"get_weather\", \"argu")
	gen.block = false
	s, _ := newTestServer(t, gen, agentConfig)
	for _, stream := range []string{"", `,"stream":true`} {
		rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+weatherTools+`,"tool_choice":"required","max_tokens":10`+stream))
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "tool_call\\u003e") || strings.Contains(rec.Body.String(), "\\u003ctool_call") {
			t.Errorf("markup leaked as content: %s", rec.Body)
		}
		if !strings.Contains(rec.Body.String(), `"finish_reason":"length"`) {
			t.Errorf("finish reason: %s", rec.Body)
		}
	}
}

func TestAllowedTools(t *testing.T) {
	two := `[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
		{"type":"function","function":{"name":"get_time"}}]`
	gen := newFakeGen(hermesCall)
	s, _ := newTestServer(t, gen, agentConfig)
	// get_weather is in the prompt but not allowed: its call text stays content.
	rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+two+
		`,"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"get_time"}}]}}`))
	resp := decode[api.ChatCompletionResponse](t, rec)
	if len(resp.Choices[0].Message.ToolCalls) != 0 || !strings.Contains(*resp.Choices[0].Message.Content, "get_weather") {
		t.Errorf("call of a tool not allowed: %s", rec.Body)
	}
	if p := (fakeTok{}).Decode(gen.lastRequest().Prompt); !strings.Contains(p, "get_weather") {
		t.Errorf("every tool stays in the prompt: %q", p)
	}
	// required over the allowed subset: the grammar admits get_time only.
	do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"tools":`+two+
		`,"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"get_time"}}]}}`))
	c := gen.lastRequest().Sampling.Constraint
	if c == nil {
		t.Fatal("no constraint")
	}
	accept := func(text string) error {
		for _, id := range (fakeTok{}).Encode(text, false, false) {
			if err := c.Accept(id); err != nil {
				return err
			}
		}
		return nil
	}
	if err := accept("<tool_call>\n{\"name\": \"get_w"); err == nil {
		t.Error("the grammar admits a tool that is not allowed")
	}
}
