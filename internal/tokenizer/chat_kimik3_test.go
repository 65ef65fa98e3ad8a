package tokenizer

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Kimi-K3's template exercises more of the engine than the common conversations of
// refConversations reach: macros with default arguments, namespaces mutated inside
// macros, dictsort at every level of a tool schema, tojson(ensure_ascii=false) of each
// argument value, slices of messages, {% break %}, and its own variables (thinking,
// thinking_effort, tool_choice, response_format, response_schema). These cases drive
// each of its branches, and each is compared byte for byte with Jinja2 as transformers
// sets it up (and @huggingface/jinja, logged), the way TestChatTemplatesMatchReference
// compares the common ones.

var (
	k3Weather = ToolCall{ID: "call_w", Type: "function", Name: "get_weather", Arguments: `{"city": "Paris", "unit": "celsius"}`}
	// Every JSON type as an argument value: strings raw, the others as JSON in the
	// argument's type attribute.
	k3Typed = ToolCall{ID: "call_t", Type: "function", Name: "search", Arguments: `{"query": "Rome & \"Milan\" <b>", "max_results": 2, "ratio": 1.5, "exact": false, "filter": null, "tags": ["a", "é"], "opts": {"z": 1, "a": {"y": [true]}}}`}
	k3Empty = ToolCall{ID: "call_e", Type: "function", Name: "ping", Arguments: `{}`}
)

func kimiK3Conversations() []refConversation {
	sys := ChatMessage{Role: "system", Content: "You are Kimi."}
	user := ChatMessage{Role: "user", Content: "What is the capital of France?"}
	user2 := ChatMessage{Role: "user", Content: "And of Italy?"}
	reasoned := ChatMessage{Role: "assistant", Content: "Paris.", ReasoningContent: "France's capital is Paris."}
	blankReasoning := ChatMessage{Role: "assistant", Content: "Paris.", ReasoningContent: "  \n "}
	wUser := ChatMessage{Role: "user", Content: "Weather in Paris and Rome, and search?"}
	calls := ChatMessage{Role: "assistant", Content: "Checking.", ReasoningContent: "Two lookups.", ToolCalls: []ToolCall{k3Weather, k3Typed, k3Empty}}
	onlyCalls := ChatMessage{Role: "assistant", Content: nil, ToolCalls: []ToolCall{k3Weather}}
	rW := ChatMessage{Role: "tool", ToolCallID: "call_w", Content: `{"temperature": 21}`}
	rT := ChatMessage{Role: "tool", ToolCallID: "call_t", Content: "Sunny all week."}
	rE := ChatMessage{Role: "tool", ToolCallID: "call_e", Content: "pong"}
	answer := ChatMessage{Role: "assistant", Content: "21 °C and sunny.", ReasoningContent: "Summarize."}
	tools := []json.RawMessage{weatherTool, searchTool, json.RawMessage(`{"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}`)}
	gen := RenderOptions{AddGenerationPrompt: true}
	withTools := RenderOptions{AddGenerationPrompt: true, Tools: tools}
	kw := func(o RenderOptions, kv ...any) RenderOptions {
		o.Kwargs = map[string]any{}
		for i := 0; i < len(kv); i += 2 {
			o.Kwargs[kv[i].(string)] = kv[i+1]
		}
		return o
	}
	schema := map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}, "age": map[string]any{"type": "integer", "minimum": 0}}, "required": []any{"name"}}
	return []refConversation{
		{"k3-user", []ChatMessage{user}, gen},
		{"k3-system", []ChatMessage{sys, user}, gen},
		{"k3-named", []ChatMessage{
			{Role: "system", Content: "S", Name: `ops "night" & day`},
			{Role: "user", Content: "hi", Name: "ann"},
			{Role: "assistant", Content: "hello", Name: "kimi"},
			{Role: "user", Content: "bye"},
		}, gen},
		{"k3-reasoning", []ChatMessage{sys, user, reasoned, user2}, gen},
		{"k3-reasoning-blank", []ChatMessage{user, blankReasoning, user2}, gen},
		{"k3-reasoning-thinking-off", []ChatMessage{sys, user, reasoned, user2}, kw(gen, "thinking", false)},
		{"k3-closed-turn", []ChatMessage{user, reasoned}, RenderOptions{}},
		{"k3-thinking-off", []ChatMessage{user}, kw(gen, "thinking", false)},
		{"k3-effort-low", []ChatMessage{user}, kw(gen, "thinking_effort", "low")},
		{"k3-effort-high", []ChatMessage{user}, kw(gen, "thinking_effort", "high")},
		{"k3-effort-none", []ChatMessage{user}, kw(gen, "thinking_effort", nil)},
		{"k3-effort-medium", []ChatMessage{user}, kw(gen, "thinking_effort", "medium")}, // the template raises
		{"k3-effort-medium-thinking-off", []ChatMessage{user}, kw(gen, "thinking_effort", "medium", "thinking", false)},
		{"k3-tools", []ChatMessage{sys, wUser}, withTools},
		{"k3-tool-calls", []ChatMessage{sys, wUser, calls}, RenderOptions{Tools: tools}},
		{"k3-only-calls", []ChatMessage{wUser, onlyCalls}, RenderOptions{Tools: tools}},
		{"k3-tool-results-by-id", []ChatMessage{sys, wUser, calls, rW, rT, rE}, withTools},
		// Results in another order than the calls: the template writes them in call order.
		{"k3-tool-results-reordered", []ChatMessage{sys, wUser, calls, rE, rW, rT}, withTools},
		// No ids: names come from the calls by position.
		{"k3-tool-results-no-ids", []ChatMessage{wUser, calls,
			{Role: "tool", Content: "a"}, {Role: "tool", Content: "b"}, {Role: "tool", Content: "c"}}, withTools},
		// One id that matches no call: the run is written as it came, names from `name`.
		{"k3-tool-results-unmatched", []ChatMessage{wUser, calls,
			{Role: "tool", ToolCallID: "call_w", Content: "a"}, {Role: "tool", ToolCallID: "nope", Name: "search", Content: "b"}}, withTools},
		// A `tool` field names the tool over `name`.
		{"k3-tool-result-tool-field", []ChatMessage{wUser, onlyCalls,
			{Role: "tool", Name: "ignored", Content: "x", Extra: map[string]json.RawMessage{"tool": json.RawMessage(`"get_weather"`)}}}, withTools},
		{"k3-tool-session", []ChatMessage{sys, wUser, calls, rW, rT, rE, answer, user2}, withTools},
		// More results than calls, without names: the template raises.
		{"k3-tool-result-unnamed", []ChatMessage{wUser, onlyCalls, {Role: "tool", Content: "a"}, {Role: "tool", Content: "b"}}, withTools},
		{"k3-dynamic-tools", []ChatMessage{
			{Role: "system", Content: "", Extra: map[string]json.RawMessage{"tools": json.RawMessage(`[{"type":"function","function":{"name":"late","description":"Loaded later.","parameters":{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}}}]`)}},
			wUser}, withTools},
		{"k3-tool-choice-required", []ChatMessage{wUser}, kw(withTools, "tool_choice", "required")},
		{"k3-tool-choice-none", []ChatMessage{wUser}, kw(withTools, "tool_choice", "none")},
		{"k3-tool-choice-auto", []ChatMessage{wUser}, kw(withTools, "tool_choice", "auto")},
		{"k3-json-schema", []ChatMessage{user}, kw(gen, "response_format", map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "person", "strict": true, "schema": schema}})},
		{"k3-json-schema-bare", []ChatMessage{user}, kw(gen, "response_format", map[string]any{"type": "json_schema", "json_schema": schema})},
		{"k3-json-object", []ChatMessage{user}, kw(gen, "response_format", map[string]any{"type": "json_object"})},
		{"k3-response-schema", []ChatMessage{user}, kw(gen, "response_format", "json_schema", "response_schema", schema)},
		{"k3-everything", []ChatMessage{sys, wUser, calls, rW, rT, rE, answer, user2},
			kw(withTools, "thinking_effort", "low", "tool_choice", "required", "response_format", map[string]any{"type": "json_object"})},
		{"k3-content-parts", []ChatMessage{
			{Role: "user", Content: []ContentPart{{Type: "text", Text: "Describe"}, {Type: "image_url"}, {Type: "text", Text: "this."}}},
		}, gen},
		{"k3-image-placeholder-text", []ChatMessage{{Role: "user", Content: "see <|kimi_image_placeholder|> here"}}, gen},
		{"k3-no-role", []ChatMessage{{Role: "user", Content: "x"}, {Role: "", Content: "y"}}, gen},
	}
}

// TestKimiK3MatchesReference renders kimiK3Conversations with Kimi-K3's template and
// compares with Jinja2, failing on any difference (there is no known one for this
// template), and checks that the refusals come back as the template's own messages.
func TestKimiK3MatchesReference(t *testing.T) {
	outs := compareWithReference(t, map[string]string{"Kimi-K3": TemplateKimiK3}, kimiK3Conversations())
	refused := map[string]string{}
	for _, o := range outs {
		if !o.got.same(o.py) {
			t.Errorf("%s: Stockpot differs from Jinja2 (@huggingface/jinja %s): %s", o.conv, agreeWord(o.got.same(o.hf)), describe(o.got, o.py))
			continue
		}
		if !o.got.same(o.hf) {
			t.Logf("%s: @huggingface/jinja differs from Jinja2 and Stockpot: %s", o.conv, describe(o.got, o.hf))
		}
		if o.got.err != "" {
			refused[o.conv] = o.got.err
		}
	}
	// The refusals are the template's, each for its reason (and not an engine failure
	// that both engines happen to share).
	want := map[string]string{
		"k3-effort-medium":              "Unsupported thinking_effort=medium",
		"k3-tool-result-unnamed":        "Kimi K3 tool messages need a resolvable tool name",
		"k3-no-role":                    "", // "role" is always set: an empty role is no branch, not an error
		"k3-effort-medium-thinking-off": "",
	}
	for conv, msg := range want {
		got, ok := refused[conv]
		if msg == "" {
			if ok {
				t.Errorf("%s: refused (%s), want a rendering", conv, got)
			}
			continue
		}
		if !ok || !strings.Contains(got, msg) {
			t.Errorf("%s: error %q, want the template's %q", conv, got, msg)
		}
	}
	for conv := range refused {
		if _, ok := want[conv]; !ok {
			t.Errorf("%s: refused: %s", conv, refused[conv])
		}
	}
}

// TestKimiK3StringArguments: a client's arguments reach the template as dicts, which it
// writes as one typed argument tag per key. A template given the JSON text instead (the
// engine's second try for templates written for strings) writes one json block. Both
// paths are compared with Jinja2.
func TestKimiK3StringArguments(t *testing.T) {
	msgs := []ChatMessage{{Role: "user", Content: "w?"}, {Role: "assistant", ToolCalls: []ToolCall{k3Weather, k3Typed, {ID: "x", Name: "ping", Arguments: "  "}}}}
	tools := []json.RawMessage{weatherTool, searchTool}
	p := prepareTemplate(TemplateKimiK3)
	if p.stringArgs {
		t.Fatal("Kimi-K3's template is detected as wanting string arguments; it takes dicts")
	}
	asDicts, _, err := renderCtx(p, msgs, RenderOptions{Tools: tools}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`<|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="unit" type="string"<|sep|>celsius<|close|>argument<|sep|><|close|>call<|sep|>`,
		`<|open|>argument key="query" type="string"<|sep|>Rome & "Milan" <b><|close|>argument<|sep|>`,
		`<|open|>argument key="ratio" type="number"<|sep|>1.5<|close|>argument<|sep|>`,
		`<|open|>argument key="filter" type="null"<|sep|>null<|close|>argument<|sep|>`,
		`<|open|>argument key="tags" type="array"<|sep|>["a", "é"]<|close|>argument<|sep|>`,
		`<|open|>argument key="opts" type="object"<|sep|>{"z": 1, "a": {"y": [true]}}<|close|>argument<|sep|>`,
	} {
		if !strings.Contains(asDicts, want) {
			t.Errorf("dict arguments: rendering lacks %q:\n%s", want, asDicts)
		}
	}
	strArgs := *p
	strArgs.stringArgs = true
	asStrings, ctx, err := renderCtx(&strArgs, msgs, RenderOptions{Tools: tools}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := `<|open|>call tool="get_weather" index="1"<|sep|><|open|>json type="object"<|sep|>{"city": "Paris", "unit": "celsius"}<|close|>json<|sep|><|close|>call<|sep|>`; !strings.Contains(asStrings, want) {
		t.Errorf("string arguments: rendering lacks %q:\n%s", want, asStrings)
	}
	// Blank string arguments: no json block at all.
	if want := `<|open|>call tool="ping" index="3"<|sep|><|close|>call<|sep|>`; !strings.Contains(asStrings, want) {
		t.Errorf("blank arguments: rendering lacks %q:\n%s", want, asStrings)
	}
	py := renderJinja2(t, []refCase{{Template: TemplateKimiK3, Context: refContext(t, ctx), Now: refNow.Format("2006-01-02T15:04:05Z")}})
	if got := fromRef(py[0]); !got.same(rendering{text: asStrings}) {
		t.Errorf("string arguments differ from Jinja2: %s", describe(rendering{text: asStrings}, got))
	}
}

// TestKimiK3Refusals: what the template refuses reaches the caller as a *TemplateError
// carrying its message (the server answers 400 with it), never as a panic or an engine
// error.
func TestKimiK3Refusals(t *testing.T) {
	for _, c := range []struct {
		name string
		msgs []ChatMessage
		opts RenderOptions
		want string
	}{
		{"effort", []ChatMessage{{Role: "user", Content: "x"}}, RenderOptions{Kwargs: map[string]any{"thinking_effort": "medium"}}, "Unsupported thinking_effort=medium; supported values are low, high, and max."},
		{"unnamed result", []ChatMessage{{Role: "user", Content: "x"}, {Role: "tool", Content: "r"}}, RenderOptions{}, "Kimi K3 tool messages need a resolvable tool name"},
		{"nameless call", []ChatMessage{{Role: "user", Content: "x"}, {Role: "assistant", Extra: map[string]json.RawMessage{"tool_calls": json.RawMessage(`[{"function": {"arguments": {}}}]`)}}}, RenderOptions{}, "Kimi K3 tool calls require a function name."},
		{"call not a mapping", []ChatMessage{{Role: "user", Content: "x"}, {Role: "assistant", Extra: map[string]json.RawMessage{"tool_calls": json.RawMessage(`["f"]`)}}}, RenderOptions{}, "Kimi K3 tool calls must be mappings."},
		{"bad arguments", []ChatMessage{{Role: "user", Content: "x"}, {Role: "assistant", Extra: map[string]json.RawMessage{"tool_calls": json.RawMessage(`[{"function": {"name": "f", "arguments": [1]}}]`)}}}, RenderOptions{}, "Kimi K3 tool call arguments must be a mapping or a JSON object string."},
	} {
		_, err := RenderChatWith(TemplateKimiK3, c.msgs, c.opts, "", "")
		var te *TemplateError
		if !errors.As(err, &te) || !strings.Contains(te.Message, c.want) {
			t.Errorf("%s: err = %v, want the template's %q", c.name, err, c.want)
		}
	}
}
