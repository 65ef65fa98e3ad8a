package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestParseMessagesRequest(t *testing.T) {
	body := `{"model":"m","max_tokens":64,"stream":true,"temperature":0.3,"top_p":0.9,"top_k":7,
		"metadata":{"user_id":"u"},"stop_sequences":["END"],
		"system":[{"type":"text","text":"rules","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"more"}],
		"tools":[{"name":"f","description":"d","input_schema":{"type":"object","properties":{"a":{"type":"integer"}}},"cache_control":{"type":"ephemeral"}}],
		"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true},
		"messages":[
			{"role":"user","content":"go"},
			{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"42"}]},{"type":"text","text":"next","cache_control":{"type":"ephemeral","ttl":"5m"}}]}
		]}`
	r, err := ParseMessagesRequest([]byte(body), false)
	if err != nil {
		t.Fatal(err)
	}
	c := r.Chat
	if r.MaxTokens != 64 || !r.Stream || r.Metadata["user_id"] != "u" || *c.Temperature != 0.3 || *c.TopP != 0.9 || *c.TopK != 7 ||
		len(c.StopStrings) != 1 || c.StopStrings[0] != "END" || !c.IncludeUsage() {
		t.Errorf("params %+v / %+v", r, c.GenerationParams)
	}
	bp := func(i int) [2]string { return [2]string{r.Breakpoints[i].Where, r.Breakpoints[i].TTL} }
	if len(r.Breakpoints) != 3 || bp(0) != [2]string{"system[0]", "1h"} || bp(1) != [2]string{"tools[0]", "5m"} ||
		bp(2) != [2]string{"messages[2].content[1]", "5m"} {
		t.Errorf("breakpoints %+v", r.Breakpoints)
	}
	if len(c.ParsedTools) != 1 || c.ParsedTools[0].Name != "f" || c.ParsedToolChoice.Mode != ToolChoiceFunction || c.ParsedToolChoice.Name != "f" || c.ParallelCalls() {
		t.Errorf("tools %+v choice %+v", c.ParsedTools, c.ParsedToolChoice)
	}
	var raw map[string]any
	if json.Unmarshal(c.ParsedTools[0].Raw, &raw) != nil || raw["type"] != "function" {
		t.Errorf("tool raw %s", c.ParsedTools[0].Raw)
	}
	roles := []string{}
	for _, m := range c.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool,user" {
		t.Fatalf("roles %v", roles)
	}
	if c.Messages[0].Text != "rules\nmore" {
		t.Errorf("system %q", c.Messages[0].Text)
	}
	a := c.Messages[2]
	if a.Text != "ok" || a.Reasoned != "hmm" || len(a.Calls) != 1 || a.Calls[0].ID != "t1" || a.Calls[0].Function.Arguments != `{"a":1}` {
		t.Errorf("assistant %+v", a)
	}
	if tm := c.Messages[3]; tm.ToolCallID != "t1" || tm.Text != "42" {
		t.Errorf("tool message %+v", tm)
	}
	if c.Messages[4].Text != "next" {
		t.Errorf("last user %+v", c.Messages[4])
	}
}

func TestParseMessagesToolChoice(t *testing.T) {
	tools := `"tools":[{"name":"f","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"q"}]`
	for choice, want := range map[string]string{`{"type":"auto"}`: ToolChoiceAuto, `{"type":"any"}`: ToolChoiceRequired,
		`{"type":"none"}`: ToolChoiceNone, `{"type":"tool","name":"f"}`: ToolChoiceFunction} {
		r, err := ParseMessagesRequest([]byte(`{"max_tokens":1,"tool_choice":`+choice+`,`+tools+`}`), false)
		if err != nil {
			t.Fatalf("%s: %v", choice, err)
		}
		if r.Chat.ParsedToolChoice.Mode != want {
			t.Errorf("%s: mode %q, want %q", choice, r.Chat.ParsedToolChoice.Mode, want)
		}
	}
	// Consecutive user turns are combined.
	r, err := ParseMessagesRequest([]byte(`{"max_tokens":1,"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"}]}]}`), false)
	if err != nil || len(r.Chat.Messages) != 1 || r.Chat.Messages[0].Text != "a\nb" {
		t.Errorf("consecutive user turns: %v %+v", err, r)
	}
	// More stop sequences than chat's 4 are fine.
	r, err = ParseMessagesRequest([]byte(`{"max_tokens":1,"stop_sequences":["a","b","c","d","e","f"],`+tools+`}`), false)
	if err != nil || len(r.Chat.StopStrings) != 6 {
		t.Errorf("six stop sequences: %v", err)
	}
	// count_tokens needs no max_tokens.
	if _, err := ParseMessagesRequest([]byte(`{`+tools+`}`), true); err != nil {
		t.Errorf("count_tokens: %v", err)
	}
}

func TestParseMessagesErrors(t *testing.T) {
	cc := `"cache_control":{"type":"ephemeral"}`
	user := `"messages":[{"role":"user","content":"q"}]`
	for _, tc := range []struct{ body, want string }{
		{`{` + user + `}`, "max_tokens"},
		{`{"max_tokens":0,` + user + `}`, "at least 1"},
		{`{"max_tokens":1,"messages":[]}`, "at least one message"},
		{`{"max_tokens":1,"temperature":1.5,` + user + `}`, "temperature"},
		{`{"max_tokens":1,"system":[{"type":"text","text":"","cache_control":{"type":"ephemeral"}}],` + user + `}`, "empty text blocks"},
		{`{"max_tokens":1,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"10m"}}],` + user + `}`, "ttl"},
		{`{"max_tokens":1,"system":[{"type":"text","text":"s","cache_control":{"type":"persistent"}}],` + user + `}`, "ephemeral"},
		{`{"max_tokens":1,"system":[{"type":"image"}],` + user + `}`, "text block"},
		{`{"max_tokens":1,` + cc + `,"system":[{"type":"text","text":"a",` + cc + `},{"type":"text","text":"b",` + cc + `}],"tools":[{"name":"f","input_schema":{},` + cc + `},{"name":"g","input_schema":{},` + cc + `}],` + user + `}`, "maximum of 4"},
		{`{"max_tokens":1,"tool_choice":{"type":"tool","name":"zz"},"tools":[{"name":"f","input_schema":{}}],` + user + `}`, "not in tools"},
		{`{"max_tokens":1,"tool_choice":{"type":"sometimes"},"tools":[{"name":"f","input_schema":{}}],` + user + `}`, "auto, any, tool or none"},
		{`{"max_tokens":1,"tool_choice":{"type":"any"},` + user + `}`, "needs tools"},
		{`{"max_tokens":1,"tools":[{"name":"f"}],` + user + `}`, "input_schema"},
		{`{"max_tokens":1,"tools":[{"type":"web_search_20250305","name":"web_search"}],` + user + `}`, "not supported"},
		{`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "not supported"},
		{`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"bogus"}]}]}`, "not a known content block"},
		{`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "text is required"},
		{`{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[1]}]}]}`, "JSON object"},
		{`{"max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"a"}]}]}`, "only allowed in user"},
		{`{"max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}`, "tool_use_id"},
		{`{"max_tokens":1,"messages":[{"role":"user","content":5}]}`, "content"},
		{`{"max_tokens":1,"messages":[{"role":"tool","content":"x"}]}`, "role"},
		{`[]`, "not a valid"},
		{`{"max_tokens":1,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"The answer is"}]}`, "prefill"},
		{`{"max_tokens":1,"stop_sequences":["a",""],` + user + `}`, "empty"},
		{`{"max_tokens":1,"stop_sequences":[` + strings.Repeat(`"a",`, MaxStopSequences) + `"b"],` + user + `}`, "limit of 64"},
	} {
		_, err := ParseMessagesRequest([]byte(tc.body), false)
		var e *Error
		if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: got %v, want a 400 mentioning %q", tc.body, err, tc.want)
		}
	}
}

func TestAnthropicError(t *testing.T) {
	for _, tc := range []struct {
		e      *Error
		status int
		typ    string
	}{
		{Invalid("x", "bad"), 400, AnthropicInvalidRequest},
		{Unauthorized("no"), 401, AnthropicAuthentication},
		{ModelNotFound("a", "b"), 404, AnthropicNotFound},
		{TooLarge(10), 413, AnthropicTooLarge},
		{&Error{Status: http.StatusTooManyRequests, Message: "slow down"}, 429, AnthropicRateLimit},
		{Internal("boom"), 500, AnthropicAPI},
		{Unavailable("draining"), 529, AnthropicOverloaded},
	} {
		status, body := AnthropicError(tc.e)
		if status != tc.status || body.Type != "error" || body.Error.Type != tc.typ || body.Error.Message != tc.e.Message {
			t.Errorf("%v: %d %+v", tc.e, status, body)
		}
	}
}

var messagesSeeds = []string{
	`{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`,
	`{"max_tokens":16,"stream":true,"system":"be brief","messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`,
	`{"max_tokens":8,"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"string"}}}}],"tool_choice":{"type":"any"},
	  "messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"thinking","thinking":"t"},{"type":"tool_use","id":"x","name":"f","input":{"a":"b"}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"r","is_error":true}]}]}`,
	`{"max_tokens":1,"cache_control":{"type":"ephemeral"},"system":[{"type":"text","text":"","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"q"}]}`,
	`{"max_tokens":1,"tool_choice":{"type":"tool","name":"f"},"tools":[{"name":"f","input_schema":{}}],"stop_sequences":["a","b"],"top_k":3,"top_p":0.5,"temperature":1,"messages":[{"role":"user","content":"q"}]}`,
	// cache_control breakpoints everywhere they may go, and pin_strict.
	`{"max_tokens":2,"pin_strict":true,"cache_control":{"type":"ephemeral","ttl":"1h"},"tools":[{"name":"f","input_schema":{},"cache_control":{"type":"ephemeral"}}],"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"5m"}}]}]}`,
	`{"max_tokens":2,"messages":[{"role":"user","content":"u"},{"role":"user","content":[{"type":"text","text":"v","cache_control":{"type":"ephemeral"}},{"type":"text","text":"w"}]},{"role":"assistant","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}},{"type":"tool_use","id":"t","name":"f","input":{},"cache_control":{"type":"ephemeral"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r","cache_control":{"type":"ephemeral"}},{"type":"text","text":"go"}]}]}`,
	`{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"","cache_control":{"type":"ephemeral"}}]}]}`,
	`{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"2h"}}]}]}`,
}

// FuzzMessagesRequest: any body parses to a request whose chat translation is consistent, or
// fails with a 4xx *Error; it never panics.
func FuzzMessagesRequest(f *testing.F) {
	for _, s := range messagesSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, countOnly bool) {
		r, err := ParseMessagesRequest(body, countOnly)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status < 400 || e.Status > 499 {
				t.Fatalf("error %v is not a 4xx *Error", err)
			}
			return
		}
		if !countOnly && r.MaxTokens < 1 {
			t.Fatalf("max_tokens %d accepted", r.MaxTokens)
		}
		if len(r.Breakpoints) > MaxCacheBreakpoints {
			t.Fatalf("%d breakpoints accepted", len(r.Breakpoints))
		}
		for i, b := range r.Breakpoints {
			if b.TTL != "5m" && b.TTL != "1h" {
				t.Fatalf("ttl %q accepted", b.TTL)
			}
			// A cut is a prefix of the conversation: never more messages than it has (plus a
			// cut last one), never more tools, never a generation prompt.
			if c := r.CutChat(i); c != nil && (len(c.Messages) > len(r.Chat.Messages) || len(c.ParsedTools) > len(r.Chat.ParsedTools) || c.GenerationPrompt()) {
				t.Fatalf("breakpoint %s: cut of %d messages, %d tools, of %d and %d", b.Where, len(c.Messages), len(c.ParsedTools), len(r.Chat.Messages), len(r.Chat.ParsedTools))
			}
		}
		if r.Chat == nil || len(r.Chat.Messages) == 0 {
			t.Fatal("no chat messages")
		}
		if len(r.Chat.StopStrings) > MaxStopSequences {
			t.Fatalf("%d stop sequences", len(r.Chat.StopStrings))
		}
		for _, s := range r.Chat.StopStrings {
			if s == "" {
				t.Fatal("empty stop sequence kept")
			}
		}
		if !countOnly && (r.Chat.MaxTokens == nil || *r.Chat.MaxTokens != r.MaxTokens) {
			t.Fatalf("max_tokens %d did not reach the chat request", r.MaxTokens)
		}
	})
}

// TestCutChat: each breakpoint's cut renders the conversation up to its block: system text
// up to the marked system block, tools up to the marked tool, a user message up to the
// marked text block (merged user turns included), an assistant message whole only when its
// marked block is its last, and the whole prompt for the top-level cache_control.
func TestCutChat(t *testing.T) {
	// At most 4 breakpoints a request: the six marks go in two requests.
	tmpl := `{"max_tokens":8 @F
		"tools":[{"name":"f","input_schema":{"type":"object"}},{"name":"g","input_schema":{"type":"object"} @A}],
		"system":[{"type":"text","text":"a" @B},{"type":"text","text":"b"}],
		"messages":[
			{"role":"user","content":"u0"},
			{"role":"user","content":[{"type":"text","text":"u1" @C},{"type":"text","text":"u2"}]},
			{"role":"assistant","content":[{"type":"text","text":"x" @D},{"type":"tool_use","id":"t","name":"f","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"r" @E}]}
		]}`
	parse := func(marks string) *MessagesRequest {
		body := tmpl
		for _, m := range "ABCDEF" {
			v := ""
			if strings.ContainsRune(marks, m) {
				v = `,"cache_control":{"type":"ephemeral"}`
				if m == 'F' {
					v = `,"cache_control":{"type":"ephemeral","ttl":"1h"}`
				}
			}
			if m == 'F' {
				v += ","
			}
			body = strings.ReplaceAll(body, "@"+string(m), v)
		}
		r, err := ParseMessagesRequest([]byte(body), false)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	describe := func(c *ChatRequest) string {
		if c == nil {
			return "whole"
		}
		var parts []string
		for _, m := range c.Messages {
			parts = append(parts, m.Role+":"+strings.ReplaceAll(m.Text, "\n", "|"))
		}
		gen := "gen"
		if !c.GenerationPrompt() {
			gen = "nogen"
		}
		return strings.Join(parts, " ") + " tools=" + string(rune('0'+len(c.ParsedTools))) + " " + gen
	}
	want := map[string]string{
		"tools[1]":               " tools=2 nogen",
		"system[0]":              "system:a tools=2 nogen",
		"messages[1].content[0]": "system:a|b user:u0|u1 tools=2 nogen",
		"messages[2].content[0]": "system:a|b user:u0|u1|u2 tools=2 nogen",
		"messages[3].content[0]": "system:a|b user:u0|u1|u2 assistant:x tool:r tools=2 nogen",
		"request":                "whole",
	}
	seen := 0
	for _, r := range []*MessagesRequest{parse("ABCD"), parse("EF")} {
		for i, b := range r.Breakpoints {
			seen++
			if got := describe(r.CutChat(i)); got != want[b.Where] {
				t.Errorf("%s: cut %q, want %q", b.Where, got, want[b.Where])
			}
		}
	}
	if seen != len(want) {
		t.Fatalf("%d breakpoints, want %d", seen, len(want))
	}
	r := parse("EF")
	if r.Breakpoints[1].Duration().String() != "1h0m0s" || r.Breakpoints[0].Duration().String() != "5m0s" {
		t.Errorf("durations %v %v", r.Breakpoints[1].Duration(), r.Breakpoints[0].Duration())
	}
}
