package api

import "encoding/json"

// TokenizeRequest is the body of POST /tokenize: either prompt (a completion prompt) or
// messages (a chat, rendered with the chat template first, as vLLM allows).
type TokenizeRequest struct {
	Model               string               `json:"model"`
	Prompt              *string              `json:"prompt"`
	AddSpecial          *bool                `json:"add_special"` // default true: BOS as a completion prompt gets
	Messages            []ChatRequestMessage `json:"messages"`
	AddGenerationPrompt *bool                `json:"add_generation_prompt"` // default true
	Tools               json.RawMessage      `json:"tools"`                 // as in chat, rendered with messages
	ChatTemplateKwargs  map[string]any       `json:"chat_template_kwargs"`

	ParsedTools []Tool `json:"-"`
}

// Chat returns the chat request whose prompt /tokenize renders for messages.
func (r *TokenizeRequest) Chat() *ChatRequest {
	return &ChatRequest{Messages: r.Messages, AddGenerationPrompt: r.AddGenerationPrompt,
		ChatTemplateKwargs: r.ChatTemplateKwargs, ParsedTools: r.ParsedTools}
}

// WantSpecial is add_special, default true.
func (r *TokenizeRequest) WantSpecial() bool { return r.AddSpecial == nil || *r.AddSpecial }

// GenerationPrompt is add_generation_prompt, default true.
func (r *TokenizeRequest) GenerationPrompt() bool {
	return r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
}

// DetokenizeRequest is the body of POST /detokenize.
type DetokenizeRequest struct {
	Model  string  `json:"model"`
	Tokens []int32 `json:"tokens"`
}

// ParseTokenizeRequest decodes and validates a /tokenize body. Errors are *Error.
func ParseTokenizeRequest(body []byte) (*TokenizeRequest, error) {
	var r TokenizeRequest
	if err := decodeObject(body, &r); err != nil {
		return nil, err
	}
	switch {
	case r.Prompt != nil && len(r.Messages) > 0:
		return nil, Invalid("prompt", "give either prompt or messages, not both")
	case r.Prompt == nil && len(r.Messages) == 0:
		return nil, Invalid("prompt", "prompt (a string) or messages is required")
	}
	for i := range r.Messages {
		if err := r.Messages[i].parse(i); err != nil {
			return nil, err
		}
	}
	var err error
	if r.ParsedTools, err = parseTools(r.Tools); err != nil {
		return nil, err
	}
	return &r, nil
}

// ParseDetokenizeRequest decodes a /detokenize body. Errors are *Error.
func ParseDetokenizeRequest(body []byte) (*DetokenizeRequest, error) {
	var r DetokenizeRequest
	if err := decodeObject(body, &r); err != nil {
		return nil, err
	}
	if r.Tokens == nil {
		return nil, Invalid("tokens", "tokens (an array of token ids) is required")
	}
	for i, id := range r.Tokens {
		if id < 0 {
			return nil, Invalid("tokens", "tokens[%d] = %d is not a valid token id", i, id)
		}
	}
	return &r, nil
}
