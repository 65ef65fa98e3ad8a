package server

import (
	"errors"
	"net/http"
	"strings"

	"stockpot/internal/api"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
	"stockpot/internal/toolcall"
)

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	var (
		res *runner.Result
		err error
	)
	defer func() { s.finishRequest(res, err, start) }()
	spec, req, plan, err := s.prepareChat(r)
	if err != nil {
		writeError(w, err)
		return
	}
	c := chatWriter{s: s, req: req, plan: plan, prompt: spec.Req.Prompt, id: newID("chatcmpl-"), created: start.Unix()}
	if req.Stream {
		res, err = c.stream(w, r, spec)
		return
	}
	var text string
	if text, res, err = s.generateAll(w, r, spec); err != nil {
		return
	}
	msg, finish := c.message(text, res.Finish)
	choice := api.ChatChoice{
		Message:      msg,
		Logprobs:     c.logprobs(res.Tokens),
		FinishReason: api.FinishReasonPtr(finish),
	}
	resp := &api.ChatCompletionResponse{ID: c.id, Object: "chat.completion", Created: c.created,
		Model: s.cfg.ModelName, SystemFingerprint: s.cfg.Fingerprint, Choices: []api.ChatChoice{choice},
		Usage: usageOf(res.Usage)}
	if req.ReturnTokenIDs {
		resp.Choices[0].TokenIDs = runner.TokenIDs(res.Tokens)
		resp.PromptTokenIDs = spec.Req.Prompt
	}
	resp.KVTransferParams = s.registerTransfer(r, spec, res)
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) prepareChat(r *http.Request) (*pipeline.Spec, *api.ChatRequest, *pipeline.Plan, error) {
	body, req, err := readGeneration(s, r, api.ParseChatRequest, func(q *api.ChatRequest) string { return q.Model })
	if err != nil {
		return nil, nil, nil, err
	}
	spec, plan, err := s.pipe.ChatCompletion(r.Context(), req)
	if err == nil {
		err = s.cfg.Handoff.Check(spec, req.Stream) // kv_transfer_params (handoff.go)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	s.accepted(r, body, &req.GenerationParams)
	return spec, req, plan, nil
}

// chatWriter builds /v1/chat/completions responses and chunks for one request.
type chatWriter struct {
	s       *Server
	req     *api.ChatRequest
	plan    *pipeline.Plan
	prompt  []int32
	id      string
	created int64
}

// logprobs returns the chat logprobs object for toks, or nil when not asked for.
func (c *chatWriter) logprobs(toks []runner.Token) *api.ChatLogprobs {
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

func (c *chatWriter) chunk(delta api.ChatDelta, toks []runner.Token, finish *string) *api.ChatCompletionChunk {
	ch := api.ChatChunkChoice{Delta: delta, FinishReason: finish}
	if len(toks) > 0 {
		ch.Logprobs = c.logprobs(toks)
	}
	if c.req.ReturnTokenIDs && finish == nil {
		ch.TokenIDs = runner.TokenIDs(toks)
	}
	return &api.ChatCompletionChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created,
		Model: c.s.cfg.ModelName, SystemFingerprint: c.s.cfg.Fingerprint, Choices: []api.ChatChunkChoice{ch}}
}

func (c *chatWriter) stream(w http.ResponseWriter, r *http.Request, spec *pipeline.Spec) (*runner.Result, error) {
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
	var parser *toolcall.Parser
	if c.plan.Parsing() {
		parser = toolcall.NewParser(c.plan.Family, c.plan.Opts)
	}
	calls := 0
	var forced strings.Builder // a forced answer's text, for the call a cut leaves (cutDeltas)
	res, err := c.s.generate(r.Context(), spec, started, func(text string, toks []runner.Token) error {
		if parser != nil {
			if c.plan.ForcedCalls {
				forced.WriteString(text)
			}
			ds := parser.Feed(text)
			if c.plan.ForcedCalls {
				ds = withoutContent(ds) // constrained to calls: any content is a call not yet whole
			}
			n, err := c.sendDeltas(sse, ds, toks)
			calls += n
			return err
		}
		if text == "" && !c.req.WantLogprobs() && !c.req.ReturnTokenIDs {
			return nil
		}
		t := text
		return sse.send(c.chunk(api.ChatDelta{Content: &t}, toks, nil))
	})
	if err == nil && parser != nil {
		rest := parser.Finish()
		if c.plan.ForcedCalls {
			rest = withoutContent(rest) // a call cut short: not content, and not a call
			rest = append(rest, c.plan.CutDeltas(forced.String(), res.Finish, calls, rest)...)
		}
		n, serr := c.sendDeltas(sse, rest, nil)
		calls += n
		if serr != nil {
			return nil, runner.ErrClientGone
		}
	}
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
	finish := res.Finish
	if calls > 0 && finish == "stop" {
		finish = "tool_calls"
	}
	if err := sse.send(c.chunk(api.ChatDelta{}, nil, api.FinishReasonPtr(finish))); err != nil {
		return nil, runner.ErrClientGone
	}
	if c.req.IncludeUsage() {
		u := &api.ChatCompletionChunk{ID: c.id, Object: "chat.completion.chunk", Created: c.created,
			Model: c.s.cfg.ModelName, SystemFingerprint: c.s.cfg.Fingerprint, Choices: []api.ChatChunkChoice{},
			Usage: usageOf(res.Usage)}
		if err := sse.send(u); err != nil {
			return nil, runner.ErrClientGone
		}
	}
	if err := sse.done(); err != nil {
		return nil, runner.ErrClientGone
	}
	return res, nil
}

// message builds the assistant message of a finished answer and its finish reason: tool
// calls found in text become tool_calls (content null when nothing else was said) and
// finish_reason "tool_calls"; a think block becomes reasoning_content.
func (c *chatWriter) message(text, finish string) (api.ChatMessage, string) {
	if !c.plan.Parsing() {
		return api.ChatMessage{Role: "assistant", Content: &text}, finish
	}
	r := toolcall.Parse(c.plan.Family, text, c.plan.Opts)
	if c.plan.ForcedCalls {
		// A forced answer cut short (finish "length") has no content: its text is the call
		// it was writing, which goes out as far as it got (internal/pipeline/cutcall.go).
		r.Content = ""
		r.Calls = c.plan.WithCutCalls(r.Calls, text, finish)
	}
	m := api.ChatMessage{Role: "assistant"}
	if r.Content != "" || len(r.Calls) == 0 {
		content := r.Content
		m.Content = &content
	}
	if r.Reasoning != "" {
		reasoning := r.Reasoning
		m.ReasoningContent = &reasoning
	}
	if len(r.Calls) > 0 {
		m.ToolCalls = callsOf(r.Calls)
		if finish == "stop" {
			finish = "tool_calls"
		}
	}
	return m, finish
}

// sendDeltas streams the parser's deltas as chunks: runs of content and of reasoning go out
// as one chunk each, every tool-call piece as its own, as OpenAI streams them. toks (the
// tokens these deltas came from) ride on the first chunk; when there is no chunk they still
// go out in an empty one if the client asked for logprobs or token ids. It returns how many
// tool calls began.
func (c *chatWriter) sendDeltas(sse *sseWriter, ds []toolcall.Delta, toks []runner.Token) (int, error) {
	calls := 0
	var out []api.ChatDelta
	for _, d := range ds {
		switch {
		case d.Call != nil:
			tc := api.ToolCall{Index: &d.Call.Index, Function: api.ToolCallFunction{Name: d.Call.Name, Arguments: d.Call.Arguments}}
			if d.Call.ID != "" {
				tc.ID, tc.Type = d.Call.ID, "function"
				calls++
			}
			out = append(out, api.ChatDelta{ToolCalls: []api.ToolCall{tc}})
		case d.Reasoning != "":
			if n := len(out); n > 0 && out[n-1].ReasoningContent != nil {
				*out[n-1].ReasoningContent += d.Reasoning
				continue
			}
			r := d.Reasoning
			out = append(out, api.ChatDelta{ReasoningContent: &r})
		case d.Content != "":
			if n := len(out); n > 0 && out[n-1].Content != nil {
				*out[n-1].Content += d.Content
				continue
			}
			t := d.Content
			out = append(out, api.ChatDelta{Content: &t})
		}
	}
	if len(out) == 0 && len(toks) > 0 && (c.req.WantLogprobs() || c.req.ReturnTokenIDs) {
		empty := ""
		out = append(out, api.ChatDelta{Content: &empty})
	}
	for i, d := range out {
		var t []runner.Token
		if i == 0 {
			t = toks
		}
		if err := sse.send(c.chunk(d, t, nil)); err != nil {
			return calls, err
		}
	}
	return calls, nil
}

// withoutContent drops the content deltas of ds.
func withoutContent(ds []toolcall.Delta) []toolcall.Delta {
	out := ds[:0]
	for _, d := range ds {
		if d.Content == "" {
			out = append(out, d)
		}
	}
	return out
}

// callsOf converts parsed calls to the wire shape.
func callsOf(calls []toolcall.Call) []api.ToolCall {
	out := make([]api.ToolCall, len(calls))
	for i, c := range calls {
		out[i] = api.ToolCall{ID: c.ID, Type: "function", Function: api.ToolCallFunction{Name: c.Name, Arguments: c.Arguments}}
	}
	return out
}
