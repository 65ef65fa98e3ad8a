package pipeline

import (
	"encoding/json"

	"stockpot/internal/api"
	"stockpot/internal/miss"
)

// Dialects of request bodies RenderRequest knows, by the path serve takes them on.
const (
	PathChat        = "/v1/chat/completions"
	PathCompletions = "/v1/completions"
	PathResponses   = "/v1/responses"
	PathMessages    = "/v1/messages"
)

// RenderedPrompt is a request body as serve would see it: the prompt's tokens, the chat's
// parts and the cache salt.
type RenderedPrompt struct {
	Tokens   []int32
	Segments []miss.Segment // nil for completions
	Salt     string
}

// RenderRequest parses body as serve parses a request on path and renders and tokenizes its
// prompt the same way (chat template, tools, BOS), with no length limit. It is for tools
// that analyse request logs offline (stockpot lint). A Responses body's
// previous_response_id cannot be followed offline and is ignored. Errors are *api.Error.
func RenderRequest(tok Tokenizer, path string, body []byte) (*RenderedPrompt, error) {
	p := New(tok, Config{ContextLength: 1 << 30, MaxPromptTokens: 1 << 30})
	var chat *api.ChatRequest
	switch path {
	case PathCompletions:
		req, err := api.ParseCompletionRequest(body)
		if err != nil {
			return nil, err
		}
		ids := req.PromptTokens
		if !req.PromptIsTokens {
			ids = tok.Encode(req.PromptText, true, true)
		}
		return &RenderedPrompt{Tokens: ids, Salt: req.CacheSalt}, nil
	case PathChat:
		req, err := api.ParseChatRequest(body)
		if err != nil {
			return nil, err
		}
		chat = req
	case PathResponses:
		req, err := api.ParseResponsesRequest(body)
		if err != nil {
			return nil, err
		}
		if chat, err = req.ChatRequest(nil); err != nil {
			return nil, err
		}
	case PathMessages:
		req, err := api.ParseMessagesRequest(body, false)
		if err != nil {
			return nil, err
		}
		chat = req.Chat
	default:
		return nil, api.Invalid("", "unknown request path %q", path)
	}
	text, ids, err := p.ChatPrompt(chat)
	if err != nil {
		return nil, err
	}
	return &RenderedPrompt{Tokens: ids, Segments: p.segments(chat, text, ids), Salt: chat.CacheSalt}, nil
}

// DialectOf guesses which endpoint a logged request body was sent to: a "prompt" is a
// completion, an "input" a Responses request, "messages" a chat, or Anthropic Messages when
// the body has a top-level "system", tools with "input_schema", or content blocks of
// Anthropic's types.
func DialectOf(body []byte) string {
	var probe struct {
		Prompt   json.RawMessage `json:"prompt"`
		Input    json.RawMessage `json:"input"`
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		AnthropicVersion string `json:"anthropic_version"`
	}
	if json.Unmarshal(body, &probe) != nil {
		return PathChat // the parser names the problem
	}
	switch {
	case probe.Prompt != nil:
		return PathCompletions
	case probe.Input != nil:
		return PathResponses
	case probe.System != nil || probe.AnthropicVersion != "":
		return PathMessages
	}
	for _, t := range probe.Tools {
		if t.InputSchema != nil {
			return PathMessages
		}
	}
	for _, m := range probe.Messages {
		var blocks []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Content, &blocks) == nil {
			for _, b := range blocks {
				switch b.Type {
				case "tool_use", "tool_result", "thinking", "document":
					return PathMessages
				}
			}
		}
	}
	return PathChat
}
