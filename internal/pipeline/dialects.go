package pipeline

import (
	"context"
	"strings"

	"stockpot/internal/api"
)

// The dialects that are a chat underneath, built as Chat builds a chat, with their own
// field names in errors and what each adds.

// ChatCompletion builds a chat completions request, with the logprobs it asks for.
func (p *Pipeline) ChatCompletion(ctx context.Context, req *api.ChatRequest) (*Spec, *Plan, error) {
	logprobs := -1 // none: greedy decoding then skips the softmax (engine.Request.Logprobs)
	if req.WantLogprobs() {
		logprobs = req.NumTopLogprobs()
	}
	return p.Chat(ctx, req, req.RequestedMaxTokens(), logprobs)
}

// Messages builds an Anthropic Messages request: its chat (that API has no logprobs), and
// its cache_control breakpoints as pins (BreakpointPins).
func (p *Pipeline) Messages(ctx context.Context, req *api.MessagesRequest) (*Spec, *Plan, error) {
	mt := req.MaxTokens
	spec, plan, err := p.Chat(ctx, req.Chat, &mt, -1)
	if err != nil {
		return nil, nil, renameParams(err, messagesParams)
	}
	spec.Req.Pins, spec.Req.PinStrict = p.BreakpointPins(req, spec.Req.Prompt), req.PinStrict
	return spec, plan, nil
}

// Responses builds an OpenAI Responses request as the chat it means, continuing prior (the
// items of its previous_response_id, nil when it names none); that API has no logprobs.
func (p *Pipeline) Responses(ctx context.Context, rr *api.ResponsesRequest, prior []api.ResponsesItem) (*api.ChatRequest, *Spec, *Plan, error) {
	req, err := rr.ChatRequest(prior)
	if err != nil {
		return nil, nil, nil, err
	}
	spec, plan, err := p.Chat(ctx, req, req.RequestedMaxTokens(), -1)
	if err != nil {
		return nil, nil, nil, renameParams(err, responsesParams)
	}
	return req, spec, plan, nil
}

// The chat field names Chat's errors use, as Responses and Messages spell them.
var (
	responsesParams = []paramRename{{"response_format.json_schema.schema", "text.format.schema"}, {"response_format", "text.format"}, {".function.parameters", ".parameters"}}
	messagesParams  = []paramRename{{".function.parameters", ".input_schema"}}
)

type paramRename struct{ from, to string }

// renameParams returns err with the chat field names of its param and message renamed (the
// first rename that applies to each); an error that is not an *api.Error is returned as is.
func renameParams(err error, renames []paramRename) error {
	e, ok := err.(*api.Error)
	if !ok {
		return err
	}
	c := *e
	for _, r := range renames {
		if strings.Contains(c.Param, r.from) || strings.Contains(c.Message, r.from) {
			c.Param = strings.Replace(c.Param, r.from, r.to, 1)
			c.Message = strings.ReplaceAll(c.Message, r.from, r.to)
			break
		}
	}
	return &c
}

// Prewarm tokenizes a cache prewarm's prompt (POST /v1/cache/prewarm): text as a completion
// prompt (BOS added), tokens as given, messages rendered with the chat template (tools
// included) as a chat prompt, all within the context length.
func (p *Pipeline) Prewarm(req *api.PrewarmRequest) ([]int32, error) {
	tooLong := func() error {
		return api.Invalid("prompt", "prewarm larger than the context: more than %d tokens, the model's context length", p.cfg.ContextLength)
	}
	if c := req.Completion; c != nil {
		if c.PromptIsTokens {
			return c.PromptTokens, nil
		}
		ids, fits := p.EncodeLimit(c.PromptText, true, true, p.cfg.ContextLength)
		if !fits {
			return nil, tooLong()
		}
		return ids, nil
	}
	_, ids, fits, err := p.chatTokens(req.Chat, p.cfg.ContextLength)
	if err == nil && !fits {
		err = tooLong()
	}
	return ids, err
}

// RenderBody tokenizes a request body of any dialect as the endpoint path (PathCompletions,
// PathChat, PathResponses or PathMessages) renders it (template, tools, kwargs,
// instructions, system blocks, BOS), within the context length: a router with no tokenizer
// places a request by these tokens. check sees the body's model before anything is rendered
// (its error is returned); prior resolves a Responses body's previous_response_id (nil: none
// followed). Errors are the endpoint's own *api.Error.
func (p *Pipeline) RenderBody(path string, body []byte, check func(model string) error,
	prior func(id string) []api.ResponsesItem) ([]int32, error) {
	var chat *api.ChatRequest
	switch path {
	case PathCompletions:
		req, err := api.ParseCompletionRequest(body)
		if err == nil {
			err = check(req.Model)
		}
		if err != nil {
			return nil, err
		}
		if req.PromptIsTokens {
			return req.PromptTokens, nil
		}
		ids, fits := p.EncodeLimit(req.PromptText, true, true, p.cfg.ContextLength)
		if !fits {
			return nil, api.Invalid("prompt", "prompt has more than %d tokens, the model's context length", p.cfg.ContextLength)
		}
		return ids, nil
	case PathChat:
		req, err := api.ParseChatRequest(body)
		if err == nil {
			err = check(req.Model)
		}
		if err != nil {
			return nil, err
		}
		chat = req
	case PathResponses:
		rr, err := api.ParseResponsesRequest(body)
		if err == nil {
			err = check(rr.Model)
		}
		if err != nil {
			return nil, err
		}
		var items []api.ResponsesItem
		if id := rr.PreviousResponseID; id != "" && prior != nil {
			items = prior(id)
		}
		if chat, err = rr.ChatRequest(items); err != nil {
			return nil, err
		}
	case PathMessages:
		req, err := api.ParseMessagesRequest(body, false)
		if err == nil {
			err = check(req.Model)
		}
		if err != nil {
			return nil, err
		}
		chat = req.Chat
	default:
		return nil, api.Invalid("endpoint", "endpoint %s: want one of %s, %s, %s, %s", api.Quote(path),
			PathCompletions, PathChat, PathResponses, PathMessages)
	}
	_, ids, err := p.ChatPrompt(chat)
	return ids, err
}
