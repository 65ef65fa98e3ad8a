package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Limits on request values that need no model knowledge.
const (
	// MaxStop is the number of stop strings OpenAI allows.
	MaxStop = 4
	// MaxLogprobs is the most alternatives per token; vLLM's default max_logprobs is 20 and
	// OpenAI's chat API allows 20.
	MaxLogprobs = 20
	// MaxTemperature is OpenAI's upper bound.
	MaxTemperature = 2.0
	// DefaultCompletionMaxTokens is OpenAI's (and vLLM's) max_tokens default for completions.
	DefaultCompletionMaxTokens = 16
	// MaxTopK bounds top_k: above every vocabulary there is (the largest have about 262k
	// tokens), where top_k means "off" anyway; a larger value is a mistake.
	MaxTopK = 1 << 20
	// MaxStopTokenIDs bounds stop_token_ids: each generated token is looked up in the list.
	MaxStopTokenIDs = 1024
	// MaxCacheSaltBytes bounds cache_salt: a tenant id or a hash of one, not a payload.
	MaxCacheSaltBytes = 256
)

// StreamOptions is OpenAI's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// GenerationParams are the fields /v1/completions and /v1/chat/completions share.
// Pointer fields are nil when the field is absent or null.
type GenerationParams struct {
	Model            string             `json:"model"`
	MaxTokens        *int               `json:"max_tokens"`
	Temperature      *float64           `json:"temperature"`
	TopP             *float64           `json:"top_p"`
	TopK             *int               `json:"top_k"`
	Seed             *int64             `json:"seed"`
	Stop             json.RawMessage    `json:"stop"`
	StopTokenIDs     []int32            `json:"stop_token_ids"` // vLLM extension
	Stream           bool               `json:"stream"`
	StreamOptions    *StreamOptions     `json:"stream_options"`
	N                *int               `json:"n"`
	BestOf           *int               `json:"best_of"`
	PresencePenalty  *float64           `json:"presence_penalty"`
	FrequencyPenalty *float64           `json:"frequency_penalty"`
	LogitBias        map[string]float64 `json:"logit_bias"`
	CacheSalt        string             `json:"cache_salt"`       // vLLM extension
	CacheReport      bool               `json:"cache_report"`     // Stockpot: usage.cache.miss
	PromptCacheKey   string             `json:"prompt_cache_key"` // OpenAI: the router's affinity key
	ReturnTokenIDs   bool               `json:"return_token_ids"` // vLLM extension
	IgnoreEOS        bool               `json:"ignore_eos"`       // vLLM extension
	User             string             `json:"user"`
	// PromptCacheRetention is OpenAI's prompt_cache_retention: "in_memory" or "24h" pins the
	// prompt's full blocks for RetentionInMemory or 24 hours after their last use (see
	// RetentionTTL); "" leaves the prompt to the cache's usual eviction.
	PromptCacheRetention string `json:"prompt_cache_retention"`
	// PinStrict (Stockpot extension pin_strict) refuses the request with a 400 when its pin
	// does not fit in the server's pin budget, instead of pinning part of it.
	PinStrict bool `json:"pin_strict"`
	// MaxOffloadTokens (vLLM's max_offload_tokens) caps the prefix depth, in tokens from the
	// prompt's start, of the blocks this request computes that the lower tiers (host, disk,
	// remote) may keep: a one-off suffix stays out of them. nil: the server's default
	// (--max-offload-tokens); 0: offload nothing it computes. An integer >= 0.
	MaxOffloadTokens *int `json:"max_offload_tokens"`
	// KVTransfer is vLLM's kv_transfer_params (prefill/decode disaggregation), parsed into
	// KVTransferParams.
	KVTransfer json.RawMessage `json:"kv_transfer_params"`
	// KVTransferParams is KVTransfer decoded (nil without one). Set by parsing.
	KVTransferParams *KVTransferParams `json:"-"`
	// Blend (Stockpot extension) marks chunks of the prompt to cache on their own and blend
	// at any position (ParseBlend); BlendParams is it decoded (nil without). Set by parsing.
	Blend       json.RawMessage `json:"blend"`
	BlendParams *BlendParams    `json:"-"`

	// StopStrings is Stop decoded: at most MaxStop non-empty strings. Set by parsing.
	StopStrings []string `json:"-"`
}

// Retention values of prompt_cache_retention.
const (
	RetentionInMemoryName = "in_memory"
	Retention24hName      = "24h"
	// RetentionInMemory is the TTL of "in_memory": OpenAI keeps in-memory prompt caches for
	// 5 to 10 minutes of inactivity; Stockpot keeps them for the longer end, refreshed on
	// every hit.
	RetentionInMemory = 10 * time.Minute
)

// RetentionTTL is the pin TTL prompt_cache_retention asks for (0: no pin).
func (p *GenerationParams) RetentionTTL() time.Duration {
	switch p.PromptCacheRetention {
	case RetentionInMemoryName:
		return RetentionInMemory
	case Retention24hName:
		return 24 * time.Hour
	}
	return 0
}

// IncludeUsage reports whether a streamed response ends with a usage chunk.
func (p *GenerationParams) IncludeUsage() bool {
	return p.Stream && p.StreamOptions != nil && p.StreamOptions.IncludeUsage
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	GenerationParams
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`

	// Set by parsing: exactly one of PromptText (non-empty) and PromptTokens (non-empty).
	PromptText     string  `json:"-"`
	PromptTokens   []int32 `json:"-"`
	PromptIsTokens bool    `json:"-"`
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	GenerationParams
	Messages            []ChatRequestMessage `json:"messages"`
	MaxCompletionTokens *int                 `json:"max_completion_tokens"`
	Logprobs            *bool                `json:"logprobs"`
	TopLogprobs         *int                 `json:"top_logprobs"`
	AddGenerationPrompt *bool                `json:"add_generation_prompt"` // vLLM extension, default true
	Echo                bool                 `json:"echo"`                  // vLLM extension, unsupported
	Tools               json.RawMessage      `json:"tools"`
	ToolChoice          json.RawMessage      `json:"tool_choice"`
	ParallelToolCalls   *bool                `json:"parallel_tool_calls"`
	ResponseFormat      json.RawMessage      `json:"response_format"`
	ChatTemplateKwargs  map[string]any       `json:"chat_template_kwargs"` // vLLM extension

	// Set by parsing.
	ParsedTools      []Tool          `json:"-"`
	ParsedToolChoice ToolChoice      `json:"-"` // Mode is "none" when there are no tools
	Format           *ResponseFormat `json:"-"` // nil for text
	// BlendMarks are the texts marked "blend": true, in message order (BlendMark).
	BlendMarks []BlendMark `json:"-"`
}

// ParallelCalls reports parallel_tool_calls (default true, as OpenAI).
func (r *ChatRequest) ParallelCalls() bool { return r.ParallelToolCalls == nil || *r.ParallelToolCalls }

// ChatRequestMessage is one input message. Content is a string, null, or a list of
// {"type":"text","text":...} parts; parsing fills Text (and Parts for a list).
type ChatRequestMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Name             string          `json:"name"`
	ToolCalls        json.RawMessage `json:"tool_calls"`        // assistant
	ToolCallID       string          `json:"tool_call_id"`      // tool
	ReasoningContent *string         `json:"reasoning_content"` // assistant; vLLM and DeepSeek's name
	Reasoning        *string         `json:"reasoning"`         // assistant; the newer name
	// Blend (Stockpot extension) true marks the whole content as one chunk to blend
	// (BlendMark); a content part may carry it instead.
	Blend json.RawMessage `json:"blend"`

	Text     string     `json:"-"` // Content decoded; text parts joined with "\n" as vLLM does
	Parts    []string   `json:"-"` // the text parts, when Content was a list
	HasText  bool       `json:"-"` // Content was not null
	Calls    []ToolCall `json:"-"` // ToolCalls decoded
	Reasoned string     `json:"-"` // ReasoningContent or Reasoning

	blendParts []int // the indexes of the parts marked "blend": true
}

// WantLogprobs reports whether the chat request asked for logprobs.
func (r *ChatRequest) WantLogprobs() bool { return r.Logprobs != nil && *r.Logprobs }

// NumTopLogprobs is top_logprobs or 0.
func (r *ChatRequest) NumTopLogprobs() int {
	if r.TopLogprobs == nil {
		return 0
	}
	return *r.TopLogprobs
}

// GenerationPrompt reports add_generation_prompt (default true).
func (r *ChatRequest) GenerationPrompt() bool {
	return r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
}

// RequestedMaxTokens is max_completion_tokens if set, else max_tokens, else nil.
func (r *ChatRequest) RequestedMaxTokens() *int {
	if r.MaxCompletionTokens != nil {
		return r.MaxCompletionTokens
	}
	return r.MaxTokens
}

// ParseCompletionRequest decodes and validates a /v1/completions body. Errors are *Error.
func ParseCompletionRequest(body []byte) (*CompletionRequest, error) {
	var r CompletionRequest
	if err := decodeObject(body, &r); err != nil {
		return nil, err
	}
	if err := r.GenerationParams.validate(r.MaxTokens); err != nil {
		return nil, err
	}
	if r.Echo {
		return nil, Unsupported("echo", "echo is not supported; send the prompt to /tokenize if you need its tokens")
	}
	if r.Suffix != nil && *r.Suffix != "" {
		return nil, Unsupported("suffix", "suffix (fill-in-the-middle) is not supported")
	}
	if r.Logprobs != nil && (*r.Logprobs < 0 || *r.Logprobs > MaxLogprobs) {
		return nil, Invalid("logprobs", "logprobs must be between 0 and %d, got %d", MaxLogprobs, *r.Logprobs)
	}
	if err := r.parsePrompt(); err != nil {
		return nil, err
	}
	if r.BlendParams != nil && r.BlendParams.Chunks == nil {
		return nil, noChunks()
	}
	return &r, nil
}

// ParseChatRequest decodes and validates a /v1/chat/completions body. Errors are *Error.
func ParseChatRequest(body []byte) (*ChatRequest, error) {
	var r ChatRequest
	var err error
	if err := decodeObject(body, &r); err != nil {
		return nil, err
	}
	if r.MaxCompletionTokens != nil {
		if err := checkMaxTokens("max_completion_tokens", *r.MaxCompletionTokens); err != nil {
			return nil, err
		}
	}
	if err := r.GenerationParams.validate(r.MaxTokens); err != nil {
		return nil, err
	}
	if r.Echo {
		return nil, Unsupported("echo", "echo is not supported")
	}
	if r.ParsedTools, err = parseTools(r.Tools); err != nil {
		return nil, err
	}
	if r.ParsedToolChoice, err = parseToolChoice(r.ToolChoice, r.ParsedTools); err != nil {
		return nil, err
	}
	if r.Format, err = parseResponseFormat(r.ResponseFormat); err != nil {
		return nil, err
	}
	if r.Format != nil && (r.ParsedToolChoice.Mode == ToolChoiceRequired || r.ParsedToolChoice.Mode == ToolChoiceFunction) {
		return nil, Invalid("response_format", "response_format cannot be combined with tool_choice %q: the answer is a tool call", r.ParsedToolChoice.Mode)
	}
	if r.TopLogprobs != nil {
		if n := *r.TopLogprobs; n < 0 || n > MaxLogprobs {
			return nil, Invalid("top_logprobs", "top_logprobs must be between 0 and %d, got %d", MaxLogprobs, n)
		}
		if *r.TopLogprobs > 0 && !r.WantLogprobs() {
			return nil, Invalid("top_logprobs", "top_logprobs requires logprobs to be true")
		}
	}
	if len(r.Messages) == 0 {
		return nil, Invalid("messages", "messages must be a non-empty array")
	}
	ids := map[string]bool{} // tool call ids of the assistant messages so far
	for i := range r.Messages {
		m := &r.Messages[i]
		if err := m.parse(i); err != nil {
			return nil, err
		}
		for _, c := range m.Calls {
			if c.ID != "" {
				ids[c.ID] = true
			}
		}
		// As OpenAI: a tool result answers a call made earlier in the conversation.
		if m.Role == "tool" && !ids[m.ToolCallID] {
			p := fmt.Sprintf("messages[%d].tool_call_id", i)
			return nil, Invalid(p, "%s %s answers no tool call of an earlier assistant message", p, Quote(m.ToolCallID))
		}
	}
	if err := r.collectBlendMarks(); err != nil {
		return nil, err
	}
	return &r, nil
}

// decodeObject unmarshals a JSON object into v, turning decoding errors into 400s that name
// the offending field.
func decodeObject(body []byte, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return Invalid("", "request body is empty; expected a JSON object")
	}
	if trimmed[0] != '{' {
		return Invalid("", "request body must be a JSON object")
	}
	err := json.Unmarshal(trimmed, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return Invalid("", "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		field := jsonFieldPath(te.Field)
		if field == "" {
			return Invalid("", "request body must be a JSON object")
		}
		return Invalid(field, "field %s has the wrong type: got JSON %s, want %s", Quote(field), te.Value, jsonTypeName(te.Type.String()))
	default:
		return Invalid("", "malformed JSON: %v", err)
	}
}

// jsonFieldPath drops the Go names of embedded structs ("GenerationParams.max_tokens" becomes
// "max_tokens"); JSON names in this package are all lower case.
func jsonFieldPath(f string) string {
	parts := strings.Split(f, ".")
	out := parts[:0]
	for _, p := range parts {
		if p != "" && !(p[0] >= 'A' && p[0] <= 'Z') {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}

// jsonTypeName turns a Go type into what a JSON user understands.
func jsonTypeName(goType string) string {
	switch {
	case strings.HasPrefix(goType, "*"):
		return jsonTypeName(goType[1:])
	case goType == "string":
		return "a string"
	case goType == "bool":
		return "a boolean"
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return "an integer (in range)"
	case strings.HasPrefix(goType, "float"):
		return "a number"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.HasPrefix(goType, "map["):
		return "an object"
	default:
		return "an object"
	}
}

func checkMaxTokens(param string, n int) error {
	if n < 1 {
		return Invalid(param, "%s must be at least 1, got %d", param, n)
	}
	return nil
}

// validate checks the shared fields and decodes Stop. maxTokens is the field that holds the
// requested completion length (max_tokens).
func (p *GenerationParams) validate(maxTokens *int) error {
	if maxTokens != nil {
		if err := checkMaxTokens("max_tokens", *maxTokens); err != nil {
			return err
		}
	}
	if p.Temperature != nil {
		if t := *p.Temperature; !(t >= 0 && t <= MaxTemperature) {
			return Invalid("temperature", "temperature must be between 0 and %g, got %g", MaxTemperature, t)
		}
	}
	if p.TopP != nil {
		if t := *p.TopP; !(t > 0 && t <= 1) {
			return Invalid("top_p", "top_p must be in (0, 1], got %g", t)
		}
	}
	if p.TopK != nil && (*p.TopK < -1 || *p.TopK > MaxTopK) {
		return Invalid("top_k", "top_k must be -1 or 0 (off) or a positive number up to %d, got %d", MaxTopK, *p.TopK)
	}
	if len(p.CacheSalt) > MaxCacheSaltBytes {
		return Invalid("cache_salt", "cache_salt is %d bytes, over the limit of %d; use a tenant id or a hash of one", len(p.CacheSalt), MaxCacheSaltBytes)
	}
	if err := CheckMaxOffloadTokens(p.MaxOffloadTokens); err != nil {
		return err
	}
	switch p.PromptCacheRetention {
	case "", RetentionInMemoryName, Retention24hName:
	default:
		return Invalid("prompt_cache_retention", "prompt_cache_retention must be %q or %q, got %s", RetentionInMemoryName, Retention24hName, Quote(p.PromptCacheRetention))
	}
	if err := checkPromptCacheKey(p.PromptCacheKey); err != nil {
		return err
	}
	if len(p.StopTokenIDs) > MaxStopTokenIDs {
		return Invalid("stop_token_ids", "stop_token_ids has %d ids; at most %d are allowed", len(p.StopTokenIDs), MaxStopTokenIDs)
	}
	if p.N != nil && *p.N != 1 {
		if *p.N < 1 {
			return Invalid("n", "n must be 1, got %d", *p.N)
		}
		return Unsupported("n", "n=%d is not supported: Stockpot returns one choice per request; send %d requests instead (they share the cached prompt prefix)", *p.N, *p.N)
	}
	if p.BestOf != nil && *p.BestOf != 1 {
		return Unsupported("best_of", "best_of=%d is not supported; only 1", *p.BestOf)
	}
	if p.PresencePenalty != nil && *p.PresencePenalty != 0 {
		return Unsupported("presence_penalty", "presence_penalty is not supported; only 0")
	}
	if p.FrequencyPenalty != nil && *p.FrequencyPenalty != 0 {
		return Unsupported("frequency_penalty", "frequency_penalty is not supported; only 0")
	}
	if len(p.LogitBias) > 0 {
		return Unsupported("logit_bias", "logit_bias is not supported")
	}
	for _, id := range p.StopTokenIDs {
		if id < 0 {
			return Invalid("stop_token_ids", "stop_token_ids must be non-negative token ids, got %d", id)
		}
	}
	stops, err := parseStop(p.Stop)
	if err != nil {
		return err
	}
	p.StopStrings = stops
	if p.KVTransferParams, err = ParseKVTransferParams(p.KVTransfer); err != nil {
		return err
	}
	if p.BlendParams, err = ParseBlend(p.Blend); err != nil {
		return err
	}
	return nil
}

// parseStop decodes stop: null, a string, or an array of up to MaxStop strings. An empty
// string is refused: it would match before the first character, ending every generation
// before it began, which no client means.
func parseStop(raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var one string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, Invalid("stop", "stop must be a string or an array of strings")
		}
		if one == "" {
			return nil, Invalid("stop", "stop is an empty string, which would end every generation at once; leave stop out for none")
		}
		return []string{one}, nil
	}
	var list []string
	if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
		return nil, Invalid("stop", "stop must be a string or an array of strings")
	}
	if len(list) > MaxStop {
		return nil, Invalid("stop", "stop has %d strings; at most %d are allowed", len(list), MaxStop)
	}
	for i, s := range list {
		if s == "" {
			return nil, Invalid("stop", "stop[%d] is an empty string, which would end every generation at once", i)
		}
	}
	if len(list) == 0 {
		return nil, nil
	}
	return list, nil
}

// parsePrompt decodes prompt: a string, an array of token ids, or an array holding exactly one
// of those.
func (r *CompletionRequest) parsePrompt() error {
	raw := bytes.TrimSpace(r.Prompt)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return Invalid("prompt", "prompt is required")
	}
	switch raw[0] {
	case '"':
		return r.setTextPrompt(raw)
	case '[':
	default:
		return Invalid("prompt", "prompt must be a string or an array of token ids")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return Invalid("prompt", "prompt must be a string or an array of token ids")
	}
	if len(items) == 0 {
		return Invalid("prompt", "prompt is empty")
	}
	first := bytes.TrimSpace(items[0])
	if len(first) > 0 && (first[0] == '"' || first[0] == '[') {
		if len(items) > 1 {
			return Unsupported("prompt", "batched prompts (%d in one request) are not supported; send one request per prompt", len(items))
		}
		if first[0] == '"' {
			return r.setTextPrompt(first)
		}
		if err := json.Unmarshal(first, &items); err != nil {
			return Invalid("prompt", "prompt must be a string or an array of token ids")
		}
		if len(items) == 0 {
			return Invalid("prompt", "prompt is empty")
		}
	}
	ids := make([]int32, len(items))
	for i, it := range items {
		var f float64
		if err := json.Unmarshal(it, &f); err != nil {
			return Invalid("prompt", "prompt[%d] is not a token id: must be a string or an array of integers", i)
		}
		if f != math.Trunc(f) || f < 0 || f > math.MaxInt32 {
			return Invalid("prompt", "prompt[%d] = %s is not a valid token id", i, bytes.TrimSpace(it))
		}
		ids[i] = int32(f)
	}
	r.PromptTokens, r.PromptIsTokens = ids, true
	return nil
}

func (r *CompletionRequest) setTextPrompt(raw json.RawMessage) error {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return Invalid("prompt", "prompt must be a string or an array of token ids")
	}
	if s == "" {
		return Invalid("prompt", "prompt is empty")
	}
	r.PromptText = s
	return nil
}

// Chat roles accepted in input messages. "developer" is OpenAI's newer name for "system".
var chatRoles = map[string]string{"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}

func (m *ChatRequestMessage) parse(i int) error {
	param := fmt.Sprintf("messages[%d]", i)
	role, ok := chatRoles[m.Role]
	if !ok {
		if m.Role == "" {
			return Invalid(param+".role", "%s.role is required (system, user, assistant or tool)", param)
		}
		return Unsupported(param+".role", "%s.role %s is not supported; use system, user, assistant or tool", param, Quote(m.Role))
	}
	m.Role = role
	if !isNull(m.ToolCalls) {
		if role != "assistant" {
			return Invalid(param+".tool_calls", "%s.tool_calls is only allowed on assistant messages", param)
		}
		calls, err := parseToolCalls(m.ToolCalls, param+".tool_calls")
		if err != nil {
			return err
		}
		m.Calls = calls
	}
	if role == "tool" && m.ToolCallID == "" {
		return Invalid(param+".tool_call_id", "%s.tool_call_id is required on tool messages", param)
	}
	if err := CheckID(param+".tool_call_id", m.ToolCallID); err != nil {
		return err
	}
	switch {
	case m.ReasoningContent != nil:
		m.Reasoned = *m.ReasoningContent
	case m.Reasoning != nil:
		m.Reasoned = *m.Reasoning
	}
	raw := bytes.TrimSpace(m.Content)
	m.HasText = !isNull(raw)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		if role != "assistant" {
			return Invalid(param+".content", "%s.content is required", param)
		}
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &m.Text); err != nil {
			return Invalid(param+".content", "%s.content must be a string or an array of text parts", param)
		}
	case raw[0] == '[':
		var parts []struct {
			Type  string          `json:"type"`
			Text  *string         `json:"text"`
			Blend json.RawMessage `json:"blend"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return Invalid(param+".content", "%s.content must be a string or an array of {\"type\":\"text\",\"text\":...} parts", param)
		}
		texts := make([]string, 0, len(parts))
		for j, p := range parts {
			if p.Type != "text" {
				return Unsupported(fmt.Sprintf("%s.content[%d].type", param, j), "%s.content[%d] has type %s; only \"text\" parts are supported", param, j, Quote(p.Type))
			}
			if p.Text == nil {
				return Invalid(fmt.Sprintf("%s.content[%d].text", param, j), "%s.content[%d].text is required", param, j)
			}
			texts = append(texts, *p.Text)
			marked, err := parseBlendFlag(p.Blend, fmt.Sprintf("%s.content[%d]", param, j))
			if err != nil {
				return err
			}
			if marked {
				m.blendParts = append(m.blendParts, j)
			}
		}
		m.Text = strings.Join(texts, "\n")
		m.Parts = texts
	default:
		return Invalid(param+".content", "%s.content must be a string or an array of text parts", param)
	}
	return nil
}

// CheckMaxOffloadTokens validates max_offload_tokens: absent, or an integer >= 0 (JSON decoding
// already refused a non-integer).
func CheckMaxOffloadTokens(n *int) error {
	if n != nil && *n < 0 {
		return Invalid("max_offload_tokens", "max_offload_tokens must be an integer >= 0, got %d", *n)
	}
	return nil
}
