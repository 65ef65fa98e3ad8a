package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"stockpot/internal/api"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
	"stockpot/internal/toolcall"
)

// POST /v1/responses: OpenAI's Responses API, converted into the chat request it means
// (api.ResponsesRequest.ChatRequest) and served by the chat path: the same template
// rendering, tool-call parsing and constrained decoding; only the wire shapes differ.

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	var (
		res *runner.Result
		err error
	)
	defer func() { s.finishRequest(res, err, start) }()
	rr, spec, c, prior, err := s.prepareResponses(r)
	if err != nil {
		writeError(w, err)
		return
	}
	rw := &responsesWriter{chatWriter: c, rr: rr, created: start.Unix()}
	var out []api.ResponseItem
	var finish string
	if rr.Stream {
		out, res, err = rw.stream(w, r, spec)
		if err != nil {
			return
		}
		finish = res.Finish
	} else {
		var text string
		if text, res, err = s.generateAll(w, r, spec); err != nil {
			return
		}
		msg, _ := c.message(text, res.Finish)
		out, finish = rw.items(msg), res.Finish
		writeJSON(w, http.StatusOK, rw.response(out, finish, res))
	}
	if rr.Stored() {
		items := append(append(append([]api.ResponsesItem(nil), prior...), rr.Items...), api.ItemsOf(out)...)
		s.responses.Put(responseKey(r, rw.id), items)
	}
}

// prepareResponses parses the request, resolves previous_response_id and builds the
// generation as prepareChat does.
func (s *Server) prepareResponses(r *http.Request) (*api.ResponsesRequest, *pipeline.Spec, *chatWriter, []api.ResponsesItem, error) {
	start := s.cfg.Now()
	body, rr, err := readGeneration(s, r, api.ParseResponsesRequest, func(q *api.ResponsesRequest) string { return q.Model })
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var prior []api.ResponsesItem
	if id := rr.PreviousResponseID; id != "" {
		var ok bool
		if prior, ok = s.responses.Get(responseKey(r, id)); !ok { // another tenant's is not found
			return nil, nil, nil, nil, s.responses.NotFound(id)
		}
	}
	req, spec, plan, err := s.pipe.Responses(r.Context(), rr, prior)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	c := &chatWriter{s: s, req: req, plan: plan, prompt: spec.Req.Prompt, id: newID("resp_"), created: start.Unix()}
	s.accepted(r, body, &req.GenerationParams)
	return rr, spec, c, prior, nil
}

// responsesWriter builds the Responses shapes of one request.
type responsesWriter struct {
	*chatWriter
	rr      *api.ResponsesRequest
	created int64
	seq     int
	sse     *sseWriter
}

// items converts an assistant message to output items: reasoning, then the text, then the
// function calls.
func (rw *responsesWriter) items(m api.ChatMessage) []api.ResponseItem {
	var out []api.ResponseItem
	if m.ReasoningContent != nil && *m.ReasoningContent != "" {
		out = append(out, reasoningItem(newID("rs_"), *m.ReasoningContent))
	}
	if m.Content != nil && (*m.Content != "" || len(m.ToolCalls) == 0) {
		out = append(out, messageItem(newID("msg_"), *m.Content, "completed"))
	}
	for _, c := range m.ToolCalls {
		out = append(out, callItem(newID("fc_"), c.ID, c.Function.Name, c.Function.Arguments, "completed"))
	}
	return out
}

func reasoningItem(id, text string) api.ResponseItem {
	return api.ResponseItem{Type: api.ItemReasoning, ID: id, Summary: []api.ResponseContent{},
		Content: []api.ResponseContent{{Type: "reasoning_text", Text: text}}}
}

func messageItem(id, text, status string) api.ResponseItem {
	return api.ResponseItem{Type: api.ItemMessage, ID: id, Status: status, Role: "assistant",
		Content: []api.ResponseContent{{Type: "output_text", Text: text, Annotations: []any{}}}}
}

func callItem(id, callID, name, args, status string) api.ResponseItem {
	return api.ResponseItem{Type: api.ItemFunctionCall, ID: id, Status: status, CallID: callID, Name: name, Arguments: &args}
}

// response builds the response object; res is nil while it is in progress.
func (rw *responsesWriter) response(out []api.ResponseItem, finish string, res *runner.Result) *api.Response {
	rr := rw.rr
	resp := &api.Response{ID: rw.id, Object: "response", CreatedAt: rw.created, Status: "in_progress",
		Model: rw.s.cfg.ModelName, Output: out, Instructions: rr.Instructions, MaxOutputTokens: rr.MaxOutputTokens,
		ParallelToolCalls: rw.req.ParallelCalls(), Temperature: rr.Temperature, TopP: rr.TopP,
		ToolChoice: json.RawMessage(`"auto"`), Tools: json.RawMessage(`[]`), Store: rr.Stored()}
	if resp.Output == nil {
		resp.Output = []api.ResponseItem{}
	}
	if !isNullJSON(rr.ToolChoice) {
		resp.ToolChoice = rr.ToolChoice
	}
	if !isNullJSON(rr.Tools) {
		resp.Tools = rr.Tools
	}
	if rr.PreviousResponseID != "" {
		p := rr.PreviousResponseID
		resp.PreviousResponseID = &p
	}
	if res == nil {
		return resp
	}
	resp.Status = "completed"
	if finish == "length" {
		resp.Status = "incomplete"
		resp.IncompleteDetails = &api.IncompleteDetails{Reason: "max_output_tokens"}
		// The item being written when the answer was cut (a message, or a function call
		// with its arguments so far) is incomplete too, never "completed".
		if n := len(out); n > 0 && out[n-1].Status == "completed" {
			out[n-1].Status = "incomplete"
		}
	}
	var text strings.Builder
	for _, o := range out {
		if o.Type == api.ItemMessage {
			for _, c := range o.Content {
				text.WriteString(c.Text)
			}
		}
	}
	resp.OutputText = text.String()
	resp.Usage = api.ResponseUsageOf(usageOf(res.Usage))
	return resp
}

func isNullJSON(raw json.RawMessage) bool {
	t := strings.TrimSpace(string(raw))
	return t == "" || t == "null"
}

// event sends one streamed event: an "event:" line with its type, and the payload with type
// and sequence_number added.
func (rw *responsesWriter) event(typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = rw.seq
	rw.seq++
	b, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(b)+len(typ)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, typ...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := rw.sse.w.Write(buf); err != nil {
		return err
	}
	return rw.sse.flush()
}

// streamState is the output item being streamed.
type streamState struct {
	out  []api.ResponseItem
	open string // "", message, reasoning or function_call
	text strings.Builder
	cut  bool // the answer was cut (finish "length"): the open item closes incomplete
}

func (rw *responsesWriter) openItem(st *streamState, it api.ResponseItem) error {
	if err := rw.closeItem(st); err != nil {
		return err
	}
	st.out = append(st.out, it)
	st.open = it.Type
	st.text.Reset()
	if err := rw.event("response.output_item.added", map[string]any{"output_index": len(st.out) - 1, "item": it}); err != nil {
		return err
	}
	if it.Type == api.ItemMessage {
		return rw.event("response.content_part.added", map[string]any{"item_id": it.ID, "output_index": len(st.out) - 1,
			"content_index": 0, "part": api.ResponseContent{Type: "output_text", Text: "", Annotations: []any{}}})
	}
	return nil
}

func (rw *responsesWriter) closeItem(st *streamState) error {
	if st.open == "" {
		return nil
	}
	i := len(st.out) - 1
	it := &st.out[i]
	text := st.text.String()
	status := "completed"
	if st.cut {
		status = "incomplete"
	}
	var err error
	switch st.open {
	case api.ItemMessage:
		*it = messageItem(it.ID, text, status)
		if err = rw.event("response.output_text.done", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0, "text": text}); err == nil {
			err = rw.event("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0, "part": it.Content[0]})
		}
	case api.ItemReasoning:
		*it = reasoningItem(it.ID, text)
		err = rw.event("response.reasoning_text.done", map[string]any{"item_id": it.ID, "output_index": i, "content_index": 0, "text": text})
	case api.ItemFunctionCall:
		*it = callItem(it.ID, it.CallID, it.Name, text, status)
		err = rw.event("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": i, "arguments": text})
	}
	st.open = ""
	if err != nil {
		return err
	}
	return rw.event("response.output_item.done", map[string]any{"output_index": i, "item": *it})
}

// feed streams the parser's deltas as events.
func (rw *responsesWriter) feed(st *streamState, ds []toolcall.Delta) error {
	for _, d := range ds {
		switch {
		case d.Call != nil:
			if d.Call.ID != "" {
				if err := rw.openItem(st, callItem(newID("fc_"), d.Call.ID, d.Call.Name, "", "in_progress")); err != nil {
					return err
				}
			}
			if d.Call.Arguments == "" || st.open != api.ItemFunctionCall {
				continue
			}
			st.text.WriteString(d.Call.Arguments)
			i := len(st.out) - 1
			if err := rw.event("response.function_call_arguments.delta", map[string]any{"item_id": st.out[i].ID, "output_index": i, "delta": d.Call.Arguments}); err != nil {
				return err
			}
		case d.Reasoning != "":
			if st.open != api.ItemReasoning {
				if err := rw.openItem(st, api.ResponseItem{Type: api.ItemReasoning, ID: newID("rs_"), Summary: []api.ResponseContent{}}); err != nil {
					return err
				}
			}
			st.text.WriteString(d.Reasoning)
			i := len(st.out) - 1
			if err := rw.event("response.reasoning_text.delta", map[string]any{"item_id": st.out[i].ID, "output_index": i, "content_index": 0, "delta": d.Reasoning}); err != nil {
				return err
			}
		case d.Content != "":
			if err := rw.content(st, d.Content); err != nil {
				return err
			}
		}
	}
	return nil
}

// calls is how many function calls st has streamed.
func (st *streamState) calls() int {
	n := 0
	for _, it := range st.out {
		if it.Type == api.ItemFunctionCall {
			n++
		}
	}
	return n
}

func (rw *responsesWriter) content(st *streamState, text string) error {
	if st.open != api.ItemMessage {
		if err := rw.openItem(st, messageItem(newID("msg_"), "", "in_progress")); err != nil {
			return err
		}
	}
	st.text.WriteString(text)
	i := len(st.out) - 1
	return rw.event("response.output_text.delta", map[string]any{"item_id": st.out[i].ID, "output_index": i, "content_index": 0, "delta": text})
}

func (rw *responsesWriter) stream(w http.ResponseWriter, r *http.Request, spec *pipeline.Spec) ([]api.ResponseItem, *runner.Result, error) {
	rw.sse = newSSE(w)
	started := func() error {
		if err := rw.sse.start(); err != nil {
			return err
		}
		if err := rw.event("response.created", map[string]any{"response": rw.response(nil, "", nil)}); err != nil {
			return err
		}
		return rw.event("response.in_progress", map[string]any{"response": rw.response(nil, "", nil)})
	}
	var parser *toolcall.Parser
	if rw.plan.Parsing() {
		parser = toolcall.NewParser(rw.plan.Family, rw.plan.Opts)
	}
	st := &streamState{}
	var forced strings.Builder // a forced answer's text, for the call a cut leaves (cutDeltas)
	res, err := rw.s.generate(r.Context(), spec, started, func(text string, _ []runner.Token) error {
		if parser == nil {
			if text == "" {
				return nil
			}
			return rw.content(st, text)
		}
		if rw.plan.ForcedCalls {
			forced.WriteString(text)
		}
		ds := parser.Feed(text)
		if rw.plan.ForcedCalls {
			ds = withoutContent(ds)
		}
		return rw.feed(st, ds)
	})
	if err == nil && parser != nil {
		rest := parser.Finish()
		if rw.plan.ForcedCalls {
			rest = withoutContent(rest)
			rest = append(rest, rw.plan.CutDeltas(forced.String(), res.Finish, st.calls(), rest)...)
		}
		if rw.feed(st, rest) != nil {
			err = runner.ErrClientGone
		}
	}
	if err != nil {
		if errors.Is(err, runner.ErrClientGone) {
			return nil, nil, err
		}
		if !rw.sse.began {
			writeError(w, err)
			return nil, nil, err
		}
		e := api.AsError(err).Body().Error
		_ = rw.event("error", map[string]any{"code": e.Code, "message": e.Message, "param": e.Param})
		return nil, nil, err
	}
	if st.open == "" && len(st.out) == 0 {
		// An empty answer is still one (empty) message, as non-streamed.
		if err := rw.openItem(st, messageItem(newID("msg_"), "", "in_progress")); err != nil {
			return nil, nil, runner.ErrClientGone
		}
	}
	st.cut = res.Finish == "length"
	if err := rw.closeItem(st); err != nil {
		return nil, nil, runner.ErrClientGone
	}
	resp := rw.response(st.out, res.Finish, res)
	typ := "response.completed"
	if resp.Status == "incomplete" {
		typ = "response.incomplete"
	}
	if err := rw.event(typ, map[string]any{"response": resp}); err != nil {
		return nil, nil, runner.ErrClientGone
	}
	return st.out, res, nil
}
