package toolcall

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Envelope is the text a family writes around calls, for building a grammar that
// constrains generation to well-formed calls:
//
//	SectionBegin CallBegin(name0, 0) ARGS CallEnd Separator CallBegin(name1, 1) ARGS CallEnd … SectionEnd
//
// With ArgsAreJSON, ARGS is the call's arguments as a JSON object. Otherwise the family
// writes arguments its own way (XML parameters) and Format is the reference.
type Envelope struct {
	SectionBegin, SectionEnd string
	Separator                string
	CallBegin                func(name string, index int) string
	CallEnd                  string
	ArgsAreJSON              bool
}

// EnvelopeOf returns the envelope of family f; false for None.
func EnvelopeOf(f Family) (Envelope, bool) {
	q := jsonString
	switch f {
	case Hermes:
		return Envelope{Separator: "\n", ArgsAreJSON: true, CallEnd: "}\n</tool_call>",
			CallBegin: func(n string, _ int) string { return "<tool_call>\n{\"name\": " + q(n) + ", \"arguments\": " }}, true
	case Qwen3Coder:
		return Envelope{Separator: "\n", CallEnd: "</function>\n</tool_call>",
			CallBegin: func(n string, _ int) string { return "<tool_call>\n<function=" + n + ">\n" }}, true
	case GLM:
		return Envelope{Separator: "\n", CallEnd: "</tool_call>",
			CallBegin: func(n string, _ int) string { return "<tool_call>" + n + "\n" }}, true
	case Llama3:
		return Envelope{Separator: "; ", ArgsAreJSON: true, CallEnd: "}",
			CallBegin: func(n string, _ int) string { return "{\"name\": " + q(n) + ", \"parameters\": " }}, true
	case Mistral:
		return Envelope{SectionBegin: "[TOOL_CALLS][", SectionEnd: "]", Separator: ", ", ArgsAreJSON: true, CallEnd: "}",
			CallBegin: func(n string, _ int) string { return "{\"name\": " + q(n) + ", \"arguments\": " }}, true
	case MistralArgs:
		return Envelope{ArgsAreJSON: true,
			CallBegin: func(n string, _ int) string { return "[TOOL_CALLS]" + n + "[ARGS]" }}, true
	case DeepSeekR1:
		return Envelope{SectionBegin: "<｜tool▁calls▁begin｜>", SectionEnd: "<｜tool▁calls▁end｜>", Separator: "\n",
			ArgsAreJSON: true, CallEnd: "\n```<｜tool▁call▁end｜>",
			CallBegin: func(n string, _ int) string {
				return "<｜tool▁call▁begin｜>function<｜tool▁sep｜>" + n + "\n```json\n"
			}}, true
	case DeepSeekV3:
		return Envelope{SectionBegin: "<｜tool▁calls▁begin｜>", SectionEnd: "<｜tool▁calls▁end｜>",
			ArgsAreJSON: true, CallEnd: "<｜tool▁call▁end｜>",
			CallBegin: func(n string, _ int) string { return "<｜tool▁call▁begin｜>" + n + "<｜tool▁sep｜>" }}, true
	case Kimi:
		return Envelope{SectionBegin: "<|tool_calls_section_begin|>", SectionEnd: "<|tool_calls_section_end|>",
			ArgsAreJSON: true, CallEnd: "<|tool_call_end|>",
			CallBegin: func(n string, i int) string {
				return "<|tool_call_begin|>functions." + n + ":" + strconv.Itoa(i) + "<|tool_call_argument_begin|>"
			}}, true
	case KimiK3:
		return Envelope{SectionBegin: k3ToolsOpen, SectionEnd: k3ToolsClose, ArgsAreJSON: true,
			CallEnd: "<|close|>json<|sep|><|close|>call<|sep|>",
			CallBegin: func(n string, i int) string {
				return `<|open|>call tool="` + k3Escape(n) + `" index="` + strconv.Itoa(i+1) + `"<|sep|><|open|>json type="object"<|sep|>`
			}}, true
	case MiniMax:
		return Envelope{SectionBegin: "<minimax:tool_call>\n", SectionEnd: "</minimax:tool_call>", CallEnd: "</invoke>\n",
			CallBegin: func(n string, _ int) string { return `<invoke name="` + n + `">` + "\n" }}, true
	case Granite:
		return Envelope{SectionBegin: "<|tool_call|>[", SectionEnd: "]", Separator: ", ", ArgsAreJSON: true, CallEnd: "}",
			CallBegin: func(n string, _ int) string { return "{\"name\": " + q(n) + ", \"arguments\": " }}, true
	case Apriel:
		return Envelope{SectionBegin: "<tool_calls>[", SectionEnd: "]</tool_calls>", Separator: ", ", ArgsAreJSON: true, CallEnd: "}",
			CallBegin: func(n string, _ int) string { return "{\"name\": " + q(n) + ", \"arguments\": " }}, true
	case Firefunction:
		return Envelope{SectionBegin: " functools[", SectionEnd: "]", Separator: ", ", ArgsAreJSON: true, CallEnd: "}",
			CallBegin: func(n string, _ int) string { return "{\"name\": " + q(n) + ", \"arguments\": " }}, true
	case CommandR:
		return Envelope{SectionBegin: "<|START_ACTION|>[\n", SectionEnd: "\n]<|END_ACTION|>", Separator: ",\n", ArgsAreJSON: true, CallEnd: "}",
			CallBegin: func(n string, i int) string {
				return "    {\"tool_call_id\": \"" + strconv.Itoa(i) + "\", \"tool_name\": " + q(n) + ", \"parameters\": "
			}}, true
	case SeedOSS:
		return Envelope{Separator: "\n", CallEnd: "</function>\n</seed:tool_call>",
			CallBegin: func(n string, _ int) string { return "<seed:tool_call>\n<function=" + n + ">\n" }}, true
	case Functionary:
		return Envelope{ArgsAreJSON: true, CallEnd: "</function>",
			CallBegin: func(n string, _ int) string { return "<function=" + n + ">" }}, true
	}
	return Envelope{}, false
}

// Format writes calls the way family f's model emits them (Parse's inverse for valid
// calls). XML families write each argument in its own tag: strings raw, other values as
// JSON. Arguments that are not a JSON object are written as {}.
func Format(f Family, calls []Call) string {
	env, ok := EnvelopeOf(f)
	if !ok || len(calls) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(env.SectionBegin)
	for i, c := range calls {
		if i > 0 {
			b.WriteString(env.Separator)
		}
		b.WriteString(env.CallBegin(c.Name, i))
		if env.ArgsAreJSON {
			args, ok := normArgs(c.Arguments)
			if !ok {
				args = "{}"
			}
			b.WriteString(args)
		} else {
			for _, kv := range orderedArgs(c.Arguments) {
				switch f {
				case SeedOSS:
					b.WriteString("<parameter=" + kv.key + ">" + kv.text() + "</parameter>\n")
				case Qwen3Coder:
					b.WriteString("<parameter=" + kv.key + ">\n" + kv.text() + "\n</parameter>\n")
				case GLM:
					b.WriteString("<arg_key>" + kv.key + "</arg_key>\n<arg_value>" + kv.text() + "</arg_value>\n")
				case MiniMax:
					b.WriteString(`<parameter name="` + kv.key + `">` + kv.text() + "</parameter>\n")
				}
			}
		}
		b.WriteString(env.CallEnd)
	}
	b.WriteString(env.SectionEnd)
	return b.String()
}

type keyValue struct {
	key string
	raw json.RawMessage
}

// text is the value as an XML family writes it: a string raw, anything else as JSON.
func (kv keyValue) text() string {
	var s string
	if len(kv.raw) > 0 && kv.raw[0] == '"' && json.Unmarshal(kv.raw, &s) == nil {
		return s
	}
	return string(kv.raw)
}

// orderedArgs lists the members of a JSON object in their order.
func orderedArgs(args string) []keyValue {
	dec := json.NewDecoder(strings.NewReader(args))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var out []keyValue
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return out
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return out
		}
		var b bytes.Buffer
		_ = json.Compact(&b, raw) // raw came from the decoder: valid
		out = append(out, keyValue{key: key, raw: b.Bytes()})
	}
	return out
}

func k3Escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "&", "&amp;"), `"`, "&quot;")
}

// Frame is the markup a family writes around an answer that constrained decoding makes
// whole (tool calls, or a JSON document for response_format). The grammar must let the
// model write its turn as its template does around that answer, or the answer would not
// sit where the family's parser reads one: after a reasoning block the prompt opened is
// closed, and for Kimi K3 inside its response channel (content) or after it (calls), with
// the message closed at the end as the template closes it. Calls go between CallsBefore
// and CallsAfter (around the Envelope's text), content between ContentBefore and
// ContentAfter.
type Frame struct {
	CallsBefore, CallsAfter     string
	ContentBefore, ContentAfter string
}

// FrameOf is family f's frame for a generation that continues prompt (the rendered
// prompt); startsInReasoning says the prompt opened a reasoning block (see
// PromptOpensReasoning and Options.StartsInReasoning), which the answer then closes
// empty at once, so that what is constrained is the answer and not the reasoning.
func FrameOf(f Family, prompt string, startsInReasoning bool) Frame {
	if f == KimiK3 {
		var fr Frame
		switch {
		case startsInReasoning:
			fr = Frame{CallsBefore: k3ThinkClose + k3RespOpen + k3RespClose, ContentBefore: k3ThinkClose + k3RespOpen}
		case strings.LastIndex(prompt, k3RespOpen) > strings.LastIndex(prompt, k3RespClose):
			fr = Frame{CallsBefore: k3RespClose} // thinking off: the prompt opened the response channel
		default:
			fr = Frame{CallsBefore: k3RespOpen + k3RespClose, ContentBefore: k3RespOpen}
		}
		fr.CallsAfter = k3MsgClose
		fr.ContentAfter = k3RespClose + k3MsgClose
		return fr
	}
	syn := syntaxOf(f)
	if !startsInReasoning || len(syn.thinkClose) == 0 {
		return Frame{}
	}
	closeThink := syn.thinkClose[0] + "\n\n" // the blank line Qwen3's template writes after </think>
	return Frame{CallsBefore: closeThink, ContentBefore: closeThink}
}
