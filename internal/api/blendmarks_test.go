package api

import (
	"reflect"
	"strings"
	"testing"
)

// TestBlendMarks: "blend": true on a chat message or content part, or on an Anthropic text
// block, becomes a BlendMark naming the field and the chat message that holds its text; bad
// marks are 400s naming the field.
func TestBlendMarks(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		want             []BlendMark
		err, param       string
	}{
		{name: "message and parts", path: "chat", body: `{"messages":[{"role":"system","content":"sys"},` +
			`{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"doc one","blend":true},{"type":"text","text":"doc two","blend":true}]},` +
			`{"role":"assistant","content":"ok"},{"role":"user","content":"doc three","blend":true}]}`,
			want: []BlendMark{{"messages[1].content[1]", 1, "doc one"}, {"messages[1].content[2]", 1, "doc two"}, {"messages[3]", 3, "doc three"}}},
		{name: "false marks nothing", path: "chat", body: `{"messages":[{"role":"user","content":"x","blend":false}]}`},
		{name: "both", path: "chat", body: `{"messages":[{"role":"user","blend":true,"content":[{"type":"text","text":"a","blend":true}]}]}`,
			err: "mark one or the other", param: "messages[0].blend"},
		{name: "not a bool", path: "chat", body: `{"messages":[{"role":"user","content":[{"type":"text","text":"a","blend":1}]}]}`,
			err: "must be true or false", param: "messages[0].content[0].blend"},
		{name: "empty part", path: "chat", body: `{"messages":[{"role":"user","content":[{"type":"text","text":"","blend":true}]}]}`,
			err: "text is empty", param: "messages[0].content[0].blend"},
		{name: "no text", path: "chat", body: `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"blend":true,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
			err: "no text content", param: "messages[1].blend"},
		{name: "blend object, no chunks, no marks", path: "chat", body: `{"messages":[{"role":"user","content":"q"}],"blend":{"recompute":0.5}}`,
			err: "blend.chunks is missing", param: "blend"},
		{name: "blend object with marks only", path: "chat", body: `{"messages":[{"role":"user","content":"q","blend":true}],"blend":{"recompute":0.5}}`,
			want: []BlendMark{{"messages[0]", 0, "q"}}},
		{name: "anthropic", path: "messages", body: `{"max_tokens":4,"system":[{"type":"text","text":"S"},{"type":"text","text":"doc A","blend":true}],` +
			`"messages":[{"role":"user","content":[{"type":"text","text":"doc B","blend":true},{"type":"text","text":"q1"}]},` +
			`{"role":"assistant","content":"a1"},{"role":"user","content":"q2"},{"role":"user","content":[{"type":"text","text":"doc C","blend":true}]}]}`,
			// The last two user turns merge into chat message 3.
			want: []BlendMark{{"system[1]", 0, "doc A"}, {"messages[0].content[0]", 1, "doc B"}, {"messages[3].content[0]", 3, "doc C"}}},
		{name: "anthropic tool_use", path: "messages", body: `{"max_tokens":4,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{},"blend":true}]},{"role":"user","content":"r"}]}`,
			err: "only text blocks", param: "messages[1].content[0].blend"},
		{name: "anthropic blend object alone", path: "messages", body: `{"max_tokens":4,"messages":[{"role":"user","content":"q"}],"blend":{"policy":"epic"}}`,
			err: "blend.chunks is missing", param: "blend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var chat *ChatRequest
			var err error
			if tc.path == "chat" {
				chat, err = ParseChatRequest([]byte(tc.body))
			} else {
				var mr *MessagesRequest
				if mr, err = ParseMessagesRequest([]byte(tc.body), false); err == nil {
					chat = mr.Chat
				}
			}
			if tc.err != "" {
				e, ok := err.(*Error)
				if !ok || e.Status != 400 || e.Param != tc.param || !strings.Contains(e.Message, tc.err) {
					t.Fatalf("have %v, want a 400 on %s containing %q", err, tc.param, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(chat.BlendMarks, tc.want) {
				t.Errorf("marks %+v, want %+v", chat.BlendMarks, tc.want)
			}
			for _, m := range tc.want {
				if !strings.Contains(chat.Messages[m.Message].Text, m.Text) {
					t.Errorf("mark %s: chat message %d %q does not hold %q", m.Param, m.Message, chat.Messages[m.Message].Text, m.Text)
				}
			}
		})
	}
	if _, err := ParseCompletionRequest([]byte(`{"prompt":"x","blend":{"recompute":0.2}}`)); err == nil || !strings.Contains(err.Error(), "blend.chunks is missing") {
		t.Errorf("completion with a chunkless blend: have %v, want blend.chunks is missing", err)
	}
}
