package tokenizer

// ChatTemplateSource returns the template source RenderChat uses by default for a request
// with (tools true) or without tools: the GGUF's tool_use template when the request has tools
// and the model has one, else tokenizer.chat_template. Callers read the model family's
// tool-call syntax from it.
func (t *Tokenizer) ChatTemplateSource(tools bool) string {
	if tools {
		if src, ok := t.chatTemplates[TemplateToolUse]; ok {
			return src
		}
	}
	return t.chatTemplate
}
