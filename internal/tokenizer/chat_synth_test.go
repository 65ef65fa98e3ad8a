package tokenizer_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/synth"
	"stockpot/internal/tokenizer"
)

// TestPresetToolSessionsMatchLlamaCpp renders a tool session with the
// templates the synthetic presets carry (the default model's included) and
// checks that the prompt tokenizes as llama.cpp tokenizes it, with the
// presets' added tokens (<tool_call>, <think>) as single tokens where the
// vocabulary has them.
func TestPresetToolSessionsMatchLlamaCpp(t *testing.T) {
	msgs := []tokenizer.ChatMessage{
		{Role: "system", Content: "You are a helpful agent."},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", Content: "", ReasoningContent: "Call the tool.", ToolCalls: []tokenizer.ToolCall{{ID: "c1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
		{Role: "tool", ToolCallID: "c1", Content: `{"temperature": 21}`},
		{Role: "assistant", Content: "<think>\nIt is 21.\n</think>\n\n21 °C."},
		{Role: "user", Content: "Thanks"},
	}
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"Weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}`)}
	dir := t.TempDir()
	for _, c := range []struct {
		preset string
		single []string // texts that must be one token
	}{
		{"default", nil},
		{"tiny-smollm", nil},
		{"tiny-qwen2", []string{"<tool_call>", "</tool_call>"}},
		{"tiny-qwen3", []string{"<tool_call>", "</tool_call>", "<think>", "</think>"}},
	} {
		t.Run(c.preset, func(t *testing.T) {
			path := filepath.Join(dir, c.preset+".gguf")
			if err := synth.WriteFile(c.preset, synth.Options{}, path); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			tok, err := tokenizer.FromGGUF(f)
			if err != nil {
				t.Fatal(err)
			}
			text, err := tok.RenderChat(msgs, tokenizer.RenderOptions{Tools: tools, AddGenerationPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "<tool_response>", "<tools>", "<|im_start|>assistant\n"} {
				if !strings.Contains(text, want) {
					t.Errorf("rendered prompt lacks %q:\n%s", want, text)
				}
			}
			want, err := llamaref.Tokenize(path, append([]string{text}, c.single...), false, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := tok.Encode(text, false, true); !slices.Equal(got, want[0]) {
				t.Errorf("prompt tokens differ from llama.cpp:\nhave %v\nwant %v", got, want[0])
			}
			for i, s := range c.single {
				if len(want[i+1]) != 1 {
					t.Errorf("%q is %d tokens in llama.cpp, want 1", s, len(want[i+1]))
				}
			}
		})
	}
}
