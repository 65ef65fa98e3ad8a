package tokenizer

import _ "embed"

// Real chat templates, verbatim from the model repositories as llama.cpp's
// source ships them (models/templates/, llama.cpp commit 80fb11a). They are
// model data: synthetic models carry them so that tools, tool calls and
// thinking go through the same template text a real model of that family
// has.
var (
	// TemplateQwen25 is Qwen2.5-7B-Instruct's template: ChatML with a
	// default system prompt, tools as JSON lines in <tools></tools>, calls
	// as <tool_call>{"name": ..., "arguments": ...}</tool_call> and results
	// as <tool_response> in user turns.
	//
	//go:embed templates/qwen2.5-instruct.jinja
	TemplateQwen25 string

	// TemplateQwen3Real is Qwen3-0.6B's template: Qwen2.5's tool format
	// plus <think> blocks, which it keeps only for turns after the last
	// user query, and enable_thinking.
	//
	//go:embed templates/qwen3.jinja
	TemplateQwen3Real string

	// TemplateKimiK3 is Kimi-K3's template (models/templates/Kimi-K3.jinja): its "XTML"
	// tags <|open|>tag attrs<|sep|> … <|close|>tag<|sep|>, each message ended by
	// <|end_of_msg|>; tools declared as sorted JSON in a tool-declare system message; a
	// reasoning channel (think) before the response channel, on by default (thinking,
	// thinking_effort); tool calls as call tags with one argument tag per key.
	//
	//go:embed templates/kimi-k3.jinja
	TemplateKimiK3 string
)
