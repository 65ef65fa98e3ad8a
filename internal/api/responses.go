package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// OpenAI's Responses API (POST /v1/responses), the stateless subset coding agents use. A
// Responses request is converted into the same ChatRequest the chat endpoint parses, so that
// rendering, tool-call parsing and constrained decoding are shared; only the wire shapes
// differ.

// ResponsesRequest is the body of POST /v1/responses.
type ResponsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Text               *ResponsesText  `json:"text"`
	Stream             bool            `json:"stream"`
	PreviousResponseID string          `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	User               string          `json:"user"`
	CacheSalt          string          `json:"cache_salt"`   // vLLM extension, as on chat
	CacheReport        bool            `json:"cache_report"` // Stockpot: usage.cache.miss
	// PromptCacheRetention and PinStrict are passed to the chat request (GenerationParams).
	PromptCacheRetention string `json:"prompt_cache_retention"`
	PinStrict            bool   `json:"pin_strict"`
	PromptCacheKey       string `json:"prompt_cache_key"`
	MaxOffloadTokens     *int   `json:"max_offload_tokens"` // passed to the chat request
	// Blend is chunk blending's object (Stockpot extension: recompute, policy, chunks), passed
	// to the chat request as chat's blend; its texts are marked "blend": true on input
	// messages or their input_text parts (itemMarks).
	Blend json.RawMessage `json:"blend"`

	// Items is Input decoded, in order. Set by parsing.
	Items []ResponsesItem `json:"-"`
	// marks are Items' blend marks by index (those marked only). Set by parsing.
	marks map[int]itemMarks
}

// ResponsesText is the text options of a request; Format is text.format.
type ResponsesText struct {
	Format json.RawMessage `json:"format"`
}

// Stored reports store (default true): whether the response may be named by a later
// previous_response_id.
func (r *ResponsesRequest) Stored() bool { return r.Store == nil || *r.Store }

// Responses item types.
const (
	ItemMessage            = "message"
	ItemFunctionCall       = "function_call"
	ItemFunctionCallOutput = "function_call_output"
	ItemReasoning          = "reasoning"
)

// ResponsesItem is one input item, decoded: a message (Role, Text), a function_call
// (CallID, Name, Arguments) or a function_call_output (CallID, Output). Reasoning items sent
// back by clients are kept as Text of type reasoning and folded into the next assistant turn.
type ResponsesItem struct {
	Type      string
	Role      string // message: system, user or assistant ("developer" becomes system)
	Text      string // message text, or reasoning text
	CallID    string
	Name      string
	Arguments string
	Output    string
}

// itemMarks are an input message's chunk-blending marks (Stockpot extension, BlendMark):
// whole marks its whole text "blend": true; marked are the indexes of its content parts so
// marked, parts their texts (the item's Text is parts joined with "\n", as chat joins them);
// param is where the item was in input ("input[2]"). They stay on the request, not the item:
// only a request's own input is blended, the items of its previous_response_id replay
// unmarked.
type itemMarks struct {
	whole  bool
	parts  []string
	marked []int
	param  string
}

// MaxResponsesItems bounds the input items of one request.
const MaxResponsesItems = 4096

// ParseResponsesRequest decodes and validates a /v1/responses body. Errors are *Error.
// The chat-side checks (tools, tool_choice, format, sampling) happen in ChatRequest.
func ParseResponsesRequest(body []byte) (*ResponsesRequest, error) {
	var r ResponsesRequest
	if err := decodeObject(body, &r); err != nil {
		return nil, err
	}
	if err := checkPromptCacheKey(r.PromptCacheKey); err != nil {
		return nil, err
	}
	if err := CheckMaxOffloadTokens(r.MaxOffloadTokens); err != nil {
		return nil, err
	}
	if err := CheckID("previous_response_id", r.PreviousResponseID); err != nil {
		return nil, err
	}
	items, marks, err := parseResponsesInput(r.Input)
	if err != nil {
		return nil, err
	}
	r.Items, r.marks = items, marks
	if len(r.Items) == 0 && r.PreviousResponseID == "" {
		return nil, Invalid("input", "input is required: a string or a non-empty array of items")
	}
	if r.MaxOutputTokens != nil {
		if err := checkMaxTokens("max_output_tokens", *r.MaxOutputTokens); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// parseResponsesInput decodes input: a string (one user message) or an array of items, and
// the items' blend marks by index in the result.
func parseResponsesInput(raw json.RawMessage) ([]ResponsesItem, map[int]itemMarks, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return nil, nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, Invalid("input", "input must be a string or an array of items")
		}
		return []ResponsesItem{{Type: ItemMessage, Role: "user", Text: s}}, nil, nil
	}
	var elems []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &elems) != nil {
		return nil, nil, Invalid("input", "input must be a string or an array of items")
	}
	if len(elems) > MaxResponsesItems {
		return nil, nil, Invalid("input", "input has %d items; at most %d are allowed", len(elems), MaxResponsesItems)
	}
	out := make([]ResponsesItem, 0, len(elems))
	var marks map[int]itemMarks
	for i, e := range elems {
		it, mk, skip, err := parseResponsesItem(e, fmt.Sprintf("input[%d]", i))
		if err != nil {
			return nil, nil, err
		}
		if skip {
			continue
		}
		if mk.whole || len(mk.marked) > 0 {
			if marks == nil {
				marks = map[int]itemMarks{}
			}
			marks[len(out)] = mk
		}
		out = append(out, it)
	}
	return out, marks, nil
}

var responsesRoles = map[string]string{"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}

// parseResponsesItem decodes one input item; a message's marks come back beside it.
func parseResponsesItem(raw json.RawMessage, param string) (ResponsesItem, itemMarks, bool, error) {
	var it struct {
		Type      string          `json:"type"`
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		CallID    string          `json:"call_id"`
		Name      string          `json:"name"`
		Arguments *string         `json:"arguments"`
		Output    json.RawMessage `json:"output"`
		Summary   json.RawMessage `json:"summary"`
		Blend     json.RawMessage `json:"blend"`
	}
	if !isObject(raw) || json.Unmarshal(raw, &it) != nil {
		return ResponsesItem{}, itemMarks{}, false, Invalid(param, "%s must be an item object (message, function_call or function_call_output)", param)
	}
	switch it.Type {
	case "", ItemMessage:
		role, ok := responsesRoles[it.Role]
		if !ok {
			if it.Role == "" {
				return ResponsesItem{}, itemMarks{}, false, Invalid(param+".role", "%s.role is required (system, developer, user or assistant)", param)
			}
			return ResponsesItem{}, itemMarks{}, false, Unsupported(param+".role", "%s.role %s is not supported; use system, developer, user or assistant", param, Quote(it.Role))
		}
		c, err := responsesContent(it.Content, param+".content", true, true)
		if err != nil {
			return ResponsesItem{}, itemMarks{}, false, err
		}
		whole, err := parseBlendFlag(it.Blend, param)
		if err != nil {
			return ResponsesItem{}, itemMarks{}, false, err
		}
		switch {
		case whole && len(c.marked) > 0:
			return ResponsesItem{}, itemMarks{}, false, Invalid(param+".blend", "%s is marked blend and so are some of its content parts; mark one or the other", param)
		case whole && c.text == "":
			return ResponsesItem{}, itemMarks{}, false, Invalid(param+".blend", "%s is marked blend but has no text content to blend", param)
		}
		return ResponsesItem{Type: ItemMessage, Role: role, Text: c.text}, itemMarks{whole: whole, parts: c.parts, marked: c.marked, param: param}, false, nil
	case ItemFunctionCall:
		if it.CallID == "" {
			return ResponsesItem{}, itemMarks{}, false, Invalid(param+".call_id", "%s.call_id is required", param)
		}
		if err := CheckID(param+".call_id", it.CallID); err != nil {
			return ResponsesItem{}, itemMarks{}, false, err
		}
		if !toolNameRE.MatchString(it.Name) {
			return ResponsesItem{}, itemMarks{}, false, Invalid(param+".name", "%s.name must match [a-zA-Z0-9_.-]{1,64}", param)
		}
		args := "{}"
		if it.Arguments != nil {
			args = *it.Arguments
		}
		if !json.Valid([]byte(args)) {
			return ResponsesItem{}, itemMarks{}, false, Invalid(param+".arguments", "%s.arguments must be JSON text", param)
		}
		return ResponsesItem{Type: ItemFunctionCall, CallID: it.CallID, Name: it.Name, Arguments: args}, itemMarks{}, false, nil
	case ItemFunctionCallOutput:
		if it.CallID == "" {
			return ResponsesItem{}, itemMarks{}, false, Invalid(param+".call_id", "%s.call_id is required", param)
		}
		if err := CheckID(param+".call_id", it.CallID); err != nil {
			return ResponsesItem{}, itemMarks{}, false, err
		}
		out, err := responsesText(it.Output, param+".output", false)
		if err != nil {
			return ResponsesItem{}, itemMarks{}, false, err
		}
		return ResponsesItem{Type: ItemFunctionCallOutput, CallID: it.CallID, Output: out}, itemMarks{}, false, nil
	case ItemReasoning:
		// Clients send reasoning items back; the template decides whether history keeps it.
		return ResponsesItem{}, itemMarks{}, true, nil
	default:
		return ResponsesItem{}, itemMarks{}, false, Unsupported(param+".type", "%s.type %s is not supported; use message, function_call or function_call_output", param, Quote(it.Type))
	}
}

// contentParts is a message's content decoded: its text, and when it was an array of
// parts, their texts and the indexes of those marked "blend": true (markable: a part of a
// function output may not be marked).
type contentParts struct {
	text   string
	parts  []string
	marked []int
}

// responsesText decodes a function output: a string, or an array of input_text /
// output_text (/ text) parts joined with "\n".
func responsesText(raw json.RawMessage, param string, required bool) (string, error) {
	c, err := responsesContent(raw, param, required, false)
	return c.text, err
}

// responsesContent decodes message content or a function output: a string, or an array of
// input_text / output_text (/ text) parts joined with "\n"; a part may carry "blend" when
// markable.
func responsesContent(raw json.RawMessage, param string, required, markable bool) (contentParts, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		if required {
			return contentParts{}, Invalid(param, "%s is required", param)
		}
		return contentParts{}, nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return contentParts{}, Invalid(param, "%s must be a string or an array of text parts", param)
		}
		return contentParts{text: s}, nil
	case '[':
		var parts []struct {
			Type  string          `json:"type"`
			Text  *string         `json:"text"`
			Blend json.RawMessage `json:"blend"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return contentParts{}, Invalid(param, "%s must be a string or an array of {\"type\":\"input_text\",\"text\":...} parts", param)
		}
		c := contentParts{parts: make([]string, 0, len(parts))}
		for j, p := range parts {
			pw := fmt.Sprintf("%s[%d]", param, j)
			switch p.Type {
			case "input_text", "output_text", "text":
			default:
				return contentParts{}, Unsupported(pw+".type", "%s has type %s; only input_text and output_text parts are supported", pw, Quote(p.Type))
			}
			if p.Text == nil {
				return contentParts{}, Invalid(pw+".text", "%s.text is required", pw)
			}
			c.parts = append(c.parts, *p.Text)
			marked, err := parseBlendFlag(p.Blend, pw)
			switch {
			case err != nil:
				return contentParts{}, err
			case marked && !markable:
				return contentParts{}, Unsupported(pw+".blend", "%s is marked blend, but only message content can be blended", pw)
			case marked && *p.Text == "":
				return contentParts{}, Invalid(pw+".blend", "%s is marked blend but its text is empty", pw)
			case marked:
				c.marked = append(c.marked, j)
			}
		}
		c.text = strings.Join(c.parts, "\n")
		return c, nil
	}
	return contentParts{}, Invalid(param, "%s must be a string or an array of text parts", param)
}

// ChatRequest converts r, after the items of earlier turns (previous_response_id), into the
// chat request it means, parsed and validated by ParseChatRequest. Consecutive function_call
// items (and an assistant message just before them) become one assistant message with
// tool_calls; function_call_output items become tool messages. r's own messages keep their
// blend marks (as chat parts or a chat message marked "blend": true; the chat's BlendMarks
// then name them as input does, "input[2].content[1]"); prior items are replayed unmarked.
func (r *ResponsesRequest) ChatRequest(prior []ResponsesItem) (*ChatRequest, error) {
	type chatPart struct {
		Type  string `json:"type"`
		Text  string `json:"text"`
		Blend bool   `json:"blend,omitempty"`
	}
	type chatMsg struct {
		Role       string     `json:"role"`
		Content    any        `json:"content"` // nil, *string or []chatPart
		ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
		Blend      bool       `json:"blend,omitempty"`
	}
	var msgs []chatMsg
	marked := map[int]string{} // chat message index → the input item marking it
	if r.Instructions != nil && *r.Instructions != "" {
		s := *r.Instructions
		msgs = append(msgs, chatMsg{Role: "system", Content: &s})
	}
	items := append(append([]ResponsesItem(nil), prior...), r.Items...)
	lastCalls := false // the last message is an assistant turn that may take more calls
	for i, it := range items {
		switch it.Type {
		case ItemMessage:
			s := it.Text
			m := chatMsg{Role: it.Role, Content: &s}
			if mk, ok := r.marks[i-len(prior)]; ok && i >= len(prior) {
				marked[len(msgs)] = mk.param
				m.Blend = mk.whole
				if len(mk.marked) > 0 {
					parts := make([]chatPart, len(mk.parts))
					for j, p := range mk.parts {
						parts[j] = chatPart{Type: "text", Text: p}
					}
					for _, j := range mk.marked {
						parts[j].Blend = true
					}
					m.Content = parts
				}
			}
			msgs = append(msgs, m)
			lastCalls = it.Role == "assistant"
		case ItemFunctionCall:
			c := ToolCall{ID: it.CallID, Type: "function", Function: ToolCallFunction{Name: it.Name, Arguments: it.Arguments}}
			if !lastCalls {
				msgs = append(msgs, chatMsg{Role: "assistant"})
				lastCalls = true
			}
			m := &msgs[len(msgs)-1]
			m.ToolCalls = append(m.ToolCalls, c)
		case ItemFunctionCallOutput:
			s := it.Output
			msgs = append(msgs, chatMsg{Role: "tool", Content: &s, ToolCallID: it.CallID})
			lastCalls = false
		}
	}
	tools, err := responsesTools(r.Tools)
	if err != nil {
		return nil, err
	}
	choice, err := responsesToolChoice(r.ToolChoice)
	if err != nil {
		return nil, err
	}
	format, err := responsesFormat(r.Text)
	if err != nil {
		return nil, err
	}
	body := map[string]any{"messages": msgs, "stream": r.Stream}
	if r.Model != "" {
		body["model"] = r.Model
	}
	set := func(k string, v json.RawMessage) {
		if !isNull(v) {
			body[k] = v
		}
	}
	set("tools", tools)
	set("tool_choice", choice)
	set("response_format", format)
	if r.ParallelToolCalls != nil {
		body["parallel_tool_calls"] = *r.ParallelToolCalls
	}
	if r.MaxOutputTokens != nil {
		body["max_tokens"] = *r.MaxOutputTokens
	}
	if r.Temperature != nil {
		body["temperature"] = *r.Temperature
	}
	if r.TopP != nil {
		body["top_p"] = *r.TopP
	}
	if r.CacheSalt != "" {
		body["cache_salt"] = r.CacheSalt
	}
	if r.CacheReport {
		body["cache_report"] = true
	}
	if r.PromptCacheKey != "" {
		body["prompt_cache_key"] = r.PromptCacheKey
	}
	if r.User != "" {
		body["user"] = r.User
	}
	if r.PromptCacheRetention != "" {
		body["prompt_cache_retention"] = r.PromptCacheRetention
	}
	if r.PinStrict {
		body["pin_strict"] = true
	}
	if r.MaxOffloadTokens != nil {
		body["max_offload_tokens"] = *r.MaxOffloadTokens
	}
	set("blend", r.Blend)
	b, err := json.Marshal(body)
	if err != nil {
		return nil, Invalid("", "cannot convert the request: %v", err)
	}
	req, err := ParseChatRequest(b)
	if err != nil {
		return nil, responsesParam(err)
	}
	for k := range req.BlendMarks {
		// "messages[3].content[1]" → "input[2].content[1]": the chat message's item.
		mk := &req.BlendMarks[k]
		mk.Param = marked[mk.Message] + strings.TrimPrefix(mk.Param, fmt.Sprintf("messages[%d]", mk.Message))
	}
	return req, nil
}

// responsesParam renames the chat field names of an error to the Responses ones.
func responsesParam(err error) error {
	e, ok := err.(*Error)
	if !ok {
		return err
	}
	c := *e
	for _, p := range [][2]string{{"response_format", "text.format"}, {"max_tokens", "max_output_tokens"}, {"messages", "input"}} {
		if strings.HasPrefix(c.Param, p[0]) {
			c.Param = p[1] + strings.TrimPrefix(c.Param, p[0])
		}
		c.Message = strings.ReplaceAll(c.Message, p[0], p[1])
	}
	return &c
}

// responsesTools converts Responses function tools (flat) to chat tools (nested).
func responsesTools(raw json.RawMessage) (json.RawMessage, error) {
	if isNull(raw) {
		return nil, nil
	}
	var tools []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &tools); err != nil {
		return nil, Invalid("tools", "tools must be an array of {\"type\":\"function\",\"name\":...} objects")
	}
	type chatTool struct {
		Type     string          `json:"type"`
		Function json.RawMessage `json:"function"`
	}
	out := make([]chatTool, len(tools))
	for i, t := range tools {
		var typ string
		_ = json.Unmarshal(t["type"], &typ)
		if typ != "function" {
			return nil, Unsupported(fmt.Sprintf("tools[%d].type", i), "tools[%d].type %s is not supported; only function tools are", i, Quote(typ))
		}
		fn := map[string]json.RawMessage{}
		for _, k := range []string{"name", "description", "parameters", "strict"} {
			if v, ok := t[k]; ok && !isNull(v) {
				fn[k] = v
			}
		}
		out[i] = chatTool{Type: "function", Function: orderedFunction(fn)}
	}
	b, err := json.Marshal(out)
	return b, err
}

// orderedFunction writes a function object with its keys in the usual order (name,
// description, parameters, strict), so the rendered prompt reads as chat clients send it.
func orderedFunction(fn map[string]json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for _, k := range []string{"name", "description", "parameters", "strict"} {
		v, ok := fn[k]
		if !ok {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, "%q:", k)
		var c bytes.Buffer
		if json.Compact(&c, v) != nil {
			c.Reset()
			c.WriteString("null")
		}
		b.Write(c.Bytes())
	}
	b.WriteByte('}')
	return b.Bytes()
}

// responsesToolChoice converts tool_choice: the strings pass as they are,
// {"type":"function","name":X} becomes chat's {"type":"function","function":{"name":X}}, and
// {"type":"allowed_tools","mode":M,"tools":[{"type":"function","name":X}]} becomes chat's
// {"type":"allowed_tools","allowed_tools":{"mode":M,"tools":[{"type":"function","function":{"name":X}}]}}.
func responsesToolChoice(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) || raw[0] == '"' {
		return raw, nil
	}
	const want = `tool_choice must be "auto", "none", "required", {"type":"function","name":...} or {"type":"allowed_tools","mode":...,"tools":[...]}`
	var c struct {
		Type  string          `json:"type"`
		Name  string          `json:"name"`
		Mode  json.RawMessage `json:"mode"`
		Tools []struct {
			Type string `json:"type"`
			Name string `json:"name"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, Invalid("tool_choice", want)
	}
	switch c.Type {
	case "function":
		b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": c.Name}})
		return b, nil
	case "allowed_tools":
		tools := make([]map[string]any, len(c.Tools))
		for i, t := range c.Tools {
			tools[i] = map[string]any{"type": t.Type, "function": map[string]string{"name": t.Name}}
		}
		inner := map[string]any{"tools": tools}
		if len(c.Mode) > 0 {
			inner["mode"] = c.Mode
		}
		b, _ := json.Marshal(map[string]any{"type": "allowed_tools", "allowed_tools": inner})
		return b, nil
	}
	return nil, Invalid("tool_choice", want)
}

// responsesFormat converts text.format to chat's response_format.
func responsesFormat(t *ResponsesText) (json.RawMessage, error) {
	if t == nil || isNull(t.Format) {
		return nil, nil
	}
	var f struct {
		Type   string          `json:"type"`
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}
	if err := json.Unmarshal(t.Format, &f); err != nil {
		return nil, Invalid("text.format", "text.format must be an object with a type")
	}
	switch f.Type {
	case FormatText, FormatJSONObject:
		b, _ := json.Marshal(map[string]string{"type": f.Type})
		return b, nil
	case FormatJSONSchema:
		js := map[string]any{"name": f.Name}
		if !isNull(f.Schema) {
			js["schema"] = f.Schema
		}
		if f.Strict != nil {
			js["strict"] = *f.Strict
		}
		b, err := json.Marshal(map[string]any{"type": FormatJSONSchema, "json_schema": js})
		if err != nil {
			return nil, Invalid("text.format.schema", "text.format.schema must be a JSON object")
		}
		return b, nil
	}
	return nil, Invalid("text.format.type", `text.format.type must be "text", "json_object" or "json_schema"`)
}

// Response is the body of a non-streamed /v1/responses answer and the "response" of the
// streamed lifecycle events.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"` // "response"
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"` // in_progress, completed or incomplete
	Model              string             `json:"model"`
	Output             []ResponseItem     `json:"output"`
	OutputText         string             `json:"output_text,omitempty"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Error              *ErrorDetail       `json:"error"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Temperature        *float64           `json:"temperature"`
	TopP               *float64           `json:"top_p"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              json.RawMessage    `json:"tools"`
	Store              bool               `json:"store"`
	Usage              *ResponseUsage     `json:"usage,omitempty"`
}

// IncompleteDetails says why a response is incomplete.
type IncompleteDetails struct {
	Reason string `json:"reason"` // "max_output_tokens"
}

// ResponseItem is one output item: a message, a function_call or a reasoning item.
type ResponseItem struct {
	Type      string            `json:"type"`
	ID        string            `json:"id"`
	Status    string            `json:"status,omitempty"`
	Role      string            `json:"role,omitempty"`
	Content   []ResponseContent `json:"content,omitempty"`
	CallID    string            `json:"call_id,omitempty"`
	Name      string            `json:"name,omitempty"`
	Arguments *string           `json:"arguments,omitempty"`
	Summary   []ResponseContent `json:"summary,omitempty"`
}

// ResponseContent is a content part: output_text of a message, reasoning_text of a
// reasoning item.
type ResponseContent struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations,omitzero"`
}

// ResponseUsage is the usage of a response. Cache and Timings are Stockpot's extensions, as
// on chat.
type ResponseUsage struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  PromptTokensDetails `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int        `json:"total_tokens"`
	Cache       CacheUsage `json:"cache"`
	Timings     Timings    `json:"timings"`
}

// ResponseUsageOf converts chat usage.
func ResponseUsageOf(u *Usage) *ResponseUsage {
	return &ResponseUsage{InputTokens: u.PromptTokens, InputTokensDetails: u.PromptTokensDetails,
		OutputTokens: u.CompletionTokens, TotalTokens: u.TotalTokens, Cache: u.Cache, Timings: u.Timings}
}

// ItemsOf converts output items back to input items, for previous_response_id.
func ItemsOf(out []ResponseItem) []ResponsesItem {
	var items []ResponsesItem
	for _, o := range out {
		switch o.Type {
		case ItemMessage:
			var parts []string
			for _, c := range o.Content {
				parts = append(parts, c.Text)
			}
			items = append(items, ResponsesItem{Type: ItemMessage, Role: "assistant", Text: strings.Join(parts, "\n")})
		case ItemFunctionCall:
			args := "{}"
			if o.Arguments != nil {
				args = *o.Arguments
			}
			items = append(items, ResponsesItem{Type: ItemFunctionCall, CallID: o.CallID, Name: o.Name, Arguments: args})
		}
	}
	return items
}
