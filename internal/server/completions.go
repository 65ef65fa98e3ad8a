package server

import (
	"errors"
	"net/http"

	"stockpot/internal/api"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
)

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	var (
		res *runner.Result
		err error
	)
	defer func() { s.finishRequest(res, err, start) }()
	spec, req, err := s.prepareCompletion(r)
	if err != nil {
		writeError(w, err)
		return
	}
	c := completionWriter{s: s, req: req, prompt: spec.Req.Prompt, id: newID("cmpl-"), created: start.Unix()}
	if req.Stream {
		res, err = c.stream(w, r, spec)
		return
	}
	var text string
	if text, res, err = s.generateAll(w, r, spec); err != nil {
		return
	}
	choice := api.CompletionChoice{Text: text, FinishReason: api.FinishReasonPtr(res.Finish),
		Logprobs: c.logprobs(res.Tokens)}
	resp := c.response([]api.CompletionChoice{choice})
	resp.Usage = usageOf(res.Usage)
	if req.ReturnTokenIDs {
		resp.Choices[0].TokenIDs = runner.TokenIDs(res.Tokens)
		resp.PromptTokenIDs = spec.Req.Prompt
	}
	resp.KVTransferParams = s.registerTransfer(r, spec, res)
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) prepareCompletion(r *http.Request) (*pipeline.Spec, *api.CompletionRequest, error) {
	body, req, err := readGeneration(s, r, api.ParseCompletionRequest, func(q *api.CompletionRequest) string { return q.Model })
	if err != nil {
		return nil, nil, err
	}
	spec, err := s.pipe.Completion(req)
	if err == nil {
		err = s.cfg.Handoff.Check(spec, req.Stream) // kv_transfer_params (handoff.go)
	}
	if err != nil {
		return nil, nil, err
	}
	s.accepted(r, body, &req.GenerationParams)
	return spec, req, nil
}

// completionWriter builds /v1/completions responses and chunks for one request.
type completionWriter struct {
	s       *Server
	req     *api.CompletionRequest
	prompt  []int32
	id      string
	created int64
}

func (c *completionWriter) response(choices []api.CompletionChoice) *api.CompletionResponse {
	return &api.CompletionResponse{ID: c.id, Object: "text_completion", Created: c.created,
		Model: c.s.cfg.ModelName, SystemFingerprint: c.s.cfg.Fingerprint, Choices: choices}
}

// logprobs returns the legacy logprobs object for toks, or nil when not asked for.
func (c *completionWriter) logprobs(toks []runner.Token) *api.CompletionLogprobs {
	if c.req.Logprobs == nil {
		return nil
	}
	lp := &api.CompletionLogprobs{
		Tokens:        make([]string, len(toks)),
		TokenLogprobs: make([]api.Logprob, len(toks)),
		TopLogprobs:   make([]api.TopLogprobs, len(toks)),
		TextOffset:    make([]int, len(toks)),
	}
	for i, t := range toks {
		text := c.s.tokenText(t.ID)
		lp.Tokens[i] = text
		lp.TokenLogprobs[i] = api.Logprob(t.Logprob)
		lp.TextOffset[i] = t.Offset
		// The top alternatives best first, then the chosen token if it is not among them,
		// as vLLM does.
		top := make(api.TopLogprobs, 0, len(t.Top)+1)
		chosen := false
		for _, a := range t.Top {
			top = append(top, api.TokenLogprob{Token: c.s.tokenText(a.ID), Logprob: float64(a.Logprob)})
			chosen = chosen || a.ID == t.ID
		}
		if !chosen {
			top = append(top, api.TokenLogprob{Token: text, Logprob: float64(t.Logprob)})
		}
		lp.TopLogprobs[i] = top
	}
	return lp
}

func (c *completionWriter) stream(w http.ResponseWriter, r *http.Request, spec *pipeline.Spec) (*runner.Result, error) {
	sse := newSSE(w)
	sentPrompt := false
	chunk := func(text string, toks []runner.Token, finish *string) *api.CompletionResponse {
		ch := api.CompletionChoice{Text: text, FinishReason: finish}
		if len(toks) > 0 {
			ch.Logprobs = c.logprobs(toks)
		}
		resp := c.response([]api.CompletionChoice{ch})
		if c.req.ReturnTokenIDs {
			ch := &resp.Choices[0]
			ch.TokenIDs = runner.TokenIDs(toks)
			if ch.TokenIDs == nil {
				ch.TokenIDs = []int32{}
			}
			if !sentPrompt {
				resp.PromptTokenIDs, sentPrompt = c.prompt, true
			}
		}
		return resp
	}
	res, err := c.s.generate(r.Context(), spec, sse.start, func(text string, toks []runner.Token) error {
		if text == "" && c.req.Logprobs == nil && !c.req.ReturnTokenIDs {
			return nil
		}
		return sse.send(chunk(text, toks, nil))
	})
	if err != nil {
		if errors.Is(err, runner.ErrClientGone) {
			return nil, err
		}
		if !sse.began {
			writeError(w, err)
			return nil, err
		}
		sse.sendError(err)
		return nil, err
	}
	if err := sse.send(chunk("", nil, api.FinishReasonPtr(res.Finish))); err != nil {
		return nil, runner.ErrClientGone
	}
	if c.req.IncludeUsage() {
		resp := c.response([]api.CompletionChoice{})
		resp.Usage = usageOf(res.Usage)
		if err := sse.send(resp); err != nil {
			return nil, runner.ErrClientGone
		}
	}
	if err := sse.done(); err != nil {
		return nil, runner.ErrClientGone
	}
	return res, nil
}

// tokenText is one token's text for logprobs (bytes of a split character show as U+FFFD).
func (s *Server) tokenText(id int32) string {
	return s.tok.Decode([]int32{id})
}
