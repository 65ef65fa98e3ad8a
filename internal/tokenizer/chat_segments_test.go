package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestChatSegments(t *testing.T) {
	msgs := []ChatMessage{
		{Role: "system", Content: "You are terse."},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", Content: nil, ToolCalls: []ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris"}`}}},
		{Role: "tool", Content: `{"temperature":21}`},
	}
	tools := []json.RawMessage{weatherTool, searchTool}
	for _, tc := range []struct {
		name, src string
		want      []string // kind@text at the segment's start
	}{
		{"chatml", TemplateChatML, []string{"system@<|im_start|>system", "message 1 user@<|im_start|>user", "generation@<|im_start|>assistant"}},
		{"llama3", TemplateLlama3, []string{"system@<|start_header_id|>system", "message 1 user@<|start_header_id|>user", "generation@<|start_header_id|>assistant"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plain := msgs[:2]
			out, err := RenderChatWith(tc.src, plain, RenderOptions{AddGenerationPrompt: true}, "<s>", "</s>")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range ChatSegments(out, plain, nil, true) {
				name := s.Kind
				if s.Kind == "message" {
					name = fmt.Sprintf("message %d %s", s.Index, s.Role)
				}
				rest := out[s.Byte:]
				got = append(got, name+"@"+rest[:min(len(rest), len(strings.SplitN(tc.want[len(got)%len(tc.want)], "@", 2)[1]))])
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("segments\n got %q\nwant %q\nin %q", got, tc.want, out)
			}
		})
	}
	// With tools (Qwen 3's template renders them in the system turn) every part is found in
	// order and the tools segment starts at the first tool.
	qwen := TemplateQwen3Real
	out, err := RenderChatWith(qwen, msgs, RenderOptions{AddGenerationPrompt: true, Tools: tools}, "", "<|im_end|>")
	if err != nil {
		t.Fatal(err)
	}
	segs := ChatSegments(out, msgs, tools, true)
	kinds := ""
	for i, s := range segs {
		if i > 0 && s.Byte < segs[i-1].Byte {
			t.Fatalf("segments out of order: %+v", segs)
		}
		kinds += s.Kind + " "
	}
	if kinds != "system tools message message message generation " {
		t.Errorf("kinds %q in %+v\n%s", kinds, segs, out)
	}
	for _, s := range segs {
		if s.Kind == "tools" && !strings.Contains(out[s.Byte:s.Byte+200], "get_weather") {
			t.Errorf("tools segment starts at %q", out[s.Byte:s.Byte+60])
		}
	}
}
