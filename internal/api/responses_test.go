package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

var responsesSeeds = []string{
	`{"model":"m","input":"hello","instructions":"be brief","max_output_tokens":64,"temperature":0.2,"top_p":0.9,"stream":true}`,
	`{"input":[{"role":"user","content":"w?"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},"strict":true}],"tool_choice":"required","parallel_tool_calls":false}`,
	`{"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"x"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"y"}]},{"type":"reasoning","summary":[]}],"text":{"format":{"type":"json_schema","name":"o","schema":{"type":"object"},"strict":true}}}`,
	`{"input":"x","tools":[{"type":"function","name":"g"}],"tool_choice":{"type":"function","name":"g"},"store":false}`,
	`{"input":"x","text":{"format":{"type":"json_object"}},"previous_response_id":"resp_1"}`,
	`{"input":[{"type":"function_call_output","call_id":"c9","output":[{"type":"input_text","text":"r"}]}]}`,
	`{"input":"hi","prompt_cache_retention":"24h","pin_strict":true}`,
	`{"input":"hi","prompt_cache_retention":"never"}`,
	`{"input":[{"role":"user","content":[{"type":"input_text","text":"doc","blend":true},{"type":"input_text","text":"q"}]},{"role":"user","content":"d2","blend":true}],"blend":{"recompute":0.3,"policy":"cacheblend"}}`,
}

func TestResponsesToChat(t *testing.T) {
	r, err := ParseResponsesRequest([]byte(responsesSeeds[1]))
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.ChatRequest([]ResponsesItem{{Type: ItemMessage, Role: "user", Text: "earlier"}, {Type: ItemMessage, Role: "assistant", Text: "sure"}})
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{}
	for _, m := range c.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "user,assistant,user,assistant,tool" {
		t.Fatalf("roles %v", roles)
	}
	if a := c.Messages[3]; a.HasText || len(a.Calls) != 1 || a.Calls[0].ID != "c1" || a.Calls[0].Function.Arguments != `{"a":1}` {
		t.Errorf("assistant call message %+v", a)
	}
	if m := c.Messages[4]; m.ToolCallID != "c1" || m.Text != "ok" {
		t.Errorf("tool message %+v", m)
	}
	if len(c.ParsedTools) != 1 || c.ParsedTools[0].Name != "f" || !c.ParsedTools[0].Strict || c.ParsedToolChoice.Mode != ToolChoiceRequired || c.ParallelCalls() {
		t.Errorf("tools %+v choice %+v", c.ParsedTools, c.ParsedToolChoice)
	}
	if !strings.HasPrefix(string(c.ParsedTools[0].Raw), `{"type":"function","function":{"name":"f","description":"d","parameters":`) {
		t.Errorf("template tool %s", c.ParsedTools[0].Raw)
	}

	// An assistant message and the calls right after it are one turn; instructions lead.
	r, _ = ParseResponsesRequest([]byte(`{"instructions":"sys","input":[{"role":"user","content":"q"},{"role":"assistant","content":"let me see"},
		{"type":"function_call","call_id":"a","name":"f","arguments":"{}"},{"type":"function_call","call_id":"b","name":"f","arguments":"{}"},
		{"type":"function_call_output","call_id":"a","output":"1"},{"type":"function_call_output","call_id":"b","output":"2"}],
		"tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"f"},"text":null,"max_output_tokens":9}`))
	c, err = r.ChatRequest(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Messages) != 5 || c.Messages[0].Role != "system" || c.Messages[2].Text != "let me see" || len(c.Messages[2].Calls) != 2 {
		t.Errorf("messages %+v", c.Messages)
	}
	if c.ParsedToolChoice.Mode != ToolChoiceFunction || c.ParsedToolChoice.Name != "f" || *c.RequestedMaxTokens() != 9 {
		t.Errorf("choice %+v", c.ParsedToolChoice)
	}

	// allowed_tools in the Responses shape (mode and tools at the top level, tools by name).
	r, _ = ParseResponsesRequest([]byte(`{"input":"x","tools":[{"type":"function","name":"f"},{"type":"function","name":"g"}],
		"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"function","name":"g"}]}}`))
	if c, err = r.ChatRequest(nil); err != nil || c.ParsedToolChoice.Mode != ToolChoiceRequired || len(c.ParsedToolChoice.Allowed) != 1 || c.ParsedToolChoice.Allowed[0] != "g" {
		t.Errorf("allowed_tools %+v %v", c.ParsedToolChoice, err)
	}

	r, _ = ParseResponsesRequest([]byte(responsesSeeds[2]))
	if c, err = r.ChatRequest(nil); err != nil || c.Format == nil || c.Format.Type != FormatJSONSchema || !c.Format.Strict || c.Format.Name != "o" {
		t.Errorf("format %+v %v", c, err)
	}
}

func TestResponsesRequestErrors(t *testing.T) {
	for _, tc := range []struct{ body, param string }{
		{`[]`, ""},
		{`{"input":{}}`, "input"},
		{`{"input":[]}`, "input"},
		{`{"input":[1]}`, "input[0]"},
		{`{"input":[{"type":"function_call","name":"f"}]}`, "input[0].call_id"},
		{`{"input":[{"type":"function_call","call_id":"c","name":"bad name"}]}`, "input[0].name"},
		{`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{"}]}`, "input[0].arguments"},
		{`{"input":[{"type":"function_call_output","output":"x"}]}`, "input[0].call_id"},
		{`{"input":[{"role":"user"}]}`, "input[0].content"},
		{`{"input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text"},
		{`{"input":"x","max_output_tokens":-1}`, "max_output_tokens"},
	} {
		_, err := ParseResponsesRequest([]byte(tc.body))
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || e.Param != tc.param {
			t.Errorf("%s: %v", tc.body, err)
		}
	}
	for _, tc := range []struct{ body, param string }{
		{`{"input":"x","tools":{}}`, "tools"},
		{`{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"mcp"}}`, "tool_choice"},
		{`{"input":"x","text":{"format":{"type":"json_schema","name":"o","schema":[]}}}`, "text.format"},
		{`{"input":"x","temperature":9}`, "temperature"},
		{`{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"nope"}]}}`, "tool_choice.allowed_tools.tools[0]"},
		{`{"input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"allowed_tools","mode":"often","tools":[{"type":"function","name":"f"}]}}`, "tool_choice.allowed_tools.mode"},
		{`{"input":[{"type":"function_call_output","call_id":"zz","output":"x"}]}`, "input[0].tool_call_id"},
	} {
		r, err := ParseResponsesRequest([]byte(tc.body))
		if err == nil {
			_, err = r.ChatRequest(nil)
		}
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || !strings.HasPrefix(e.Param, tc.param) {
			t.Errorf("%s: %v", tc.body, err)
		}
	}
}

// TestResponsesBlendMarks: "blend": true on an input message or its input_text parts, and
// the top-level blend object, reach the chat request as chat's marks, named as input names
// them (instructions and earlier turns do not shift the index); earlier turns' marks are not
// replayed; bad marks are 400s naming them.
func TestResponsesBlendMarks(t *testing.T) {
	r, err := ParseResponsesRequest([]byte(`{"instructions":"sys","input":[
		{"role":"user","content":[{"type":"input_text","text":"doc one","blend":true},{"type":"input_text","text":"doc two","blend":true},{"type":"input_text","text":"q?"}]},
		{"type":"message","role":"user","content":"doc three","blend":true}],"blend":{"recompute":0.3,"policy":"cacheblend"}}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := r.ChatRequest([]ResponsesItem{{Type: ItemMessage, Role: "user", Text: "earlier"}, {Type: ItemMessage, Role: "assistant", Text: "ok"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []BlendMark{{Param: "input[0].content[0]", Message: 3, Text: "doc one"}, {Param: "input[0].content[1]", Message: 3, Text: "doc two"},
		{Param: "input[1]", Message: 4, Text: "doc three"}}
	if len(c.BlendMarks) != len(want) {
		t.Fatalf("marks %+v, want %+v", c.BlendMarks, want)
	}
	for i := range want {
		if c.BlendMarks[i] != want[i] {
			t.Errorf("mark %d: have %+v, want %+v", i, c.BlendMarks[i], want[i])
		}
	}
	if m := c.Messages[3]; m.Text != "doc one\ndoc two\nq?" {
		t.Errorf("marked message text %q, want the parts joined as unmarked ones are", m.Text)
	}
	if bp := c.BlendParams; bp == nil || bp.Recompute == nil || *bp.Recompute != 0.3 || bp.Policy != "cacheblend" {
		t.Errorf("blend params %+v", bp)
	}
	// The same items as an earlier turn: replayed without marks.
	r2, _ := ParseResponsesRequest([]byte(`{"input":"next?"}`))
	if c, err = r2.ChatRequest(r.Items); err != nil || len(c.BlendMarks) != 0 || c.Messages[0].Text != "doc one\ndoc two\nq?" {
		t.Errorf("replayed: marks %+v, err %v", c.BlendMarks, err)
	}

	for _, tc := range []struct{ body, param string }{
		{`{"input":[{"role":"user","content":"x","blend":"yes"}]}`, "input[0].blend"},
		{`{"input":[{"role":"user","content":[{"type":"input_text","text":"x","blend":1}]}]}`, "input[0].content[0].blend"},
		{`{"input":[{"role":"user","content":[{"type":"input_text","text":"","blend":true}]}]}`, "input[0].content[0].blend"},
		{`{"input":[{"role":"user","content":[{"type":"input_text","text":"x","blend":true}],"blend":true}]}`, "input[0].blend"},
		{`{"input":[{"role":"user","content":"","blend":true}]}`, "input[0].blend"},
		{`{"input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x","blend":true}]}]}`, "input[0].output[0].blend"},
	} {
		_, err := ParseResponsesRequest([]byte(tc.body))
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || e.Param != tc.param {
			t.Errorf("%s: %v, want a 400 naming %s", tc.body, err, tc.param)
		}
	}
	// A blend object with nothing marked is chat's 400.
	r, _ = ParseResponsesRequest([]byte(`{"input":"x","blend":{"recompute":0.5}}`))
	var e *Error
	if _, err := r.ChatRequest(nil); !errors.As(err, &e) || e.Status != 400 || e.Param != "blend" {
		t.Errorf("blend without marks: %v", err)
	}
}

func TestItemsOf(t *testing.T) {
	args := `{"a":1}`
	items := ItemsOf([]ResponseItem{
		{Type: ItemReasoning, ID: "rs"},
		{Type: ItemMessage, Content: []ResponseContent{{Type: "output_text", Text: "hi"}}},
		{Type: ItemFunctionCall, CallID: "c", Name: "f", Arguments: &args},
	})
	b, _ := json.Marshal(items)
	want := `[{"Type":"message","Role":"assistant","Text":"hi","CallID":"","Name":"","Arguments":"","Output":""},{"Type":"function_call","Role":"","Text":"","CallID":"c","Name":"f","Arguments":"{\"a\":1}","Output":""}]`
	if string(b) != want {
		t.Errorf("items %s", b)
	}
}

func FuzzResponsesRequest(f *testing.F) {
	for _, s := range responsesSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseResponsesRequest(body)
		if err != nil {
			checkParsed(t, nil, err)
			return
		}
		if len(r.PreviousResponseID) > MaxIDBytes {
			t.Fatalf("previous_response_id of %d bytes accepted", len(r.PreviousResponseID))
		}
		for _, it := range r.Items {
			switch it.Type {
			case ItemMessage:
				if _, ok := responsesRoles[it.Role]; !ok {
					t.Fatalf("role %q accepted", it.Role)
				}
			case ItemFunctionCall:
				if it.CallID == "" || len(it.CallID) > MaxIDBytes || !json.Valid([]byte(it.Arguments)) {
					t.Fatalf("call %+v accepted", it)
				}
			case ItemFunctionCallOutput:
				if it.CallID == "" || len(it.CallID) > MaxIDBytes {
					t.Fatalf("output with call_id of %d bytes accepted", len(it.CallID))
				}
			default:
				t.Fatalf("item type %q kept", it.Type)
			}
		}
		c, err := r.ChatRequest(r.Items)
		if err != nil {
			checkParsed(t, nil, err)
			return
		}
		checkParsed(t, &c.GenerationParams, nil)
	})
}
