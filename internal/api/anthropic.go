package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Anthropic's Messages API (POST /v1/messages and /v1/messages/count_tokens). A request is
// validated here and translated into the same ChatRequest the chat endpoint parses, so that
// rendering, tool parsing and constrained decoding are the chat endpoint's own.

// MaxCacheBreakpoints is how many cache_control breakpoints Anthropic allows per request.
const MaxCacheBreakpoints = 4

// MaxStopSequences bounds stop_sequences (Anthropic sets no small limit, unlike OpenAI's 4
// stop strings; each one is searched for in the held-back text of every generated token).
const MaxStopSequences = 64

// MessagesRequest is a parsed /v1/messages body.
type MessagesRequest struct {
	Model         string
	MaxTokens     int // required on /v1/messages; 0 on count_tokens
	Stream        bool
	StopSequences []string
	Metadata      map[string]any
	// Chat is the equivalent chat request: messages, tools, tool choice and sampling.
	Chat *ChatRequest
	// Breakpoints are the cache_control marks, in request order.
	Breakpoints []CacheControl
	// PinStrict is the Stockpot extension pin_strict: refuse the request (400) when its
	// breakpoints do not all fit in the server's pin budget, instead of pinning part.
	PinStrict bool

	blends []BlendMark // the text blocks marked blend, in prompt order; Chat.BlendMarks at the end
}

// CacheControl is one cache_control breakpoint: Where names the field, TTL is "5m" or "1h".
type CacheControl struct {
	Where string
	TTL   string
	cut   breakpointCut
}

// Duration is the breakpoint's TTL.
func (c CacheControl) Duration() time.Duration {
	if c.TTL == "1h" {
		return time.Hour
	}
	return 5 * time.Minute
}

// breakpointCut is the conversation up to and including a marked block, as a cut of the
// translated chat request: the first tools tools, the first messages messages whole, then
// tail (a message cut right after the marked block) when set. whole: the full prompt (the
// top-level cache_control, Anthropic's automatic caching).
type breakpointCut struct {
	whole    bool
	tools    int
	messages int
	tail     *ChatRequestMessage
}

// CutChat returns the chat request that renders the conversation only up to breakpoint i
// (its marked block included; no generation prompt), or nil when the breakpoint covers the
// whole prompt. The prefix a breakpoint pins is the common token prefix of this render and
// the full one: whatever the template puts around a cut, that prefix depends only on the
// blocks up to the breakpoint. The result shares slices with r.Chat; do not modify it.
func (r *MessagesRequest) CutChat(i int) *ChatRequest {
	cut := r.Breakpoints[i].cut
	if cut.whole {
		return nil
	}
	c := *r.Chat
	c.Messages = append([]ChatRequestMessage(nil), r.Chat.Messages[:min(cut.messages, len(r.Chat.Messages))]...)
	if cut.tail != nil {
		c.Messages = append(c.Messages, *cut.tail)
	}
	c.ParsedTools = r.Chat.ParsedTools[:min(cut.tools, len(r.Chat.ParsedTools))]
	gen := false
	c.AddGenerationPrompt = &gen
	return &c
}

// textMessage is a chat message of role with text content.
func textMessage(role, text string) *ChatRequestMessage {
	raw, _ := json.Marshal(text)
	return &ChatRequestMessage{Role: role, Content: raw, Text: text, HasText: true}
}

type anthropicBlock struct {
	Type         string          `json:"type"`
	Text         *string         `json:"text"`
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Input        json.RawMessage `json:"input"`
	ToolUseID    string          `json:"tool_use_id"`
	Content      json.RawMessage `json:"content"`
	IsError      bool            `json:"is_error"`
	Thinking     *string         `json:"thinking"`
	Signature    string          `json:"signature"`
	Data         string          `json:"data"`
	CacheControl json.RawMessage `json:"cache_control"`
	Blend        json.RawMessage `json:"blend"` // Stockpot: a text block marked as one chunk (BlendMark)
	Citations    json.RawMessage `json:"citations"`
	Source       json.RawMessage `json:"source"`
}

type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// CacheControl is refused: Anthropic takes cache_control on content blocks only, and
	// answers one on a message with a 400 (messages.N.cache_control: Extra inputs are not
	// permitted); ignoring it would cache less than the client believes it asked for.
	CacheControl json.RawMessage `json:"cache_control"`
}

type anthropicTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl json.RawMessage `json:"cache_control"`
	Type         string          `json:"type"`
}

type anthropicBody struct {
	Model         string             `json:"model"`
	MaxTokens     *int               `json:"max_tokens"`
	Messages      []anthropicMessage `json:"messages"`
	System        json.RawMessage    `json:"system"`
	Tools         []anthropicTool    `json:"tools"`
	ToolChoice    json.RawMessage    `json:"tool_choice"`
	StopSequences []string           `json:"stop_sequences"`
	Stream        bool               `json:"stream"`
	Temperature   *float64           `json:"temperature"`
	TopP          *float64           `json:"top_p"`
	TopK          *int               `json:"top_k"`
	Metadata      map[string]any     `json:"metadata"`
	Thinking      json.RawMessage    `json:"thinking"`
	ServiceTier   string             `json:"service_tier"`
	Container     json.RawMessage    `json:"container"`
	MCPServers    json.RawMessage    `json:"mcp_servers"`
	CacheControl  json.RawMessage    `json:"cache_control"` // automatic caching: a breakpoint at the end
	CacheReport   bool               `json:"cache_report"`  // Stockpot: usage.cache.miss
	PinStrict     bool               `json:"pin_strict"`    // Stockpot extension; see MessagesRequest
	// MaxOffloadTokens is vLLM's max_offload_tokens, as on chat (GenerationParams).
	MaxOffloadTokens *int `json:"max_offload_tokens"`
	// Blend is the blend object, as on chat (ParseBlend): recompute, policy and token spans
	// beside the text blocks marked "blend": true.
	Blend json.RawMessage `json:"blend"`
}

// chat-request JSON built from an Anthropic body (then parsed by ParseChatRequest).
type chatOut struct {
	Model       string         `json:"model,omitempty"`
	Messages    []chatOutMsg   `json:"messages"`
	MaxTokens   *int           `json:"max_tokens,omitempty"`
	Temperature *float64       `json:"temperature,omitempty"`
	TopP        *float64       `json:"top_p,omitempty"`
	TopK        *int           `json:"top_k,omitempty"`
	Stop        []string       `json:"stop,omitempty"`
	Tools       []any          `json:"tools,omitempty"`
	ToolChoice  any            `json:"tool_choice,omitempty"`
	Parallel    *bool          `json:"parallel_tool_calls,omitempty"`
	Stream      bool           `json:"stream,omitempty"`
	Options     *StreamOptions `json:"stream_options,omitempty"`
}

type chatOutMsg struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Reasoning  *string    `json:"reasoning_content,omitempty"`

	blends []BlendMark // the text blocks marked blend (Message unset: foldMessages sets it)
}

// ParseMessagesRequest decodes and validates a /v1/messages body. countOnly is for
// /v1/messages/count_tokens, where max_tokens is not required. Errors are *Error.
func ParseMessagesRequest(body []byte, countOnly bool) (*MessagesRequest, error) {
	var b anthropicBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, Invalid("", "the request body is not a valid Messages request: %v", err)
	}
	r := &MessagesRequest{Model: b.Model, Stream: b.Stream, StopSequences: b.StopSequences, Metadata: b.Metadata, PinStrict: b.PinStrict}
	if err := r.checkLimits(&b, countOnly); err != nil {
		return nil, err
	}
	out := chatOut{Model: b.Model, Temperature: b.Temperature, TopP: b.TopP, TopK: b.TopK, Stream: b.Stream}
	if !countOnly {
		out.MaxTokens = &r.MaxTokens
	}
	if b.Stream {
		out.Options = &StreamOptions{IncludeUsage: true}
	}
	if err := r.foldSystem(&b, &out); err != nil {
		return nil, err
	}
	if err := r.foldTools(&b, &out); err != nil {
		return nil, err
	}
	if err := foldToolChoice(&b, &out); err != nil {
		return nil, err
	}
	if err := r.foldMessages(&b, &out); err != nil {
		return nil, err
	}
	if last := b.Messages[len(b.Messages)-1]; last.Role == "assistant" {
		// Continuing a final assistant message needs the template to leave it open, which
		// chat templates do not do; Anthropic answers such models with a 400 too.
		return nil, Invalid(fmt.Sprintf("messages[%d]", len(b.Messages)-1),
			"the last message is from the assistant (prefill), which this server does not support; end with a user message")
	}
	k, err := r.mark(b.CacheControl, "request", false)
	if err != nil {
		return nil, err
	}
	if k >= 0 {
		r.Breakpoints[k].cut = breakpointCut{whole: true}
	}
	chatBody, err := json.Marshal(out)
	if err != nil {
		return nil, Invalid("", "cannot translate the request: %v", err)
	}
	chat, err := ParseChatRequest(chatBody)
	if err != nil {
		return nil, err
	}
	chat.StopStrings = b.StopSequences // validated in checkLimits; more than chat's 4 are allowed
	r.Chat = chat
	r.Chat.CacheReport = b.CacheReport
	r.Chat.MaxOffloadTokens = b.MaxOffloadTokens
	if err := r.foldBlend(&b); err != nil {
		return nil, err
	}
	return r, nil
}

// markBlend records a system text block's "blend": true (message is its chat message).
func (r *MessagesRequest) markBlend(raw json.RawMessage, where string, message int, text string) error {
	marked, err := parseBlendFlag(raw, where)
	if err != nil || !marked {
		return err
	}
	if text == "" {
		return Invalid(where+".blend", "%s is marked blend but its text is empty", where)
	}
	r.blends = append(r.blends, BlendMark{Param: where, Message: message, Text: text})
	return nil
}

// foldBlend gives the chat request the body's blend object and the marked blocks, refusing
// a blend object with nothing to blend as chat does.
func (r *MessagesRequest) foldBlend(b *anthropicBody) error {
	bp, err := ParseBlend(b.Blend)
	if err != nil {
		return err
	}
	r.Chat.Blend, r.Chat.BlendParams, r.Chat.BlendMarks = b.Blend, bp, r.blends
	if bp != nil && bp.Chunks == nil && len(r.blends) == 0 {
		return noChunks()
	}
	if len(r.blends) > MaxBlendChunksWire {
		return Invalid("blend", "%d blocks are marked blend, at most %d", len(r.blends), MaxBlendChunksWire)
	}
	return nil
}

// checkLimits checks the body's scalar fields (max_tokens unless countOnly, a non-empty
// messages list, max_offload_tokens, temperature, stop_sequences) and sets r.MaxTokens.
func (r *MessagesRequest) checkLimits(b *anthropicBody, countOnly bool) error {
	if !countOnly {
		if b.MaxTokens == nil {
			return Invalid("max_tokens", "max_tokens: Field required")
		}
		if *b.MaxTokens < 1 {
			return Invalid("max_tokens", "max_tokens must be at least 1, got %d", *b.MaxTokens)
		}
		r.MaxTokens = *b.MaxTokens
	}
	if len(b.Messages) == 0 {
		return Invalid("messages", "messages: at least one message is required")
	}
	if err := CheckMaxOffloadTokens(b.MaxOffloadTokens); err != nil {
		return err
	}
	if b.Temperature != nil && (*b.Temperature < 0 || *b.Temperature > 1) {
		return Invalid("temperature", "temperature must be between 0 and 1, got %v", *b.Temperature)
	}
	if len(b.StopSequences) > MaxStopSequences {
		return Invalid("stop_sequences", "stop_sequences has %d entries, over this server's limit of %d", len(b.StopSequences), MaxStopSequences)
	}
	for i, s := range b.StopSequences {
		if s == "" {
			return Invalid(fmt.Sprintf("stop_sequences[%d]", i), "stop_sequences[%d] is empty", i)
		}
	}
	return nil
}

// mark records a block's cache_control, if any, and returns its index in r.Breakpoints
// (-1 for none); the caller then sets where the breakpoint cuts the conversation.
func (r *MessagesRequest) mark(raw json.RawMessage, where string, empty bool) (int, error) {
	if isNull(raw) {
		return -1, nil
	}
	var cc struct {
		Type string `json:"type"`
		TTL  string `json:"ttl"`
	}
	if err := json.Unmarshal(raw, &cc); err != nil {
		return -1, Invalid(where+".cache_control", "%s.cache_control must be {\"type\":\"ephemeral\",\"ttl\":\"5m\"|\"1h\"}", where)
	}
	if cc.Type != "ephemeral" {
		return -1, Invalid(where+".cache_control.type", "%s.cache_control.type must be \"ephemeral\", got %s", where, Quote(cc.Type))
	}
	switch cc.TTL {
	case "":
		cc.TTL = "5m"
	case "5m", "1h":
	default:
		return -1, Invalid(where+".cache_control.ttl", "%s.cache_control.ttl must be \"5m\" or \"1h\", got %s", where, Quote(cc.TTL))
	}
	if empty {
		return -1, Invalid(where+".cache_control", "%s: cache_control cannot be set for empty text blocks", where)
	}
	r.Breakpoints = append(r.Breakpoints, CacheControl{Where: where, TTL: cc.TTL})
	if len(r.Breakpoints) > MaxCacheBreakpoints {
		return -1, Invalid(where+".cache_control", "A maximum of %d blocks with cache_control may be provided. Found %d.", MaxCacheBreakpoints, len(r.Breakpoints))
	}
	return len(r.Breakpoints) - 1, nil
}

// foldSystem appends the body's system prompt (a string or text blocks, joined by "\n") to
// out as one system message, marking its blocks' breakpoints.
func (r *MessagesRequest) foldSystem(b *anthropicBody, out *chatOut) error {
	sys := bytes.TrimSpace(b.System)
	if isNull(sys) {
		return nil
	}
	var text string
	if sys[0] == '"' {
		if err := json.Unmarshal(sys, &text); err != nil {
			return Invalid("system", "system must be a string or a list of text blocks")
		}
	} else {
		var blocks []anthropicBlock
		if err := json.Unmarshal(sys, &blocks); err != nil {
			return Invalid("system", "system must be a string or a list of text blocks")
		}
		parts := make([]string, 0, len(blocks))
		for i, bl := range blocks {
			where := fmt.Sprintf("system[%d]", i)
			if bl.Type != "text" || bl.Text == nil {
				return Invalid(where, "%s must be a text block ({\"type\":\"text\",\"text\":...})", where)
			}
			k, err := r.mark(bl.CacheControl, where, *bl.Text == "")
			if err != nil {
				return err
			}
			if err := r.markBlend(bl.Blend, where, 0, *bl.Text); err != nil {
				return err
			}
			parts = append(parts, *bl.Text)
			if k >= 0 {
				// Tools come before the system prompt in Anthropic's prefix order.
				r.Breakpoints[k].cut = breakpointCut{tools: len(b.Tools), tail: textMessage("system", strings.Join(parts, "\n"))}
			}
		}
		text = strings.Join(parts, "\n")
	}
	out.Messages = append(out.Messages, chatOutMsg{Role: "system", Content: &text})
	return nil
}

// foldTools checks the body's custom tools and appends them to out as chat function tools,
// marking their breakpoints.
func (r *MessagesRequest) foldTools(b *anthropicBody, out *chatOut) error {
	for i, t := range b.Tools {
		where := fmt.Sprintf("tools[%d]", i)
		if t.Type != "" && t.Type != "custom" {
			return Unsupported(where+".type", "%s.type %s is not supported; only custom tools (name, description, input_schema)", where, Quote(t.Type))
		}
		if t.Name == "" {
			return Invalid(where+".name", "%s.name is required", where)
		}
		if isNull(t.InputSchema) {
			return Invalid(where+".input_schema", "%s.input_schema is required", where)
		}
		k, err := r.mark(t.CacheControl, where, false)
		if err != nil {
			return err
		}
		if k >= 0 {
			r.Breakpoints[k].cut = breakpointCut{tools: i + 1}
		}
		fn := map[string]any{"name": t.Name, "parameters": t.InputSchema}
		if t.Description != "" {
			fn["description"] = t.Description
		}
		out.Tools = append(out.Tools, map[string]any{"type": "function", "function": fn})
	}
	return nil
}

// foldToolChoice translates the body's tool_choice into chat's: any as required, tool as a
// named function, disable_parallel_tool_use as parallel_tool_calls.
func foldToolChoice(b *anthropicBody, out *chatOut) error {
	tc := bytes.TrimSpace(b.ToolChoice)
	if isNull(tc) {
		return nil
	}
	var c struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
	}
	if err := json.Unmarshal(tc, &c); err != nil {
		return Invalid("tool_choice", "tool_choice must be an object with a type (auto, any, tool or none)")
	}
	if c.DisableParallelToolUse != nil {
		p := !*c.DisableParallelToolUse
		out.Parallel = &p
	}
	switch c.Type {
	case "auto":
		out.ToolChoice = "auto"
	case "any":
		out.ToolChoice = "required"
	case "none":
		out.ToolChoice = "none"
	case "tool":
		if c.Name == "" {
			return Invalid("tool_choice.name", "tool_choice.name is required when tool_choice.type is \"tool\"")
		}
		found := false
		for _, t := range b.Tools {
			found = found || t.Name == c.Name
		}
		if !found {
			return Invalid("tool_choice.name", "tool_choice names the tool %s, which is not in tools", Quote(c.Name))
		}
		out.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": c.Name}}
	default:
		return Invalid("tool_choice.type", "tool_choice.type must be auto, any, tool or none, got %s", Quote(c.Type))
	}
	if len(b.Tools) == 0 && c.Type != "none" && c.Type != "auto" {
		return Invalid("tool_choice", "tool_choice %s needs tools", Quote(c.Type))
	}
	return nil
}

// foldMessages converts the body's messages into chat messages appended to out, merging
// consecutive user turns, and sets where each breakpoint inside them cuts the conversation.
func (r *MessagesRequest) foldMessages(b *anthropicBody, out *chatOut) error {
	for i, m := range b.Messages {
		msgs, cuts, err := convertMessage(m, fmt.Sprintf("messages[%d]", i), r.mark)
		if err != nil {
			return err
		}
		for j, cm := range msgs {
			// Consecutive user turns are combined into one, as Anthropic does: many chat
			// templates insist that roles alternate.
			before := "" // the content cm was appended to, when merged
			if n := len(out.Messages); n > 0 && cm.Role == "user" && out.Messages[n-1].Role == "user" && out.Messages[n-1].Content != nil {
				before = *out.Messages[n-1].Content + "\n"
				joined := before + *cm.Content
				out.Messages[n-1].Content = &joined
			} else {
				out.Messages = append(out.Messages, cm)
			}
			at := len(out.Messages) - 1 // the chat message cm is (part of)
			for _, bm := range cm.blends {
				bm.Message = at
				r.blends = append(r.blends, bm)
			}
			for _, c := range cuts {
				if c.msg != j {
					continue
				}
				cut := breakpointCut{tools: len(b.Tools), messages: at + 1}
				switch {
				case c.text != nil:
					cut = breakpointCut{tools: len(b.Tools), messages: at, tail: textMessage("user", before+*c.text)}
				case c.before:
					cut.messages = at
				case cm.Role == "user":
					// A user message may still grow by merging: cut it as it is now.
					cut = breakpointCut{tools: len(b.Tools), messages: at, tail: textMessage("user", *out.Messages[at].Content)}
				}
				r.Breakpoints[c.bp].cut = cut
			}
		}
	}
	return nil
}

// messageCut is where a breakpoint inside one Anthropic message cuts the chat messages it
// became: in message msg (an index into convertMessage's result), after text (a user
// message's text up to and including the marked block), or before the message (before: a
// marked block that is not the last of an assistant message, whose render the later blocks
// change), or else after the whole message.
type messageCut struct {
	bp     int // index in MessagesRequest.Breakpoints
	msg    int
	text   *string
	before bool
}

// convertMessage turns one Anthropic message into chat messages: a user message's
// tool_result blocks become tool messages (in order, between runs of text); an assistant's
// tool_use blocks become tool_calls and its thinking blocks reasoning_content. It also says
// where each breakpoint in the message cuts them.
func convertMessage(m anthropicMessage, where string, mark func(json.RawMessage, string, bool) (int, error)) ([]chatOutMsg, []messageCut, error) {
	if m.Role != "user" && m.Role != "assistant" {
		return nil, nil, Invalid(where+".role", "%s.role must be \"user\" or \"assistant\", got %s", where, Quote(m.Role))
	}
	if len(m.CacheControl) > 0 {
		return nil, nil, Invalid(where+".cache_control", "%s.cache_control: Extra inputs are not permitted (cache_control goes on a content block: put the message's content in blocks and mark the last one)", where)
	}
	raw := bytes.TrimSpace(m.Content)
	if isNull(raw) {
		return nil, nil, Invalid(where+".content", "%s.content is required", where)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, Invalid(where+".content", "%s.content must be a string or a list of content blocks", where)
		}
		return []chatOutMsg{{Role: m.Role, Content: &s}}, nil, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, nil, Invalid(where+".content", "%s.content must be a string or a list of content blocks: %v", where, err)
	}
	var (
		out      []chatOutMsg
		text     []string
		hasText  bool
		calls    []ToolCall
		thinking []string
		cuts     []messageCut
		blends   []BlendMark
	)
	flushUser := func() {
		if hasText {
			s := strings.Join(text, "\n")
			out = append(out, chatOutMsg{Role: "user", Content: &s, blends: blends})
		}
		text, hasText, blends = nil, false, nil
	}
	for j, bl := range blocks {
		bw := fmt.Sprintf("%s.content[%d]", where, j)
		if bl.Type != "text" && len(bl.Blend) > 0 {
			if marked, err := parseBlendFlag(bl.Blend, bw); err != nil || marked {
				return nil, nil, Invalid(bw+".blend", "%s: only text blocks can be marked blend, not %s blocks", bw, Quote(bl.Type))
			}
		}
		switch bl.Type {
		case "text":
			if bl.Text == nil {
				return nil, nil, Invalid(bw+".text", "%s.text is required", bw)
			}
			k, err := mark(bl.CacheControl, bw, *bl.Text == "")
			if err != nil {
				return nil, nil, err
			}
			marked, err := parseBlendFlag(bl.Blend, bw)
			if err != nil {
				return nil, nil, err
			}
			if marked {
				if *bl.Text == "" {
					return nil, nil, Invalid(bw+".blend", "%s is marked blend but its text is empty", bw)
				}
				blends = append(blends, BlendMark{Param: bw, Text: *bl.Text})
			}
			text, hasText = append(text, *bl.Text), true
			if k >= 0 {
				if m.Role == "user" {
					cut := strings.Join(text, "\n")
					cuts = append(cuts, messageCut{bp: k, msg: len(out), text: &cut})
				} else {
					cuts = append(cuts, messageCut{bp: k, before: j < len(blocks)-1})
				}
			}
		case "tool_use":
			if m.Role != "assistant" {
				return nil, nil, Invalid(bw+".type", "%s: tool_use blocks are only allowed in assistant messages", bw)
			}
			if bl.ID == "" || bl.Name == "" {
				return nil, nil, Invalid(bw, "%s: tool_use needs an id and a name", bw)
			}
			if err := CheckID(bw+".id", bl.ID); err != nil {
				return nil, nil, err
			}
			in := bytes.TrimSpace(bl.Input)
			if len(in) == 0 || in[0] != '{' || !json.Valid(in) {
				return nil, nil, Invalid(bw+".input", "%s.input must be a JSON object", bw)
			}
			k, err := mark(bl.CacheControl, bw, false)
			if err != nil {
				return nil, nil, err
			}
			if k >= 0 {
				cuts = append(cuts, messageCut{bp: k, before: j < len(blocks)-1})
			}
			calls = append(calls, ToolCall{ID: bl.ID, Type: "function", Function: ToolCallFunction{Name: bl.Name, Arguments: string(in)}})
		case "tool_result":
			if m.Role != "user" {
				return nil, nil, Invalid(bw+".type", "%s: tool_result blocks are only allowed in user messages", bw)
			}
			if bl.ToolUseID == "" {
				return nil, nil, Invalid(bw+".tool_use_id", "%s.tool_use_id is required", bw)
			}
			if err := CheckID(bw+".tool_use_id", bl.ToolUseID); err != nil {
				return nil, nil, err
			}
			res, err := toolResultText(bl.Content, bw)
			if err != nil {
				return nil, nil, err
			}
			k, err := mark(bl.CacheControl, bw, false)
			if err != nil {
				return nil, nil, err
			}
			flushUser()
			out = append(out, chatOutMsg{Role: "tool", Content: &res, ToolCallID: bl.ToolUseID})
			if k >= 0 {
				cuts = append(cuts, messageCut{bp: k, msg: len(out) - 1})
			}
		case "thinking", "redacted_thinking":
			// As Anthropic: thinking blocks take no cache_control (they are cached as part of
			// the turn, by a breakpoint on a later block).
			if len(bl.CacheControl) > 0 {
				return nil, nil, Invalid(bw+".cache_control", "%s.%s.cache_control: Extra inputs are not permitted (thinking blocks cannot be marked; mark a later block of the turn)", bw, bl.Type)
			}
			if bl.Type == "redacted_thinking" {
				continue // opaque to us: nothing to render
			}
			if m.Role != "assistant" {
				return nil, nil, Invalid(bw+".type", "%s: thinking blocks are only allowed in assistant messages", bw)
			}
			if bl.Thinking == nil {
				return nil, nil, Invalid(bw+".thinking", "%s.thinking is required", bw)
			}
			thinking = append(thinking, *bl.Thinking)
		case "image", "document", "search_result":
			return nil, nil, Unsupported(bw+".type", "%s: %s blocks are not supported by this server (text-only model)", bw, Quote(bl.Type))
		default:
			return nil, nil, Invalid(bw+".type", "%s.type %s is not a known content block type", bw, Quote(bl.Type))
		}
	}
	if m.Role == "user" {
		flushUser()
		if len(out) == 0 {
			empty := ""
			out = append(out, chatOutMsg{Role: "user", Content: &empty})
		}
		return out, cuts, nil
	}
	msg := chatOutMsg{Role: "assistant", ToolCalls: calls, blends: blends}
	if hasText || len(calls) == 0 {
		s := strings.Join(text, "")
		msg.Content = &s
	}
	if len(thinking) > 0 {
		s := strings.Join(thinking, "\n")
		msg.Reasoning = &s
	}
	return []chatOutMsg{msg}, cuts, nil
}

// toolResultText is a tool_result's content as text: a string, or its text blocks joined.
func toolResultText(raw json.RawMessage, where string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", Invalid(where+".content", "%s.content must be a string or text blocks", where)
		}
		return s, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", Invalid(where+".content", "%s.content must be a string or text blocks", where)
	}
	parts := make([]string, 0, len(blocks))
	for k, bl := range blocks {
		if bl.Type != "text" || bl.Text == nil {
			return "", Unsupported(fmt.Sprintf("%s.content[%d]", where, k), "%s.content[%d]: only text blocks are supported in tool results", where, k)
		}
		parts = append(parts, *bl.Text)
	}
	return strings.Join(parts, "\n"), nil
}

// Anthropic error types.
const (
	AnthropicInvalidRequest = "invalid_request_error"
	AnthropicAuthentication = "authentication_error"
	AnthropicPermission     = "permission_error"
	AnthropicNotFound       = "not_found_error"
	AnthropicTooLarge       = "request_too_large"
	AnthropicRateLimit      = "rate_limit_error"
	AnthropicAPI            = "api_error"
	AnthropicOverloaded     = "overloaded_error"
)

// AnthropicErrorBody is Anthropic's error shape.
type AnthropicErrorBody struct {
	Type  string               `json:"type"` // "error"
	Error AnthropicErrorDetail `json:"error"`
}

// AnthropicErrorDetail is the inner error object.
type AnthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// AnthropicError returns the status and body Anthropic would send for e: unavailable (503)
// becomes 529 overloaded_error, as Anthropic reports overload.
func AnthropicError(e *Error) (int, AnthropicErrorBody) {
	status, typ := e.Status, AnthropicInvalidRequest
	switch {
	case e.Status == http.StatusUnauthorized:
		typ = AnthropicAuthentication
	case e.Status == http.StatusForbidden:
		typ = AnthropicPermission
	case e.Status == http.StatusNotFound:
		typ = AnthropicNotFound
	case e.Status == http.StatusRequestEntityTooLarge:
		typ = AnthropicTooLarge
	case e.Status == http.StatusTooManyRequests:
		typ = AnthropicRateLimit
	case e.Status == http.StatusServiceUnavailable || e.Status == 529:
		status, typ = 529, AnthropicOverloaded
	case e.Status >= 500:
		typ = AnthropicAPI
	}
	return status, AnthropicErrorBody{Type: "error", Error: AnthropicErrorDetail{Type: typ, Message: cutLong(e.Message, maxErrorMessageBytes)}}
}

// MessagesUsage is Anthropic's usage object. InputTokens counts the prompt tokens neither
// read from the cache nor written to it.
type MessagesUsage struct {
	InputTokens              int                `json:"input_tokens"`
	OutputTokens             int                `json:"output_tokens"`
	CacheCreationInputTokens int                `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int                `json:"cache_read_input_tokens"`
	CacheCreation            MessagesCacheSplit `json:"cache_creation"`
	ServiceTier              string             `json:"service_tier,omitempty"`
	Cache                    *CacheUsage        `json:"cache,omitempty"` // Stockpot's per-tier split, as chat's usage.cache
}

// MessagesCacheSplit splits cache writes by TTL.
type MessagesCacheSplit struct {
	Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
}

// MessagesContent is one content block of a response.
type MessagesContent struct {
	Type      string           `json:"type"`
	Text      *string          `json:"text,omitempty"`
	Thinking  *string          `json:"thinking,omitempty"`
	Signature *string          `json:"signature,omitempty"`
	ID        string           `json:"id,omitempty"`
	Name      string           `json:"name,omitempty"`
	Input     *json.RawMessage `json:"input,omitempty"`
}

// MessagesResponse is a /v1/messages response (and message_start's message).
type MessagesResponse struct {
	ID           string            `json:"id"`
	Type         string            `json:"type"` // "message"
	Role         string            `json:"role"`
	Model        string            `json:"model"`
	Content      []MessagesContent `json:"content"`
	StopReason   *string           `json:"stop_reason"`
	StopSequence *string           `json:"stop_sequence"`
	Usage        MessagesUsage     `json:"usage"`
}
