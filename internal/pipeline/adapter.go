package pipeline

import "stockpot/internal/tokenizer"

// FromTokenizer adapts the model's tokenizer to Tokenizer.
func FromTokenizer(t *tokenizer.Tokenizer) Tokenizer { return tokenizerAdapter{t} }

// tokenizerAdapter fits *tokenizer.Tokenizer to Tokenizer (the method sets differ only in
// the concrete types they return).
type tokenizerAdapter struct{ *tokenizer.Tokenizer }

func (a tokenizerAdapter) NewStreamDecoder() StreamDecoder { return a.Tokenizer.NewStreamDecoder() }

func (a tokenizerAdapter) ApplyChatTemplate(msgs []Message, opts ChatOptions) (string, error) {
	return a.Tokenizer.RenderChat(TemplateMessages(msgs), tokenizer.RenderOptions{
		Tools: opts.Tools, AddGenerationPrompt: opts.AddGenerationPrompt, Kwargs: opts.Kwargs})
}

func (a tokenizerAdapter) ChatTemplate(tools bool) string {
	return a.Tokenizer.ChatTemplateSource(tools)
}

// TemplateMessages converts the pipeline's messages to the template's.
func TemplateMessages(msgs []Message) []tokenizer.ChatMessage {
	in := make([]tokenizer.ChatMessage, len(msgs))
	for i, m := range msgs {
		c := tokenizer.ChatMessage{Role: m.Role, ToolCallID: m.ToolCallID, Name: m.Name, ReasoningContent: m.Reasoning}
		switch {
		case m.NullContent:
			c.Content = nil
		case m.Parts != nil:
			parts := make([]tokenizer.ContentPart, len(m.Parts))
			for j, p := range m.Parts {
				parts[j] = tokenizer.ContentPart{Type: "text", Text: p}
			}
			c.Content = parts
		default:
			c.Content = m.Content
		}
		for _, tc := range m.ToolCalls {
			c.ToolCalls = append(c.ToolCalls, tokenizer.ToolCall{ID: tc.ID, Type: tc.Type, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		in[i] = c
	}
	return in
}

var _ Tokenizer = tokenizerAdapter{}
