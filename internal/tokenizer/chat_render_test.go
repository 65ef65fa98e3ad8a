package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"

	"stockpot/internal/gguf"
)

func mustRender(t *testing.T, src string, msgs []ChatMessage, opts RenderOptions) string {
	t.Helper()
	out, err := RenderChatWith(src, msgs, opts, "<s>", "</s>")
	if err != nil {
		t.Fatalf("render %q: %v", src, err)
	}
	return out
}

func TestRenderChatTemplateError(t *testing.T) {
	src := "{%- if messages[0].role != 'user' %}{{ raise_exception('Conversations must start with a user message, not ' + messages[0].role) }}{% endif %}ok"
	_, err := RenderChatWith(src, []ChatMessage{{Role: "assistant", Content: "x"}}, RenderOptions{}, "", "")
	var te *TemplateError
	if !errors.As(err, &te) || te.Message != "Conversations must start with a user message, not assistant" {
		t.Fatalf("err = %#v, want a *TemplateError with the template's message", err)
	}
	if !errors.Is(err, ErrChatTemplate) {
		t.Errorf("errors.Is(%v, ErrChatTemplate) = false", err)
	}
	// Raised inside a macro and a loop too.
	src = "{% macro check(m) %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}{% endmacro %}{% for m in messages %}{{ check(m) }}{% endfor %}"
	_, err = RenderChatWith(src, []ChatMessage{{Role: "user", Content: "a"}, {Role: "tool", Content: "b"}}, RenderOptions{}, "", "")
	if !errors.As(err, &te) || te.Message != "no tools here" {
		t.Errorf("macro: err = %v", err)
	}
	// Other failures are not TemplateErrors.
	_, err = RenderChatWith("{{ messages | no_such_filter }}", []ChatMessage{{Role: "user", Content: "a"}}, RenderOptions{}, "", "")
	if err == nil || errors.As(err, &te) || !errors.Is(err, ErrChatTemplate) {
		t.Errorf("unknown filter: err = %v", err)
	}
}

func TestRenderChatValues(t *testing.T) {
	show := "{% for m in messages %}{{ m | tojson }}\n{% endfor %}tools={{ tools | tojson }} gen={{ add_generation_prompt }} bos={{ bos_token }} eos={{ eos_token }}"
	msgs := []ChatMessage{
		{Role: "system", Content: "S"},
		{Role: "user", Content: []ContentPart{{Type: "text", Text: "a"}, {Type: "image_url"}, {Type: "text", Text: "b"}}},
		{Role: "assistant", Content: nil, ReasoningContent: "think", ToolCalls: []ToolCall{
			{ID: "c1", Name: "f", Arguments: `{"z": 1, "a": [true, null, 1.5, "é"]}`},
			{Name: "g", Arguments: ""},
			{Name: "h", Arguments: "not json"},
		}},
		{Role: "tool", ToolCallID: "c1", Name: "f", Content: []ContentPart{{Type: "text", Text: "r1"}, {Type: "text", Text: "r2"}}},
		{Role: "user", Content: "u", Extra: map[string]json.RawMessage{"zeta": json.RawMessage(`{"b":2,"a":1}`), "alpha": json.RawMessage(`"x"`)}},
	}
	got := mustRender(t, show, msgs, RenderOptions{AddGenerationPrompt: true})
	want := `{"role": "system", "content": "S"}
{"role": "user", "content": "a\nb"}
{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"z": 1, "a": [true, null, 1.5, "é"]}}}, {"type": "function", "function": {"name": "g", "arguments": {}}}, {"type": "function", "function": {"name": "h", "arguments": {}}}], "reasoning": "think", "reasoning_content": "think"}
{"role": "tool", "content": "r1\nr2", "tool_call_id": "c1", "name": "f"}
{"role": "user", "content": "u", "alpha": "x", "zeta": {"b": 2, "a": 1}}
tools=null gen=True bos=<s> eos=</s>`
	if got != want {
		t.Errorf("string format:\n got %s\nwant %s", got, want)
	}
	// Parts format: lists reach the template (tool results stay strings).
	got = mustRender(t, "{% for m in messages %}{{ m.content | tojson }}|{% endfor %}", msgs[1:2], RenderOptions{ContentFormat: ContentParts})
	if want := `[{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]|`; got != want {
		t.Errorf("parts format: got %s, want %s", got, want)
	}
	// Tools keep the client's key order.
	tool := json.RawMessage(`{"type":"function","function":{"name":"f","parameters":{"type":"object","required":["x"],"properties":{"x":{"type":"string"}}}}}`)
	got = mustRender(t, "{{ tools | tojson }}", msgs[:1], RenderOptions{Tools: []json.RawMessage{tool}})
	if want := `[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "required": ["x"], "properties": {"x": {"type": "string"}}}}}]`; got != want {
		t.Errorf("tools: got %s, want %s", got, want)
	}
	// Kwargs become variables; they cannot replace messages.
	got = mustRender(t, "{{ enable_thinking }} {{ builtin_tools | join(',') }} {{ messages | length }} {{ documents.a }}", msgs[:1], RenderOptions{Kwargs: map[string]any{
		"enable_thinking": false, "builtin_tools": []any{"wolfram_alpha", "brave_search"}, "messages": "no", "documents": json.RawMessage(`{"a": "doc"}`),
	}})
	if want := "False wolfram_alpha,brave_search 1 doc"; got != want {
		t.Errorf("kwargs: got %q, want %q", got, want)
	}
	// Bad JSON from outside is an error naming it.
	_, err := RenderChatWith("x", msgs[:1], RenderOptions{Tools: []json.RawMessage{json.RawMessage(`{"type":`)}}, "", "")
	if !errors.Is(err, ErrJSONValue) {
		t.Errorf("bad tool JSON: err = %v", err)
	}
	_, err = RenderChatWith("x", []ChatMessage{{Role: "user", Content: 42}}, RenderOptions{}, "", "")
	if !errors.Is(err, ErrChatTemplate) {
		t.Errorf("content of type int: err = %v", err)
	}
}

func TestRenderChatStringArguments(t *testing.T) {
	call := []ChatMessage{{Role: "assistant", ToolCalls: []ToolCall{{Name: "f", Arguments: `{"b": 1,  "a": 2}`}}}}
	// Concatenation: the template gets the JSON text as received.
	src := "{% for m in messages %}{% for tc in m.tool_calls %}{{ '```json\\n' + tc['function']['arguments'] + '\\n```' }}{% endfor %}{% endfor %}"
	if !DetectStringArguments(src) {
		t.Fatal("DetectStringArguments = false for a concatenating template")
	}
	if got, want := mustRender(t, src, call, RenderOptions{}), "```json\n{\"b\": 1,  \"a\": 2}\n```"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// A template that fails on dicts is rendered again with strings.
	src = "{% for tc in messages[0].tool_calls %}{{ tc.function.arguments.startswith('{') }}{% endfor %}"
	if got := mustRender(t, src, call, RenderOptions{}); got != "True" {
		t.Errorf("retry with strings: got %q", got)
	}
	for _, c := range []struct {
		src  string
		want bool
	}{
		{"{{ tool_call.function.arguments | tojson }}", false},
		{"{% if tool_call.arguments is string %}{{ tool_call.arguments }}{% endif %}", false},
		{"{{ '<|python_tag|>' + tool_call['function']['arguments'] | tojson }}", false},
		{"{{ '>>>' + tool_call['function']['name'] + '\\n' + tool_call['function']['arguments'] }}", true},
		{"{{ tool.function.arguments + '\\n' }}", true},
		{"{{ '\"arguments\"' + x }}", false},
	} {
		if got := DetectStringArguments(c.src); got != c.want {
			t.Errorf("DetectStringArguments(%q) = %v, want %v", c.src, got, c.want)
		}
	}
}

func TestDetectContentFormat(t *testing.T) {
	for _, c := range []struct {
		src  string
		want ContentFormat
	}{
		{"{% for m in messages %}{{ m.content }}{% endfor %}", ContentString},
		{"{% for m in messages %}{% for part in m.content %}{{ part.text }}{% endfor %}{% endfor %}", ContentParts},
		{"{% for m in messages %}{% for part in m['content'] %}{{ part.text }}{% endfor %}{% endfor %}", ContentParts},
		{"{%- for message in messages %}{%- set content = message['content'] %}{%- for c in content if c.type == 'text' %}{{ c.text }}{% endfor %}{% endfor %}", ContentParts},
		{"{% for m in messages %}{{ '{% for x in m.content %}' }}{% endfor %}", ContentString}, // in a string
		{"{% for m in messages %}{% for t in m.content | selectattr('type', 'equalto', 'text') %}{{ t.text }}{% endfor %}{% endfor %}", ContentParts},
	} {
		if got := DetectContentFormat(c.src); got != c.want {
			t.Errorf("DetectContentFormat(%q) = %v, want %v", c.src, got, c.want)
		}
	}
}

func TestTojson(t *testing.T) {
	val := func(s string) jinja.Value {
		v, err := jsonValue([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	x := val(`{"z": [1, 2.5, -0.0, 1e-7, 1.0, 12345678901234567890, "a\"b\\c\n\t\u0001\u007f\u2028é😀"], "a": {}, "b": [], "c": null, "d": true}`)
	for _, c := range []struct {
		name   string
		kwargs map[string]jinja.Value
		want   string
	}{
		{"default", nil, `{"z": [1, 2.5, -0.0, 1e-07, 1.0, 1.2345678901234567e+19, "a\"b\\c\n\t\u0001` + "\u007f\u2028é😀" + `"], "a": {}, "b": [], "c": null, "d": true}`},
		{"indent", map[string]jinja.Value{"indent": jinja.NewInt(2)}, "{\n  \"z\": [\n    1,\n    2.5,\n    -0.0,\n    1e-07,\n    1.0,\n    1.2345678901234567e+19,\n    \"a\\\"b\\\\c\\n\\t\\u0001\u007f\u2028é😀\"\n  ],\n  \"a\": {},\n  \"b\": [],\n  \"c\": null,\n  \"d\": true\n}"},
		{"ascii+sort+separators", map[string]jinja.Value{"ensure_ascii": jinja.NewBool(true), "sort_keys": jinja.NewBool(true), "separators": jinja.NewList([]jinja.Value{jinja.NewString(","), jinja.NewString(":")})},
			`{"a":{},"b":[],"c":null,"d":true,"z":[1,2.5,-0.0,1e-07,1.0,1.2345678901234567e+19,"a\"b\\c\n\t\u0001\u007f\u2028\u00e9\ud83d\ude00"]}`},
	} {
		out, err := tojsonFilter([]jinja.Value{x}, c.kwargs)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if out.AsString() != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, out.AsString(), c.want)
		}
	}
	for f, want := range map[float64]string{0.1: "0.1", 100: "100.0", 1e15: "1000000000000000.0", 1e16: "1e+16", 1.5e-5: "1.5e-05", 0.0001: "0.0001", 123456.789: "123456.789", -2.5e300: "-2.5e+300"} {
		if got := pyFloatJSON(f); got != want {
			t.Errorf("pyFloatJSON(%v) = %s, want %s", f, got, want)
		}
	}
	// In a template: the rename reaches | tojson but not text in strings.
	got := mustRender(t, `{{ "| tojson" }} {{ messages[0] | tojson(indent=1) }}{# | tojson #}`, []ChatMessage{{Role: "user", Content: "<&>"}}, RenderOptions{})
	if want := "| tojson {\n \"role\": \"user\",\n \"content\": \"<&>\"\n}"; got != want {
		t.Errorf("template tojson: got %q, want %q", got, want)
	}
}

func TestStrftimeNow(t *testing.T) {
	at := time.Date(2024, time.July, 5, 14, 3, 9, 0, time.UTC)
	if got, want := Strftime(at, "%d %b %Y|%B %-d %e|%A %a|%H:%M:%S %I%p|%y-%m %j %% %Q"), "05 Jul 2024|July 5  5|Friday Fri|14:03:09 02PM|24-07 187 % %Q"; got != want {
		t.Errorf("Strftime = %q, want %q", got, want)
	}
	got := mustRender(t, `{{ strftime_now("%d %b %Y") }}`, []ChatMessage{{Role: "user", Content: "x"}}, RenderOptions{Now: at})
	if got != "05 Jul 2024" {
		t.Errorf("strftime_now = %q", got)
	}
}

func TestToolUseTemplateFromGGUF(t *testing.T) {
	v := spmTestVocab("▁hi")
	w := gguf.NewWriter()
	w.Set(KeyModel, "llama")
	w.Set(KeyTokens, v.Tokens)
	w.Set(KeyScores, v.Scores)
	w.Set(KeyTokenType, v.Types)
	w.Set(KeyChatTemplate, "default:{{ messages[0].content }}")
	w.Set(KeyChatTemplate+".tool_use", "tool_use:{{ tools | length }}")
	w.Set(KeyChatTemplates, []string{"rag"})
	w.Set(KeyChatTemplate+".rag", "rag:{{ documents | length }}")
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tok.ChatTemplateNames(), ","); got != "default,rag,tool_use" {
		t.Errorf("ChatTemplateNames = %s", got)
	}
	msgs := []ChatMessage{{Role: "user", Content: "q"}}
	tools := []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f"}}`)}
	for _, c := range []struct {
		opts RenderOptions
		want string
	}{
		{RenderOptions{}, "default:q"},
		{RenderOptions{Tools: tools}, "tool_use:1"},
		{RenderOptions{Tools: tools, Template: "default"}, "default:q"},
		{RenderOptions{Template: "rag", Kwargs: map[string]any{"documents": []any{"a", "b"}}}, "rag:2"},
	} {
		got, err := tok.RenderChat(msgs, c.opts)
		if err != nil || got != c.want {
			t.Errorf("RenderChat(%+v) = %q, %v; want %q", c.opts, got, err, c.want)
		}
	}
	if _, err := tok.RenderChat(msgs, RenderOptions{Template: "nope"}); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("unknown template: err = %v", err)
	}
	plain := mustNew(t, Vocab{Model: v.Model, Tokens: v.Tokens, Scores: v.Scores, Types: v.Types, ChatTemplate: "default:{{ messages[0].content }}"})
	if tok.Digest() == plain.Digest() {
		t.Error("named templates do not change the digest")
	}
	// The old API still works.
	if got, err := tok.ApplyChatTemplate([]Message{{"user", "q"}}, true); err != nil || got != "default:q" {
		t.Errorf("ApplyChatTemplate = %q, %v", got, err)
	}
}

// TestRenderChatCompileError: a template that does not compile reports
// itself, whichever API renders it.
func TestRenderChatCompileError(t *testing.T) {
	_, err := RenderChatWith("{% for %}", []ChatMessage{{Role: "user", Content: "x"}}, RenderOptions{}, "", "")
	if !errors.Is(err, ErrChatTemplate) {
		t.Errorf("err = %v", err)
	}
	if _, err := RenderChatWith("ok", nil, RenderOptions{}, "", ""); !errors.Is(err, ErrChatTemplate) {
		t.Errorf("no messages: err = %v", err)
	}
}

// TestWhitespaceMatchesJinja2 renders the whitespace-control corners with
// Stockpot and with Jinja2 set up as transformers sets it up.
func TestWhitespaceMatchesJinja2(t *testing.T) {
	srcs := []string{
		"{% for m in messages %}{{ m.role }}\n{% endfor %}|",
		"{{ 'a' }} {{ 'b' }}{# c #}|{{ 'x' }}  {% if true %}y{% endif %}",
		"a\n  {# c #}\nb|x {% if true %}\ny{% endif %}",
		"{% if true %}{% if true %}\n\nw{% endif %}{% endif %}",
		"\n\t{%+ if true %}p{% endif +%}\nq",
		"  {% if true %}\n  lead\n  {% endif %}\n{%- if true -%}\n\n  dash  \n\n{%- endif -%}  tail ",
		"\"results\": {\n{%- for m in messages %}{{ m.role }}{% endfor %}}",
		"{# x #}{# y #}\n{{- 'z' -}}\n\n{% set v %}\n  in\n{% endset %}[{{ v }}]",
		"{% macro f(x) %}\n  <{{ x }}>\n{% endmacro %}\n{{ f(1) }}{{ f(2) }}\r\n{% if true %}\r\nr{% endif %}",
		"{%- for m in messages -%}\n    {{- m.content }}\n    {%- if not loop.last %}, {% endif %}\n{%- endfor %}\n",
		"{{ '{' }}{ {%- if true %}}{% endif %}",
		"trailing newline dropped\n",
		"two kept\n\n",
	}
	var cases []refCase
	msgs := []ChatMessage{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}
	var got []string
	for _, src := range srcs {
		p := prepareTemplate(src)
		out, ctx, err := renderCtx(p, msgs, RenderOptions{}, "", "")
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		got = append(got, out)
		cases = append(cases, refCase{Template: src, Context: refContext(t, ctx)})
	}
	for i, r := range renderJinja2(t, cases) {
		if r.Text == nil {
			t.Errorf("%q: Jinja2 failed: %s", srcs[i], r.Error)
			continue
		}
		if got[i] != *r.Text {
			t.Errorf("%q:\n got %q\nwant %q (Jinja2)", srcs[i], got[i], *r.Text)
		}
	}
}
