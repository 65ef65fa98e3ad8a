package clienttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// exchange is one HTTP request a client made and what came back, as recorded below the client
// library (the node scripts' wire.mjs writes the same shape).
type exchange struct {
	Method   string            `json:"method"`
	Path     string            `json:"path"`
	Status   int               `json:"status"`
	Request  json.RawMessage   `json:"request,omitempty"`
	Response json.RawMessage   `json:"response,omitempty"`
	Chunks   []json.RawMessage `json:"chunks,omitempty"` // a stream's data: lines, [DONE] left out
	Done     bool              `json:"done,omitempty"`   // the stream ended with data: [DONE]
}

// recorder is an openai-go middleware that records every exchange. Response bodies are
// teed as the client reads them, so a stream still reaches the client chunk by chunk.
type recorder struct {
	mu        sync.Mutex
	exchanges []*exchange
}

func (r *recorder) middleware(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	ex := &exchange{Method: req.Method, Path: req.URL.Path}
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		ex.Request = json.RawMessage(b)
	}
	r.mu.Lock()
	r.exchanges = append(r.exchanges, ex)
	r.mu.Unlock()
	resp, err := next(req)
	if err != nil {
		return resp, err
	}
	ex.Status = resp.StatusCode
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	resp.Body = &teeBody{ReadCloser: resp.Body, done: func(b []byte) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if stream {
			ex.Chunks, ex.Done = parseSSE(b)
		} else {
			ex.Response = json.RawMessage(b)
		}
	}}
	return resp, nil
}

// chat returns the recorded /chat/completions exchanges.
func (r *recorder) chat() []*exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*exchange
	for _, ex := range r.exchanges {
		if strings.HasSuffix(ex.Path, "/chat/completions") {
			out = append(out, ex)
		}
	}
	return out
}

// teeBody copies what the client reads and hands it to done at EOF or Close, once.
type teeBody struct {
	io.ReadCloser
	buf      bytes.Buffer
	done     func([]byte)
	finished bool
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.buf.Write(p[:n])
	if err == io.EOF {
		b.finish()
	}
	return n, err
}

func (b *teeBody) Close() error {
	b.finish()
	return b.ReadCloser.Close()
}

func (b *teeBody) finish() {
	if !b.finished {
		b.finished = true
		b.done(b.buf.Bytes())
	}
}

func parseSSE(b []byte) (chunks []json.RawMessage, done bool) {
	for _, line := range strings.Split(string(b), "\n") {
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			done = true
			continue
		}
		chunks = append(chunks, json.RawMessage(data))
	}
	return chunks, done
}

// wireRequest is what a chat request asked for, as far as the checks need it.
type wireRequest struct {
	Messages      []json.RawMessage `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

// choice is tool_choice as one word: "" (absent), "none", "auto", "required", or the name of
// the forced function.
func (r *wireRequest) choice() string {
	var s string
	if json.Unmarshal(r.ToolChoice, &s) == nil {
		return s
	}
	var named struct {
		Function struct{ Name string } `json:"function"`
	}
	if json.Unmarshal(r.ToolChoice, &named) == nil && named.Function.Name != "" {
		return named.Function.Name
	}
	return string(r.ToolChoice)
}

func (r *wireRequest) schema(name string) (map[string]any, bool) {
	for _, tl := range r.Tools {
		if tl.Function.Name == name {
			return tl.Function.Parameters, true
		}
	}
	return nil, false
}

type wireToolCall struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *wireUsage) cached() int {
	if u == nil || u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens == nil {
		return -1
	}
	return *u.PromptTokensDetails.CachedTokens
}

// turn is one chat exchange as the wire shows it, a stream assembled the way the OpenAI
// clients assemble it (tool calls by index).
type turn struct {
	ex        *exchange
	req       wireRequest
	content   *string // nil: null (or, streamed, no content delta with text)
	toolCalls []wireToolCall
	finish    string
	usage     *wireUsage
	problems  []string // wire-format faults found while assembling
}

func (tr *turn) problemf(format string, args ...any) {
	tr.problems = append(tr.problems, fmt.Sprintf(format, args...))
}

// parseTurn reads one recorded chat exchange.
func parseTurn(ex *exchange) *turn {
	tr := &turn{ex: ex}
	if err := json.Unmarshal(ex.Request, &tr.req); err != nil {
		tr.problemf("request body: %v", err)
	}
	if ex.Status != http.StatusOK {
		tr.problemf("status %d: %s", ex.Status, ex.Response)
		return tr
	}
	if tr.req.Stream {
		tr.assembleStream()
		return tr
	}
	var resp struct {
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Role      string          `json:"role"`
				Content   json.RawMessage `json:"content"`
				ToolCalls []wireToolCall  `json:"tool_calls"`
			} `json:"message"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *wireUsage `json:"usage"`
	}
	if err := json.Unmarshal(ex.Response, &resp); err != nil {
		tr.problemf("response body: %v: %s", err, ex.Response)
		return tr
	}
	if resp.Object != "chat.completion" {
		tr.problemf("object %q, want chat.completion", resp.Object)
	}
	if len(resp.Choices) != 1 {
		tr.problemf("%d choices, want 1", len(resp.Choices))
		return tr
	}
	c := resp.Choices[0]
	if c.Message.Role != "assistant" {
		tr.problemf("message role %q", c.Message.Role)
	}
	switch raw := bytes.TrimSpace(c.Message.Content); {
	case len(raw) == 0:
		tr.problemf("message has no content field (want a string, or null beside tool_calls)")
	case string(raw) != "null":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			tr.problemf("message content is not a string or null: %s", raw)
		}
		tr.content = &s
	}
	tr.toolCalls = c.Message.ToolCalls
	if c.FinishReason != nil {
		tr.finish = *c.FinishReason
	}
	tr.usage = resp.Usage
	return tr
}

func (tr *turn) assembleStream() {
	ex := tr.ex
	if !ex.Done {
		tr.problemf("stream did not end with data: [DONE]")
	}
	var id string
	byIndex := map[int]*wireToolCall{}
	var order []int
	var content strings.Builder
	sawContent := false
	for i, raw := range ex.Chunks {
		var ch struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role      string         `json:"role"`
					Content   *string        `json:"content"`
					ToolCalls []wireToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *wireUsage `json:"usage"`
		}
		if err := json.Unmarshal(raw, &ch); err != nil {
			tr.problemf("chunk %d: %v: %s", i, err, raw)
			continue
		}
		if ch.Object != "chat.completion.chunk" {
			tr.problemf("chunk %d: object %q", i, ch.Object)
		}
		if i == 0 {
			id = ch.ID
		} else if ch.ID != id {
			tr.problemf("chunk %d: id %q, first chunk's %q", i, ch.ID, id)
		}
		if ch.Usage != nil {
			if tr.usage != nil {
				tr.problemf("chunk %d: a second usage", i)
			}
			tr.usage = ch.Usage
			if len(ch.Choices) != 0 {
				tr.problemf("chunk %d: usage chunk has %d choices, want none", i, len(ch.Choices))
			}
			continue
		}
		if tr.usage != nil {
			tr.problemf("chunk %d: after the usage chunk", i)
		}
		for _, c := range ch.Choices {
			if c.Index != 0 {
				tr.problemf("chunk %d: choice index %d", i, c.Index)
			}
			if i == 0 && c.Delta.Role != "assistant" {
				tr.problemf("first chunk's delta role %q, want assistant", c.Delta.Role)
			}
			if c.Delta.Content != nil {
				content.WriteString(*c.Delta.Content)
				sawContent = sawContent || *c.Delta.Content != ""
			}
			for _, d := range c.Delta.ToolCalls {
				if d.Index == nil {
					tr.problemf("chunk %d: tool call delta without index: %s", i, raw)
					continue
				}
				call, ok := byIndex[*d.Index]
				if !ok {
					if d.ID == "" || d.Type != "function" || d.Function.Name == "" {
						tr.problemf("chunk %d: first delta of tool call %d lacks id, type \"function\" or name: %s", i, *d.Index, raw)
					}
					cp := d
					call = &cp
					byIndex[*d.Index] = call
					order = append(order, *d.Index)
					continue
				}
				if d.ID != "" && d.ID != call.ID {
					tr.problemf("chunk %d: tool call %d changes id %q to %q", i, *d.Index, call.ID, d.ID)
				}
				if d.Function.Name != "" && d.Function.Name != call.Function.Name {
					tr.problemf("chunk %d: tool call %d repeats or changes its name (%q, then %q); clients append names", i, *d.Index, call.Function.Name, d.Function.Name)
				}
				call.Function.Arguments += d.Function.Arguments
			}
			if c.FinishReason != nil {
				if tr.finish != "" {
					tr.problemf("chunk %d: a second finish_reason", i)
				}
				tr.finish = *c.FinishReason
			}
		}
	}
	for n, idx := range order {
		if idx != n {
			tr.problemf("tool call indexes %v, want 0, 1, ... in order", order)
			break
		}
	}
	for _, idx := range order {
		tr.toolCalls = append(tr.toolCalls, *byIndex[idx])
	}
	if sawContent {
		s := content.String()
		tr.content = &s
	}
	if tr.req.StreamOptions != nil && tr.req.StreamOptions.IncludeUsage && tr.usage == nil {
		tr.problemf("stream_options.include_usage, but no usage chunk")
	}
}

// checkTurn checks one turn against the OpenAI format and the request's tool_choice. It
// returns the problems, empty when the turn is well-formed.
func checkTurn(tr *turn) []string {
	p := slices.Clone(tr.problems)
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if tr.ex.Status != http.StatusOK {
		return p
	}
	if u := tr.usage; u != nil {
		if u.cached() < 0 {
			add("usage without prompt_tokens_details.cached_tokens")
		} else if c := u.cached(); c > u.PromptTokens || c%blockSize != 0 {
			add("cached_tokens %d of %d prompt tokens (want a multiple of %d, at most the prompt)", c, u.PromptTokens, blockSize)
		}
		if u.PromptTokens+u.CompletionTokens != u.TotalTokens {
			add("usage %d+%d != total %d", u.PromptTokens, u.CompletionTokens, u.TotalTokens)
		}
	} else if !tr.req.Stream {
		add("no usage")
	}
	switch tr.finish {
	case "stop", "length":
		if len(tr.toolCalls) > 0 {
			add("finish_reason %q beside %d tool calls, want \"tool_calls\"", tr.finish, len(tr.toolCalls))
		}
	case "tool_calls":
		if len(tr.toolCalls) == 0 {
			add("finish_reason tool_calls without tool_calls")
		}
	default:
		add("finish_reason %q", tr.finish)
	}
	choice := tr.req.choice()
	forced := choice == "required" || (choice != "" && choice != "auto" && choice != "none")
	switch {
	case choice == "none" && len(tr.toolCalls) > 0:
		add("tool_choice none, but %d tool calls", len(tr.toolCalls))
	case forced && len(tr.toolCalls) == 0:
		add("tool_choice %q, but no tool call (finish_reason %q, content %q)", choice, tr.finish, deref(tr.content))
	case forced && tr.content != nil && *tr.content != "":
		add("tool_choice %q: content %q beside the tool calls, want null", choice, *tr.content)
	}
	if len(tr.toolCalls) > 0 && !tr.req.Stream && tr.content != nil && *tr.content == "" {
		add(`content "" beside tool_calls, want null`)
	}
	if tr.req.ParallelToolCalls != nil && !*tr.req.ParallelToolCalls && len(tr.toolCalls) > 1 {
		add("parallel_tool_calls false, but %d tool calls", len(tr.toolCalls))
	}
	ids := map[string]bool{}
	for i, call := range tr.toolCalls {
		if call.ID == "" || ids[call.ID] {
			add("tool call %d: id %q empty or repeated", i, call.ID)
		}
		ids[call.ID] = true
		if call.Type != "function" {
			add("tool call %d: type %q, want function", i, call.Type)
		}
		if forced && choice != "required" && call.Function.Name != choice {
			add("tool call %d: function %q, tool_choice named %q", i, call.Function.Name, choice)
		}
		schema, ok := tr.req.schema(call.Function.Name)
		if !ok {
			add("tool call %d: function %q is not among the request's tools", i, call.Function.Name)
			continue
		}
		var args any
		if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
			add("tool call %d (%s): arguments are not JSON: %v: %q", i, call.Function.Name, err, call.Function.Arguments)
			continue
		}
		if _, ok := args.(map[string]any); !ok {
			add("tool call %d (%s): arguments %s are not a JSON object", i, call.Function.Name, call.Function.Arguments)
		}
		for _, e := range validate(schema, args, "arguments") {
			add("tool call %d (%s): %s (arguments %s)", i, call.Function.Name, e, call.Function.Arguments)
		}
	}
	return p
}

func deref(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// checkExchanges parses and checks every chat exchange, logs a line per turn, checks cache
// reuse across the conversation, and returns the turns.
func checkExchanges(t *testing.T, exs []*exchange) []*turn {
	t.Helper()
	var turns []*turn
	for i, ex := range exs {
		tr := parseTurn(ex)
		turns = append(turns, tr)
		var names []string
		for _, c := range tr.toolCalls {
			names = append(names, c.Function.Name+c.Function.Arguments)
		}
		t.Logf("turn %d: stream=%v tool_choice=%q messages=%d prompt=%d cached=%d completion=%d finish=%q calls=%v",
			i, tr.req.Stream, tr.req.choice(), len(tr.req.Messages), tokens(tr.usage, "prompt"), tr.usage.cached(), tokens(tr.usage, "completion"), tr.finish, names)
		for _, p := range checkTurn(tr) {
			t.Errorf("turn %d: %s\n  request:  %s\n  response: %s", i, p, clip(ex.Request), clip(responseText(ex)))
		}
	}
	checkCacheReuse(t, turns)
	return turns
}

func tokens(u *wireUsage, which string) int {
	if u == nil {
		return -1
	}
	if which == "prompt" {
		return u.PromptTokens
	}
	return u.CompletionTokens
}

// checkCacheReuse: each turn extends the previous turn's messages, so its prompt begins with
// the previous prompt, whose full blocks were all stored. The first turn of a fresh server
// reuses nothing.
func checkCacheReuse(t *testing.T, turns []*turn) {
	t.Helper()
	for i, tr := range turns {
		if tr.usage == nil {
			continue
		}
		got := tr.usage.cached()
		if i == 0 {
			if got != 0 {
				t.Errorf("turn 0 on a fresh server: cached_tokens %d, want 0", got)
			}
			continue
		}
		prev := turns[i-1]
		if prev.usage == nil {
			continue
		}
		if len(tr.req.Messages) <= len(prev.req.Messages) {
			t.Errorf("turn %d has %d messages, turn %d had %d: not a continuation", i, len(tr.req.Messages), i-1, len(prev.req.Messages))
			continue
		}
		want := prev.usage.PromptTokens / blockSize * blockSize
		if got < want {
			t.Errorf("turn %d: cached_tokens %d of %d, want at least %d (the previous prompt's %d tokens in full blocks of %d)",
				i, got, tr.usage.PromptTokens, want, prev.usage.PromptTokens, blockSize)
		}
	}
}

func responseText(ex *exchange) []byte {
	if ex.Response != nil {
		return ex.Response
	}
	var b bytes.Buffer
	for _, c := range ex.Chunks {
		b.Write(c)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func clip(b []byte) string {
	const max = 3000
	if len(b) > max {
		return string(b[:max/2]) + " … " + string(b[len(b)-max/2:])
	}
	return string(b)
}
