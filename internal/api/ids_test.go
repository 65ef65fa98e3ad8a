package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestIDBounds: every id a client sends back and the prompt does not hold is refused over
// MaxIDBytes with a 400 naming it, in each dialect, and accepted at the bound.
func TestIDBounds(t *testing.T) {
	type parse func(body string) error
	chat := func(b string) error { _, err := ParseChatRequest([]byte(b)); return err }
	resp := func(b string) error { _, err := ParseResponsesRequest([]byte(b)); return err }
	msgs := func(b string) error { _, err := ParseMessagesRequest([]byte(b), false); return err }
	cases := []struct {
		name  string
		parse parse
		body  string // %[1]s is the id (in every place of the case), %[2]s a short one
		param string
	}{
		{"chat tool_calls id", chat, `{"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"%[1]s","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[1].tool_calls[0].id"},
		{"chat tool_call_id", chat, `{"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"%[2]s","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"%[1]s","content":"r"}]}`, "messages[2].tool_call_id"},
		{"responses function_call", resp, `{"input":[{"type":"function_call","call_id":"%[1]s","name":"f","arguments":"{}"}]}`, "input[0].call_id"},
		{"responses function_call_output", resp, `{"input":[{"role":"user","content":"q"},{"type":"function_call_output","call_id":"%[1]s","output":"r"}]}`, "input[1].call_id"},
		{"responses previous_response_id", resp, `{"input":"q","previous_response_id":"%[1]s"}`, "previous_response_id"},
		{"messages tool_use", msgs, `{"max_tokens":8,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"%[1]s","name":"f","input":{}}]}]}`, "messages[1].content[0].id"},
		{"messages tool_result", msgs, `{"max_tokens":8,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"tool_use","id":"%[2]s","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"%[1]s","content":"r"}]}]}`, "messages[2].content[0].tool_use_id"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.parse(fmt.Sprintf(c.body, strings.Repeat("i", MaxIDBytes), "c1")); err != nil && strings.Contains(err.Error(), "string too long") {
				t.Fatalf("an id of %d bytes refused: %v", MaxIDBytes, err)
			}
			long := strings.Repeat("i", MaxIDBytes+1)
			if c.param == "messages[2].tool_call_id" || c.param == "messages[2].content[0].tool_use_id" {
				long = strings.Repeat("i", 1<<20) // a megabyte: refused all the same
			}
			err := c.parse(fmt.Sprintf(c.body, long, "c1"))
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 || e.Param != c.param || e.Code != "string_above_max_length" {
				t.Fatalf("have %v, want a 400 string_above_max_length on %s", err, c.param)
			}
			if len(e.Message) > 300 {
				t.Errorf("the message is %d bytes: %.100s…", len(e.Message), e.Message)
			}
		})
	}
}
