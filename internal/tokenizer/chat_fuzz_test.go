package tokenizer

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzChatJSON: tool definitions, tool-call arguments and kwargs are JSON
// from the client. Valid JSON must parse and tojson must write the same
// value back (in the same key order); anything else is an ErrJSONValue,
// never a panic.
func FuzzChatJSON(f *testing.F) {
	f.Add([]byte(`{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"number","default":1.5e-7}}}}}`))
	f.Add([]byte(`[1, -0, 1e400, 12345678901234567890, "\u00e9\ud83d\ude00", null, true, {"b":1,"a":2,"b":3}]`))
	f.Add([]byte(`{"a":`))
	f.Add([]byte(strings.Repeat("[", 300) + strings.Repeat("]", 300)))
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := jsonValue(raw)
		if err != nil {
			if !errors.Is(err, ErrJSONValue) {
				t.Fatalf("error %v does not wrap ErrJSONValue", err)
			}
			return
		}
		var b strings.Builder
		if err := (pyJSON{indent: -1, item: ", ", key: ": "}).encode(&b, v, 0); err != nil {
			return // NaN/inf cannot come from JSON; deep values are refused
		}
		out := b.String()
		if strings.Contains(out, "Infinity") || strings.Contains(out, "NaN") {
			return // 1e400: Python writes Infinity too, which is not JSON
		}
		var want, got any
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatalf("jsonValue accepted %q that encoding/json refuses: %v", raw, err)
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("tojson wrote invalid JSON %q for %q: %v", out, raw, err)
		}
		// DeepEqual compares numbers as float64 (-0 is 0: Python reads
		// the integer -0 as 0).
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip of %q: %s, want %v", raw, out, want)
		}
	})
}

// FuzzChatTemplateSource: a chat template comes from the GGUF file. Whatever
// its bytes, compiling and rendering it never panics, and the source
// analyses (content format, string arguments) terminate.
func FuzzChatTemplateSource(f *testing.F) {
	for _, s := range []string{
		TemplateChatML, TemplateQwen3, TemplateLlama2,
		"{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
		"{{ raise_exception('x') }}", "{% raw %}{{ x }}{% endraw %}", "{{ '{' }}{ {%- if true %}}{% endif %}",
		"{# unclosed", "{{ x ", "{% for %}", "{{ tools | tojson(indent=2) }}{{ strftime_now('%d') }}",
	} {
		f.Add(s)
	}
	msgs := []ChatMessage{
		{Role: "system", Content: "s"},
		{Role: "user", Content: []ContentPart{{Type: "text", Text: "u"}}},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "1", Name: "f", Arguments: `{"a":1}`}}},
		{Role: "tool", ToolCallID: "1", Content: "r"},
	}
	opts := RenderOptions{AddGenerationPrompt: true, Tools: []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f"}}`)}}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 8192 { // the real templates of llama.cpp's models/templates up to 8 KiB (testdata)
			return
		}
		DetectContentFormat(src)
		DetectStringArguments(src)
		_, err := RenderChatWith(src, msgs, opts, "<s>", "</s>")
		var te *TemplateError
		if err != nil && !errors.Is(err, ErrChatTemplate) && !errors.As(err, &te) {
			t.Fatalf("error %v is neither ErrChatTemplate nor a TemplateError", err)
		}
	})
}
