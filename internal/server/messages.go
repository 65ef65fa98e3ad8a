package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
	"stockpot/internal/toolcall"
)

// Anthropic's Messages API on the chat endpoint's machinery: the request becomes an
// api.ChatRequest (api.ParseMessagesRequest), rendered, planned (tool parsing, constrained
// decoding for tool_choice any/tool) and generated exactly as a chat completion; only the
// response and the stream are written in Anthropic's shape.

// isMessagesPath reports whether path is one of the Anthropic routes, whose errors take
// Anthropic's shape.
func isMessagesPath(path string) bool { return strings.HasPrefix(path, "/v1/messages") }

// writeAnthropicError writes err in Anthropic's error shape and status.
func writeAnthropicError(w http.ResponseWriter, err error) {
	status, body := api.AnthropicError(api.AsError(err))
	writeJSON(w, status, body)
}

// prepareMessages parses and plans a /v1/messages request.
func (s *Server) prepareMessages(r *http.Request) (*pipeline.Spec, *api.MessagesRequest, *pipeline.Plan, error) {
	parse := func(b []byte) (*api.MessagesRequest, error) { return api.ParseMessagesRequest(b, false) }
	body, req, err := readGeneration(s, r, parse, func(q *api.MessagesRequest) string { return q.Model })
	if err != nil {
		return nil, nil, nil, err
	}
	spec, plan, err := s.pipe.Messages(r.Context(), req)
	if err != nil {
		return nil, nil, nil, err
	}
	// Anthropic names tool_use blocks toolu_…; a call that carries its own id keeps it.
	plan.Opts.NewID = func() string { return newID("toolu_") }
	s.accepted(r, body, &req.Chat.GenerationParams)
	return spec, req, plan, nil
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	var (
		res *runner.Result
		err error
	)
	defer func() { s.finishRequest(res, err, start) }()
	spec, req, plan, err := s.prepareMessages(r)
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	m := &messagesWriter{s: s, req: req, plan: plan, spec: spec, id: newID("msg_")}
	if req.Stream {
		res, err = m.stream(w, r)
		return
	}
	var text strings.Builder
	res, err = s.generate(r.Context(), spec, nil, func(t string, _ []runner.Token) error {
		text.WriteString(t)
		return nil
	})
	if err != nil {
		if !errors.Is(err, runner.ErrClientGone) {
			writeAnthropicError(w, err)
		}
		return
	}
	c := chatWriter{s: s, req: req.Chat, plan: plan}
	msg, finish := c.message(text.String(), res.Finish)
	var content []api.MessagesContent
	if msg.ReasoningContent != nil && *msg.ReasoningContent != "" {
		sig := ""
		content = append(content, api.MessagesContent{Type: "thinking", Thinking: msg.ReasoningContent, Signature: &sig})
	}
	if msg.Content != nil && (*msg.Content != "" || len(msg.ToolCalls) == 0) {
		content = append(content, api.MessagesContent{Type: "text", Text: msg.Content})
	}
	for _, tc := range msg.ToolCalls {
		in := json.RawMessage(toolInput(tc.Function.Arguments))
		content = append(content, api.MessagesContent{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: &in})
	}
	resp := m.response(content, res)
	reason, seq := m.stopReason(finish, res)
	resp.StopReason, resp.StopSequence = &reason, seq
	writeJSON(w, http.StatusOK, resp)
}

// toolInput is a call's arguments as a JSON object. Arguments cut short by max_tokens give
// the members that were whole, as Anthropic's tool_use input (internal/pipeline/cutcall.go); arguments that
// are no object give an empty one.
func toolInput(args string) string {
	a := strings.TrimSpace(args)
	if a != "" && a[0] == '{' && json.Valid([]byte(a)) {
		return a
	}
	return toolcall.WholeMembers(a)
}

// messagesWriter writes one /v1/messages answer.
type messagesWriter struct {
	s    *Server
	req  *api.MessagesRequest
	plan *pipeline.Plan
	spec *pipeline.Spec
	id   string
}

func (m *messagesWriter) response(content []api.MessagesContent, res *runner.Result) *api.MessagesResponse {
	if content == nil {
		content = []api.MessagesContent{}
	}
	resp := &api.MessagesResponse{ID: m.id, Type: "message", Role: "assistant", Model: m.model(), Content: content}
	if res != nil {
		resp.Usage = messagesUsage(res.Usage)
	} else {
		resp.Usage = api.MessagesUsage{InputTokens: len(m.spec.Req.Prompt)}
	}
	return resp
}

func (m *messagesWriter) model() string {
	if m.req.Model != "" {
		return m.req.Model
	}
	return m.s.cfg.ModelName
}

// messagesUsage is the engine's usage in Anthropic's terms: cache reads are the tokens
// reused from any tier; cache writes the tokens the breakpoints' pins newly hold that were
// not reused (engine.PinResult.Created), split by TTL; input_tokens the rest of the prompt,
// so the three add up to it. A breakpoint pins whole blocks only: the tokens after its last
// full block are input.
func messagesUsage(u engine.Usage) api.MessagesUsage {
	read := u.CachedTokens()
	m5, h1 := anthropicCacheSplit(u.Pins)
	cache := cacheUsage(u)
	return api.MessagesUsage{
		InputTokens: max(u.PromptTokens-read-m5-h1, 0), OutputTokens: u.CompletionTokens, CacheReadInputTokens: read,
		CacheCreationInputTokens: m5 + h1, CacheCreation: api.MessagesCacheSplit{Ephemeral5m: m5, Ephemeral1h: h1},
		Cache: &cache,
	}
}

// stopReason maps a chat finish reason to Anthropic's stop_reason and stop_sequence. A
// "stop" whose last token does not end generation was cut by a stop string: the earliest of
// the request's stop sequences in the generated text is the one that matched.
func (m *messagesWriter) stopReason(finish string, res *runner.Result) (string, *string) {
	switch finish {
	case "tool_calls":
		return "tool_use", nil
	case "length":
		return "max_tokens", nil
	}
	if len(m.spec.Stops) > 0 && len(res.Tokens) > 0 {
		last := res.Tokens[len(res.Tokens)-1].ID
		if !m.s.tok.IsEOG(last) && !containsID(m.spec.Req.StopTokens, last) {
			full := m.s.tok.Decode(runner.TokenIDs(res.Tokens))
			best, at := "", -1
			for _, st := range m.spec.Stops {
				if i := strings.Index(full, st); i >= 0 && (at < 0 || i < at) {
					best, at = st, i
				}
			}
			if at >= 0 {
				return "stop_sequence", &best
			}
		}
	}
	return "end_turn", nil
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// sendEvent writes one named server-sent event.
func sendEvent(sse *sseWriter, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(b)+len(name)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := sse.w.Write(buf); err != nil {
		return err
	}
	return sse.flush()
}

// blockStream tracks the open content block of a streamed answer.
type blockStream struct {
	sse   *sseWriter
	index int    // of the open block, or of the next one when none is open
	kind  string // the open block's type; "" when none is open
	calls int
}

func (b *blockStream) open(kind string, block map[string]any) error {
	if err := b.close(); err != nil {
		return err
	}
	b.kind = kind
	return sendEvent(b.sse, "content_block_start", map[string]any{"type": "content_block_start", "index": b.index, "content_block": block})
}

func (b *blockStream) close() error {
	if b.kind == "" {
		return nil
	}
	if b.kind == "thinking" {
		if err := b.delta(map[string]any{"type": "signature_delta", "signature": ""}); err != nil {
			return err
		}
	}
	b.kind = ""
	err := sendEvent(b.sse, "content_block_stop", map[string]any{"type": "content_block_stop", "index": b.index})
	b.index++
	return err
}

func (b *blockStream) delta(d map[string]any) error {
	return sendEvent(b.sse, "content_block_delta", map[string]any{"type": "content_block_delta", "index": b.index, "delta": d})
}

func (b *blockStream) text(t string) error {
	if t == "" {
		return nil
	}
	if b.kind != "text" {
		if err := b.open("text", map[string]any{"type": "text", "text": ""}); err != nil {
			return err
		}
	}
	return b.delta(map[string]any{"type": "text_delta", "text": t})
}

func (b *blockStream) thinking(t string) error {
	if t == "" {
		return nil
	}
	if b.kind != "thinking" {
		if err := b.open("thinking", map[string]any{"type": "thinking", "thinking": "", "signature": ""}); err != nil {
			return err
		}
	}
	return b.delta(map[string]any{"type": "thinking_delta", "thinking": t})
}

func (b *blockStream) call(c *toolcall.CallDelta) error {
	if c.ID != "" {
		b.calls++
		if err := b.open("tool_use", map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": map[string]any{}}); err != nil {
			return err
		}
	}
	if c.Arguments == "" || b.kind != "tool_use" {
		return nil
	}
	return b.delta(map[string]any{"type": "input_json_delta", "partial_json": c.Arguments})
}

func (b *blockStream) feed(ds []toolcall.Delta) error {
	for _, d := range ds {
		var err error
		switch {
		case d.Call != nil:
			err = b.call(d.Call)
		case d.Reasoning != "":
			err = b.thinking(d.Reasoning)
		case d.Content != "":
			err = b.text(d.Content)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (m *messagesWriter) stream(w http.ResponseWriter, r *http.Request) (*runner.Result, error) {
	sse := newSSE(w)
	started := func() error {
		if err := sse.start(); err != nil {
			return err
		}
		msg := m.response(nil, nil)
		if err := sendEvent(sse, "message_start", map[string]any{"type": "message_start", "message": msg}); err != nil {
			return err
		}
		return sendEvent(sse, "ping", map[string]any{"type": "ping"})
	}
	var parser *toolcall.Parser
	if m.plan.Parsing() {
		parser = toolcall.NewParser(m.plan.Family, m.plan.Opts)
	}
	blocks := &blockStream{sse: sse}
	var forced strings.Builder // a forced answer's text, for the call a cut leaves (cutDeltas)
	res, err := m.s.generate(r.Context(), m.spec, started, func(text string, _ []runner.Token) error {
		if parser == nil {
			return blocks.text(text)
		}
		if m.plan.ForcedCalls {
			forced.WriteString(text)
		}
		ds := parser.Feed(text)
		if m.plan.ForcedCalls {
			ds = withoutContent(ds)
		}
		return blocks.feed(ds)
	})
	if err == nil && parser != nil {
		rest := parser.Finish()
		if m.plan.ForcedCalls {
			rest = withoutContent(rest)
			rest = append(rest, m.plan.CutDeltas(forced.String(), res.Finish, blocks.calls, rest)...)
		}
		if blocks.feed(rest) != nil {
			return nil, runner.ErrClientGone
		}
	}
	if err != nil {
		if errors.Is(err, runner.ErrClientGone) {
			return nil, err
		}
		if !sse.began {
			writeAnthropicError(w, err)
			return nil, err
		}
		_, body := api.AnthropicError(api.AsError(err))
		_ = sendEvent(sse, "error", body)
		return nil, err
	}
	if blocks.close() != nil {
		return nil, runner.ErrClientGone
	}
	finish := res.Finish
	if blocks.calls > 0 && finish == "stop" {
		finish = "tool_calls"
	}
	reason, seq := m.stopReason(finish, res)
	u := messagesUsage(res.Usage)
	delta := map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": seq}, "usage": u}
	if sendEvent(sse, "message_delta", delta) != nil || sendEvent(sse, "message_stop", map[string]any{"type": "message_stop"}) != nil {
		return nil, runner.ErrClientGone
	}
	return res, nil
}

// handleCountTokens answers /v1/messages/count_tokens: the rendered prompt's length.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	parse := func(b []byte) (*api.MessagesRequest, error) { return api.ParseMessagesRequest(b, true) }
	_, req, err := readRequest(s, r, parse, func(q *api.MessagesRequest) string { return q.Model })
	var prompt []int32
	if err == nil {
		_, prompt, err = s.pipe.ChatPrompt(req.Chat)
	}
	if err != nil {
		writeAnthropicError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(prompt)})
}
