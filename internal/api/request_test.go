package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func TestParseCompletionPrompt(t *testing.T) {
	for _, tc := range []struct {
		body     string
		text     string
		tokens   []int32
		isTokens bool
	}{
		{`{"prompt":"hello"}`, "hello", nil, false},
		{`{"prompt":["hello"]}`, "hello", nil, false},
		{`{"prompt":[1,2,3]}`, "", []int32{1, 2, 3}, true},
		{`{"prompt":[[4,5]]}`, "", []int32{4, 5}, true},
		{`{"prompt":[7.0]}`, "", []int32{7}, true},
		{`{"prompt":"x","unknown_field":{"a":[1]}}`, "x", nil, false},
	} {
		r, err := ParseCompletionRequest([]byte(tc.body))
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if r.PromptText != tc.text || !reflect.DeepEqual(r.PromptTokens, tc.tokens) || r.PromptIsTokens != tc.isTokens {
			t.Errorf("%s: have text %q tokens %v, want %q %v", tc.body, r.PromptText, r.PromptTokens, tc.text, tc.tokens)
		}
	}
}

func TestParseCompletionErrors(t *testing.T) {
	for _, tc := range []struct {
		body, param, msg string
	}{
		{``, "", "empty"},
		{`[]`, "", "JSON object"},
		{`"x"`, "", "JSON object"},
		{`{"prompt":"x"`, "", "malformed JSON"},
		{`{"prompt":"x"} trailing`, "", "JSON"},
		{`{}`, "prompt", "required"},
		{`{"prompt":null}`, "prompt", "required"},
		{`{"prompt":""}`, "prompt", "empty"},
		{`{"prompt":[]}`, "prompt", "empty"},
		{`{"prompt":[[]]}`, "prompt", "empty"},
		{`{"prompt":[""]}`, "prompt", "empty"},
		{`{"prompt":["a","b"]}`, "prompt", "batched"},
		{`{"prompt":[[1],[2]]}`, "prompt", "batched"},
		{`{"prompt":[1,"a"]}`, "prompt", "prompt[1]"},
		{`{"prompt":[1.5]}`, "prompt", "not a valid token id"},
		{`{"prompt":[-1]}`, "prompt", "not a valid token id"},
		{`{"prompt":[1e12]}`, "prompt", "not a valid token id"},
		{`{"prompt":5}`, "prompt", "string or an array"},
		{`{"prompt":{"a":1}}`, "prompt", "string or an array"},
		{`{"prompt":"x","max_tokens":"16"}`, "max_tokens", "wrong type"},
		{`{"prompt":"x","max_tokens":-1}`, "max_tokens", "at least 1"},
		{`{"prompt":"x","max_tokens":0}`, "max_tokens", "at least 1"},
		{`{"prompt":"x","max_tokens":1e30}`, "max_tokens", "wrong type"},
		{`{"prompt":"x","max_tokens":2.5}`, "max_tokens", "wrong type"},
		{`{"prompt":"x","temperature":-0.1}`, "temperature", "between 0 and 2"},
		{`{"prompt":"x","temperature":2.5}`, "temperature", "between 0 and 2"},
		{`{"prompt":"x","temperature":"hot"}`, "temperature", "wrong type"},
		{`{"prompt":"x","top_p":0}`, "top_p", "(0, 1]"},
		{`{"prompt":"x","top_p":1.1}`, "top_p", "(0, 1]"},
		{`{"prompt":"x","top_k":-2}`, "top_k", "top_k"},
		{`{"prompt":"x","seed":"x"}`, "seed", "wrong type"},
		{`{"prompt":"x","stop":5}`, "stop", "string or an array"},
		{`{"prompt":"x","stop":[1]}`, "stop", "string or an array"},
		{`{"prompt":"x","stop":["a","b","c","d","e"]}`, "stop", "at most 4"},
		{`{"prompt":"x","stop":[""]}`, "stop", "stop[0] is an empty string"},
		{`{"prompt":"x","stop":["a",""]}`, "stop", "stop[1] is an empty string"},
		{`{"prompt":"x","stop":""}`, "stop", "empty string"},
		{`{"prompt":"x","top_k":1000000000000}`, "top_k", "up to 1048576"},
		{`{"prompt":"x","top_k":1e12}`, "top_k", "wrong type"},
		{`{"prompt":"x","cache_salt":"` + strings.Repeat("s", 257) + `"}`, "cache_salt", "257 bytes, over the limit of 256"},
		{`{"prompt":"x","stop_token_ids":[` + strings.Repeat("9,", 1024) + `9]}`, "stop_token_ids", "at most 1024"},
		{`{"prompt":"x","stream":"yes"}`, "stream", "wrong type"},
		{`{"prompt":"x","stream_options":{"include_usage":1}}`, "stream_options.include_usage", "wrong type"},
		{`{"prompt":"x","logprobs":21}`, "logprobs", "between 0 and 20"},
		{`{"prompt":"x","logprobs":-1}`, "logprobs", "between 0 and 20"},
		{`{"prompt":"x","logprobs":true}`, "logprobs", "wrong type"},
		{`{"prompt":"x","echo":true}`, "echo", "not supported"},
		{`{"prompt":"x","n":2}`, "n", "n=2 is not supported"},
		{`{"prompt":"x","n":0}`, "n", "must be 1"},
		{`{"prompt":"x","best_of":3}`, "best_of", "not supported"},
		{`{"prompt":"x","presence_penalty":0.5}`, "presence_penalty", "not supported"},
		{`{"prompt":"x","logit_bias":{"5":1}}`, "logit_bias", "not supported"},
		{`{"prompt":"x","suffix":"y"}`, "suffix", "not supported"},
		{`{"prompt":"x","stop_token_ids":[-3]}`, "stop_token_ids", "non-negative"},
		{`{"prompt":"x","model":7}`, "model", "wrong type"},
	} {
		_, err := ParseCompletionRequest([]byte(tc.body))
		checkErr(t, tc.body, err, tc.param, tc.msg)
	}
}

func checkErr(t *testing.T, body string, err error, param, msg string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("%s: got %v, want *Error", body, err)
		return
	}
	if e.Status != http.StatusBadRequest || e.Type != TypeInvalidRequest {
		t.Errorf("%s: status %d type %s, want 400 invalid_request_error", body, e.Status, e.Type)
	}
	if e.Param != param || !strings.Contains(e.Message, msg) {
		t.Errorf("%s: have param %q message %q; want param %q message containing %q", body, e.Param, e.Message, param, msg)
	}
}

func TestParseCompletionFields(t *testing.T) {
	r, err := ParseCompletionRequest([]byte(`{"model":"m","prompt":"p","max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":-1,
		"seed":-7,"stop":["a","b"],"stream":true,"stream_options":{"include_usage":true},"logprobs":3,"n":1,"cache_salt":"s",
		"return_token_ids":true,"ignore_eos":true,"stop_token_ids":[9],"presence_penalty":0,"max_tokens_extra":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if *r.MaxTokens != 5 || *r.Temperature != 0.5 || *r.TopP != 0.9 || *r.TopK != -1 || *r.Seed != -7 ||
		!reflect.DeepEqual(r.StopStrings, []string{"a", "b"}) || !r.IncludeUsage() || *r.Logprobs != 3 ||
		r.CacheSalt != "s" || !r.ReturnTokenIDs || !r.IgnoreEOS || r.StopTokenIDs[0] != 9 || r.Model != "m" {
		t.Errorf("fields not decoded: %+v", r)
	}
	r, err = ParseCompletionRequest([]byte(`{"prompt":"p","stop":"x","stream_options":{"include_usage":true}}`))
	if err != nil || !reflect.DeepEqual(r.StopStrings, []string{"x"}) || r.IncludeUsage() {
		t.Errorf("stop string or include_usage without stream: %+v %v", r, err)
	}
}

// TestInvalidUTF8Replaced: invalid UTF-8 and lone surrogate escapes in strings are accepted
// and become U+FFFD (encoding/json's decoding, and llama.cpp's server does the same), in the
// prompt and in messages alike; doc.go says so.
func TestInvalidUTF8Replaced(t *testing.T) {
	r, err := ParseCompletionRequest([]byte("{\"prompt\":\"a\xff\xfeb\\ud800c\\udfffd\\ud83d\\ude00\"}"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "a\uFFFD\uFFFDb\uFFFDc\uFFFDd\U0001F600"; r.PromptText != want {
		t.Errorf("prompt %q, want %q", r.PromptText, want)
	}
	c, err := ParseChatRequest([]byte("{\"messages\":[{\"role\":\"user\",\"content\":\"x\xc3\\udc00\"}]}"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "x\uFFFD\uFFFD"; c.Messages[0].Text != want {
		t.Errorf("message %q, want %q", c.Messages[0].Text, want)
	}
	cap256 := strings.Repeat("é", MaxCacheSaltBytes/2)
	if _, err := ParseCompletionRequest([]byte(`{"prompt":"x","cache_salt":"` + cap256 + `"}`)); err != nil {
		t.Errorf("a cache_salt of exactly %d bytes: %v", MaxCacheSaltBytes, err)
	}
}

func TestParseChat(t *testing.T) {
	r, err := ParseChatRequest([]byte(`{"messages":[{"role":"developer","content":"sys"},
		{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
		{"role":"assistant","content":null}],"logprobs":true,"top_logprobs":2,"max_completion_tokens":9,"max_tokens":3,
		"tools":[],"response_format":{"type":"text"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"system:sys", "user:a\nb", "assistant:"}
	for i, m := range r.Messages {
		if got := m.Role + ":" + m.Text; got != want[i] {
			t.Errorf("message %d = %q, want %q", i, got, want[i])
		}
	}
	if !r.WantLogprobs() || r.NumTopLogprobs() != 2 || *r.RequestedMaxTokens() != 9 || !r.GenerationPrompt() {
		t.Errorf("fields: %+v", r)
	}
}

func TestParseChatTools(t *testing.T) {
	r, err := ParseChatRequest([]byte(`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"weather?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":[{"type":"text","text":"sunny"}]},
		{"role":"assistant","content":"It is sunny.","reasoning_content":"easy"}],
		"tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"strict":true}}],
		"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false,
		"response_format":{"type":"text"},"chat_template_kwargs":{"enable_thinking":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.ParsedTools) != 1 || r.ParsedTools[0].Name != "get_weather" || !r.ParsedTools[0].Strict || r.ParsedTools[0].Description != "d" {
		t.Errorf("tools: %+v", r.ParsedTools)
	}
	if !strings.HasPrefix(string(r.ParsedTools[0].Parameters), `{"type":"object","properties"`) {
		t.Errorf("parameters must keep the client's key order: %s", r.ParsedTools[0].Parameters)
	}
	if r.ParsedToolChoice.Mode != ToolChoiceFunction || r.ParsedToolChoice.Name != "get_weather" || r.ParallelCalls() {
		t.Errorf("tool_choice %+v parallel %v", r.ParsedToolChoice, r.ParallelCalls())
	}
	if r.Format != nil || r.ChatTemplateKwargs["enable_thinking"] != false {
		t.Errorf("format %+v kwargs %v", r.Format, r.ChatTemplateKwargs)
	}
	a := r.Messages[2]
	if a.HasText || len(a.Calls) != 1 || a.Calls[0].ID != "call_1" || a.Calls[0].Function.Name != "get_weather" || a.Calls[0].Function.Arguments != `{"city": "Paris"}` {
		t.Errorf("assistant tool call: %+v", a)
	}
	if m := r.Messages[3]; m.Role != "tool" || m.ToolCallID != "call_1" || m.Text != "sunny" || len(m.Parts) != 1 {
		t.Errorf("tool message: %+v", m)
	}
	if m := r.Messages[4]; m.Reasoned != "easy" || m.Text != "It is sunny." {
		t.Errorf("reasoning: %+v", m)
	}
	// Defaults: tools present means auto; none means none; parallel calls default true.
	r, err = ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`))
	if err != nil || r.ParsedToolChoice.Mode != ToolChoiceAuto || !r.ParallelCalls() {
		t.Errorf("default tool_choice: %+v %v", r, err)
	}
	r, err = ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"out","strict":true,"schema":{"type":"object","properties":{"a":{"type":"integer"}}}}}}`))
	if err != nil || r.Format == nil || r.Format.Type != FormatJSONSchema || r.Format.Name != "out" || !r.Format.Strict || r.ParsedToolChoice.Mode != ToolChoiceNone {
		t.Fatalf("json_schema: %+v %v", r, err)
	}
	r, err = ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`))
	if err != nil || r.Format == nil || r.Format.Type != FormatJSONObject {
		t.Fatalf("json_object: %+v %v", r, err)
	}
	r, err = ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}],
		"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"g"}}]}}}`))
	if err != nil || r.ParsedToolChoice.Mode != ToolChoiceRequired || r.ParsedToolChoice.Callable("f") || !r.ParsedToolChoice.Callable("g") {
		t.Fatalf("allowed_tools: %+v %v", r, err)
	}
	// Arguments sent as an object rather than a string are accepted.
	r, err = ParseChatRequest([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":{"x":1}}}]}]}`))
	if err != nil || r.Messages[0].Calls[0].Function.Arguments != `{"x":1}` {
		t.Fatalf("object arguments: %+v %v", r, err)
	}
}

func TestParseChatErrors(t *testing.T) {
	for _, tc := range []struct {
		body, param, msg string
	}{
		{`{}`, "messages", "non-empty"},
		{`{"messages":[]}`, "messages", "non-empty"},
		{`{"messages":"hi"}`, "messages", "wrong type"},
		{`{"messages":[{"role":"user"}]}`, "messages[0].content", "required"},
		{`{"messages":[{"content":"x"}]}`, "messages[0].role", "required"},
		{`{"messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id", "required"},
		{`{"messages":[{"role":"function","content":"x"}]}`, "messages[0].role", "not supported"},
		{`{"messages":[{"role":7,"content":"x"}]}`, "messages.role", "wrong type"},
		{`{"messages":[{"role":"user","content":5}]}`, "messages[0].content", "string or an array"},
		{`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`, "messages[0].content[0].type", "only \"text\""},
		{`{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text", "required"},
		{`{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, "top_logprobs", "requires logprobs"},
		{`{"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21}`, "top_logprobs", "between 0 and 20"},
		{`{"messages":[{"role":"user","content":"x"}],"logprobs":1}`, "logprobs", "wrong type"},
		{`{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":0}`, "max_completion_tokens", "at least 1"},
		// tools, tool_choice, response_format and tool-call history: each names its field.
		{`{"messages":[{"role":"user","content":"x"}],"tools":{"type":"function"}}`, "tools", "must be an array"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":["get_weather"]}`, "tools[0]", "must be an object"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"retrieval"}]}`, "tools[0].type", "must be \"function\""},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}`, "tools[0].function", "must be an object"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"description":"d"}}]}`, "tools[0].function.name", "required"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"a b"}}]}`, "tools[0].function.name", "1 to 64"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]}`, "tools[1].function.name", "twice"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":"object"}}]}`, "tools[0].function.parameters", "JSON schema object"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"obj"}}}]}`, "tools[0].function.parameters.type", "not a JSON schema type"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":[]}}}]}`, "tools[0].function.parameters.properties", "must be an object"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","required":"a"}}}]}`, "tools[0].function.parameters.required", "array of property names"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, "tool_choice", "not among"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"}`, "tool_choice", "not one of"},
		{`{"messages":[{"role":"user","content":"x"}],"tool_choice":"required"}`, "tool_choice", "needs tools"},
		{`{"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function"}}`, "tool_choice", "must be"},
		{`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].function.name", "required"},
		{`{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`, "messages[0].tool_calls[0].function.arguments", "not valid JSON"},
		{`{"messages":[{"role":"assistant","tool_calls":{"id":"c"}}]}`, "messages[0].tool_calls", "array of tool calls"},
		{`{"messages":[{"role":"user","content":"x","tool_calls":[]}]}`, "messages[0].tool_calls", "only allowed on assistant"},
		{`{"messages":[{"role":"tool","tool_call_id":"c"}]}`, "messages[0].content", "required"},
		{`{"messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"call_1","content":"r"}]}`, "messages[1].tool_call_id", "answers no tool call"},
		{`{"messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"b","content":"r"}]}`, "messages[1].tool_call_id", "answers no tool call"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"sometimes","tools":[{"type":"function","function":{"name":"f"}}]}}}`, "tool_choice.allowed_tools.mode", "auto"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}}`, "tool_choice.allowed_tools.tools", "at least one"},
		{`{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"g"}}]}}}`, "tool_choice.allowed_tools.tools[0]", "not among"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"xml"}}`, "response_format.type", "not one of"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":"json"}`, "response_format", "must be an object"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}}`, "response_format.json_schema", "required"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":[1]}}}`, "response_format.json_schema.schema", "JSON schema object"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","anyOf":[]}}}}`, "response_format.json_schema.schema.anyOf", "non-empty"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"properties":{"a":{"type":7}}}}}}`, "response_format.json_schema.schema.properties.a.type", "type name"},
		{`{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"},"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`, "response_format", "cannot be combined"},
		{`{"messages":[{"role":"user","content":"x"}],"n":4}`, "n", "not supported"},
		{`{"messages":[{"role":"user","content":"x"}],"echo":true}`, "echo", "not supported"},
	} {
		_, err := ParseChatRequest([]byte(tc.body))
		checkErr(t, tc.body, err, tc.param, tc.msg)
	}
}

func TestErrorJSON(t *testing.T) {
	b, err := json.Marshal(Invalid("max_tokens", "bad %d", 3))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"error":{"message":"bad 3","type":"invalid_request_error","param":"max_tokens","code":"invalid_value"}}`
	if string(b) != want {
		t.Errorf("have %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(Internal("boom"))
	if !strings.Contains(string(b), `"param":null`) {
		t.Errorf("param should be null: %s", b)
	}
}

func TestTopLogprobsJSON(t *testing.T) {
	b, err := json.Marshal(TopLogprobs{{"b", -0.5}, {"a", -1}, {"b", -2}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"b":-0.5,"a":-1}` {
		t.Errorf("have %s", b)
	}
	b, _ = json.Marshal([]Logprob{Logprob(negInf())})
	if string(b) != `[-9999]` {
		t.Errorf("-Inf: have %s", b)
	}
}

func negInf() float64 { var z float64; return -1 / z }

// TestCacheReportField: cache_report reaches GenerationParams from every dialect.
func TestCacheReportField(t *testing.T) {
	chat, err := ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"hi"}],"cache_report":true}`))
	if err != nil || !chat.CacheReport {
		t.Errorf("chat: %v, cache_report %v", err, chat != nil && chat.CacheReport)
	}
	comp, err := ParseCompletionRequest([]byte(`{"prompt":"hi","cache_report":true}`))
	if err != nil || !comp.CacheReport {
		t.Errorf("completions: %v", err)
	}
	resp, err := ParseResponsesRequest([]byte(`{"input":"hi","cache_report":true}`))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := resp.ChatRequest(nil)
	if err != nil || !rc.CacheReport {
		t.Errorf("responses: %v", err)
	}
	msg, err := ParseMessagesRequest([]byte(`{"max_tokens":4,"messages":[{"role":"user","content":"hi"}],"cache_report":true}`), false)
	if err != nil || !msg.Chat.CacheReport {
		t.Errorf("messages: %v", err)
	}
	if _, err := ParseChatRequest([]byte(`{"messages":[{"role":"user","content":"hi"}],"cache_report":"yes"}`)); err == nil {
		t.Error("cache_report \"yes\" accepted")
	}
}
