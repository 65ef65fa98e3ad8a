package toolcall

import "strings"

// Family names a model family's way of writing tool calls (and reasoning).
type Family string

const (
	// None: the template shows no tool-call syntax; text is content (and reasoning).
	None Family = "none"
	// Hermes: <tool_call>{"name": …, "arguments": …}</tool_call> (Hermes 2 Pro/3,
	// Qwen2.5, QwQ, Qwen3, granite 4, MiMo-VL, …).
	Hermes Family = "hermes"
	// Qwen3Coder: <tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>
	// (Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, StepFun 3.5).
	Qwen3Coder Family = "qwen3-coder"
	// GLM: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>
	// (GLM 4.5+, poolside Laguna).
	GLM Family = "glm"
	// Llama3: the whole message is {"name": …, "parameters": …}, or follows <|python_tag|>
	// (also builtin tools: brave_search.call(query="…")).
	Llama3 Family = "llama3"
	// Mistral: [TOOL_CALLS][{"name": …, "arguments": …}, …] (Mistral Nemo).
	Mistral Family = "mistral"
	// MistralArgs: [TOOL_CALLS]NAME[ARGS]{…} (Mistral Small 3.2, Devstral, Ministral 3).
	MistralArgs Family = "mistral-args"
	// DeepSeekR1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
	// ```json {…} ```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>.
	DeepSeekR1 Family = "deepseek-r1"
	// DeepSeekV3: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>…
	// (DeepSeek V3.1).
	DeepSeekV3 Family = "deepseek-v3"
	// Kimi: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
	// <|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|> (Kimi K2).
	Kimi Family = "kimi-k2"
	// KimiK3: the <|open|>TAG<|sep|>…<|close|>TAG<|sep|> markup of Kimi K3, with think,
	// response and tools parts.
	KimiK3 Family = "kimi-k3"
	// MiniMax: <minimax:tool_call><invoke name="NAME"><parameter name="K">V</parameter>
	// </invoke></minimax:tool_call> (MiniMax M2).
	MiniMax Family = "minimax-m2"
	// Granite: <|tool_call|>[{"name": …, "arguments": …}, …] (granite 3.x).
	Granite Family = "granite"
	// Apriel: <tool_calls>[{"name": …, "arguments": …}, …]</tool_calls>.
	Apriel Family = "apriel"
	// Firefunction: functools[{"name": …, "arguments": …}, …] (firefunction v2).
	Firefunction Family = "firefunction"
	// CommandR: <|START_ACTION|>[{"tool_name": …, "parameters": …}]<|END_ACTION|>, with
	// <|START_THINKING|> reasoning and <|START_RESPONSE|>/<|START_TEXT|> wrapped content
	// (Command R7B, Cohere2 MoE).
	CommandR Family = "command-r"
	// SeedOSS: <seed:tool_call><function=NAME><parameter=K>V</parameter></function></seed:tool_call>
	// with <seed:think> reasoning (ByteDance Seed-OSS).
	SeedOSS Family = "seed-oss"
	// Functionary: <function=NAME>{…}</function> (functionary v3.1).
	Functionary Family = "functionary"
)

// Families lists every family but None.
var Families = []Family{Hermes, Qwen3Coder, GLM, Llama3, Mistral, MistralArgs, DeepSeekR1,
	DeepSeekV3, Kimi, KimiK3, MiniMax, Granite, Apriel, Firefunction, CommandR, SeedOSS, Functionary}

// Lookup returns the family with the given name ("hermes", "qwen3-coder", …, "none"),
// for configuration that overrides Detect.
func Lookup(name string) (Family, bool) {
	for _, f := range Families {
		if string(f) == name {
			return f, true
		}
	}
	if name == string(None) {
		return None, true
	}
	return "", false
}

// Template is what Inspect learns from a chat template's source.
type Template struct {
	Family Family
	// Reasoning: the template knows a reasoning block (writes or reads think markers or
	// reasoning_content).
	Reasoning bool
	// StripsReasoning: the template drops the reasoning of earlier assistant turns when it
	// renders them (informational: the prompt of the next turn will not hold it, so a
	// cached prefix that holds it will not match).
	StripsReasoning bool
}

// Detect names the tool-call family of a chat template, from markers in its source as
// llama.cpp's chat layer picks its parsers. Pass the tool_use template when a model has one.
func Detect(template string) Family { return Inspect(template).Family }

// Inspect reads a chat template's source.
func Inspect(src string) Template {
	t := Template{Family: detect(src)}
	syn := syntaxOf(t.Family)
	t.Reasoning = strings.Contains(src, "reasoning_content") || strings.Contains(src, "<think>")
	for _, m := range syn.thinkOpen {
		t.Reasoning = t.Reasoning || strings.Contains(src, m)
	}
	for _, m := range [...]string{
		"split('</think>')", `split("</think>")`, // content.split('</think>')[-1]: only the answer is kept
		"last_query_index",                 // Qwen3: reasoning only after the last user query
		"last_non_tool_call_assistant_msg", // Kimi K2 Thinking: history rendered with empty <think></think>
	} {
		t.StripsReasoning = t.StripsReasoning || strings.Contains(src, m)
	}
	return t
}

func detect(src string) Family {
	has := func(ss ...string) bool {
		for _, s := range ss {
			if !strings.Contains(src, s) {
				return false
			}
		}
		return true
	}
	switch {
	case has("<|open|>", "<|close|>", "<|end_of_msg|>"):
		return KimiK3
	case has("<|tool_calls_section_begin|>", "<|tool_call_begin|>"):
		return Kimi
	case has("<｜tool▁call▁begin｜>"):
		if has("```json") {
			return DeepSeekR1
		}
		return DeepSeekV3
	case has("[TOOL_CALLS]"):
		if has("[ARGS]") {
			return MistralArgs
		}
		return Mistral
	case has("]<]minimax[>["):
		return None // MiniMax M3's namespaced markup: not parsed here
	case has("<minimax:tool_call>"):
		return MiniMax
	case has("<seed:tool_call>"):
		return SeedOSS
	case has("<tool_call>", "<function=", "<parameter="):
		return Qwen3Coder
	case has("<tool_call>", "<arg_key>"):
		return GLM
	case has("<tool_calls>["):
		return Apriel
	case has("<|tool_call|>"):
		return Granite
	case has("<|START_ACTION|>"):
		return CommandR
	case has("functools["):
		return Firefunction
	case has("<tool_call>"):
		return Hermes
	case has("<function=", "</function>", "<|python_tag|>"):
		return Functionary
	case has("<|start_header_id|>") && (has("<|python_tag|>") || has(`"parameters": `)):
		return Llama3
	}
	return None
}

// PromptOpensReasoning reports whether a rendered prompt ends inside an open reasoning
// block of family f (the generation prompt wrote <think> and no </think>), so that the
// generation starts in reasoning: set Options.StartsInReasoning.
func PromptOpensReasoning(f Family, prompt string) bool {
	syn := syntaxOf(f)
	open, close := -1, -1
	for _, m := range syn.thinkOpen {
		open = max(open, strings.LastIndex(prompt, m))
	}
	for _, m := range syn.thinkClose {
		close = max(close, strings.LastIndex(prompt, m))
	}
	return open >= 0 && open > close
}

// Markup lists the texts family f's parser reads in a generation besides calls: its
// reasoning markers and the markers that wrap content (as read with Options.NoCalls). A
// caller that renders the model's control tokens as text only where calls are parsed
// must render them here too when these texts are made of control tokens (Kimi K3's
// <|open|>, <|sep|> and <|close|>), or the reasoning would not split from the answer.
func Markup(f Family) []string {
	syn := contentSyntaxOf(f)
	out := append(append([]string(nil), syn.thinkOpen...), syn.thinkClose...)
	return append(out, syn.texts...)
}
