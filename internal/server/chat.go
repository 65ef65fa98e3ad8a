package server

import (
	"errors"
	"net/http"
	"time"

	"stockpot/internal/api"
)

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	var (
		res *genResult
		err error
	)
	defer func() { s.finishRequest(res, err, start) }()
	spec, req, err := s.prepareChat(r, start)
	if err != nil {
		writeError(w, err)
		return
	}
	c := chatWriter{s: s, req: req, prompt: spec.req.Prompt, id: newID("chatcmpl-"), created: start.Unix()}
	if req.Stream {
		res, err = c.stream(w, r, spec)
		return
	}
	var text string
	if text, res, err = s.generateAll(w, r, spec); err != nil {
		return
	}
	choice := api.ChatChoice{
		Message:      api.ChatMessage{Role: "assistant", Content: &text},
		Logprobs:     c.logprobs(res.tokens),
		FinishReason: api.FinishReasonPtr(res.finish),
	}
	resp := &api.ChatCompletionResponse{ID: c.id, Object: "chat.completion", Created: c.created,
		Model: s.cfg.ModelName, SystemFingerprint: s.cfg.Fingerprint, Choices: []api.ChatChoice{choice},
		Usage: usageOf(res.usage)}
	if req.ReturnTokenIDs {
		resp.Choices[0].TokenIDs = tokenIDs(res.tokens)
		resp.PromptTokenIDs = spec.req.Prompt
	}
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) prepareChat(r *http.Request, start time.Time) (*genSpec, *api.ChatRequest, error) {
	body, err := s.readBody(r)
	if err != nil {
		return nil, nil, err
	}
	req, err := api.ParseChatRequest(body)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkModel(req.Model); err != nil {
		return nil, nil, err
	}
	if s.draining.Load() {
		return nil, nil, api.Unavailable("the server is draining; retry on another replica")
	}
	prompt, err := s.chatPrompt(req.Messages, req.GenerationPrompt())
	if err != nil {
		return nil, nil, err
	}
	// With no max_tokens a chat may use the rest of the context, as with OpenAI and vLLM.
	defaultMax := max(s.cfg.ContextLength-len(prompt), 1)
	spec, err := s.prepare(&req.GenerationParams, prompt, req.RequestedMaxTokens(), defaultMax, req.NumTopLogprobs(), start)
	if err != nil {
		return nil, nil, err
	}
	return spec, req, nil
}

// chatWriter builds /v1/chat/completions responses and chunks for one request.
type chatWriter struct {
	s       *Server
	req     *api.ChatRequest
	prompt  []int32
	id      string
	created int64
}

// logprobs returns the chat logprobs object for toks, or nil when not asked for.
func (c *chatWriter) logprobs(toks []genToken) *api.ChatLogprobs {
	if !c.req.WantLogprobs() {
		return nil
	}
	n := c.req.NumTopLogprobs()
	lp := &api.ChatLogprobs{Content: make([]api.ChatTokenLogprob, len(toks))}
	for i, t := range toks {
		text := c.s.tokenText(t.ID)
		e := api.ChatTokenLogprob{Token: text, Logprob: api.Logprob(t.Logprob), Bytes: api.TextBytes(text),
			TopLogprobs: make([]api.ChatTopLogprob, 0, n)}
		for j, a := range t.Top {
			if j == n {
				break
			}
			at := c.s.tokenText(a.ID)
			e.TopLogprobs = append(e.TopLogprobs, api.ChatTopLogprob{Token: at, Logprob: api.Logprob(a.Logprob), Bytes: api.TextBytes(at)})
		}
		lp.Content[i] = e
	}
	return lp
}

func (c *chatWriter) chunk(delta api.ChatDelta, toks []genToken, finish *string) *api.ChatCompletionChunk {
	ch := api.ChatChunkChoice{Delta: delta, FinishReason: finish}
	if len(toks) > 0 {
		ch.Logprobs = c.logprobs(toks)
	}
	if c.req.ReturnTokenIDs && finish == nil {
		ch.TokenIDs = tokenIDs(toks)
	}
	return &api.ChatCompletionChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created,
		Model: c.s.cfg.ModelName, SystemFingerprint: c.s.cfg.Fingerprint, Choices: []api.ChatChunkChoice{ch}}
}

func (c *chatWriter) stream(w http.ResponseWriter, r *http.Request, spec *genSpec) (*genResult, error) {
	sse := newSSE(w)
	// The first chunk carries the role (and the prompt ids when asked), as OpenAI sends it.
	started := func() error {
		if err := sse.start(); err != nil {
			return err
		}
		empty := ""
		first := c.chunk(api.ChatDelta{Role: "assistant", Content: &empty}, nil, nil)
		if c.req.ReturnTokenIDs {
			first.PromptTokenIDs = c.prompt
			first.Choices[0].TokenIDs = []int32{}
		}
		return sse.send(first)
	}
	res, err := c.s.generate(r.Context(), spec, started, func(text string, toks []genToken) error {
		if text == "" && !c.req.WantLogprobs() && !c.req.ReturnTokenIDs {
			return nil
		}
		t := text
		return sse.send(c.chunk(api.ChatDelta{Content: &t}, toks, nil))
	})
	if err != nil {
		if errors.Is(err, errClientGone) {
			return nil, err
		}
		if !sse.began {
			writeError(w, err)
			return nil, err
		}
		sse.sendError(err)
		return nil, err
	}
	if err := sse.send(c.chunk(api.ChatDelta{}, nil, api.FinishReasonPtr(res.finish))); err != nil {
		return nil, errClientGone
	}
	if c.req.IncludeUsage() {
		u := &api.ChatCompletionChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created,
			Model: c.s.cfg.ModelName, SystemFingerprint: c.s.cfg.Fingerprint, Choices: []api.ChatChunkChoice{},
			Usage: usageOf(res.usage)}
		if err := sse.send(u); err != nil {
			return nil, errClientGone
		}
	}
	if err := sse.done(); err != nil {
		return nil, errClientGone
	}
	return res, nil
}
