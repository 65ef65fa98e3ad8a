package api

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"

	"stockpot/internal/miss"
)

// Usage is the usage object of every non-streamed response and of the last streamed chunk
// when stream_options.include_usage is set.
// Invariants: TotalTokens = PromptTokens + CompletionTokens;
// PromptTokensDetails.CachedTokens = device + host + disk + remote tokens;
// CachedTokens + Cache.ComputedTokens + Cache.BlendedTokens = PromptTokens.
type Usage struct {
	PromptTokens        int                 `json:"prompt_tokens"`
	CompletionTokens    int                 `json:"completion_tokens"`
	TotalTokens         int                 `json:"total_tokens"`
	PromptTokensDetails PromptTokensDetails `json:"prompt_tokens_details"`
	Cache               CacheUsage          `json:"cache"`
	Timings             Timings             `json:"timings"`
}

// PromptTokensDetails is OpenAI's prompt_tokens_details; CachedTokens is always present.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// CacheUsage says where each prompt token came from (Stockpot extension).
type CacheUsage struct {
	DeviceTokens int `json:"device_tokens"`
	HostTokens   int `json:"host_tokens"`
	DiskTokens   int `json:"disk_tokens"`
	RemoteTokens int `json:"remote_tokens"`
	// TransferTokens came from the prefill replica that computed the prompt (a decode
	// replica's pull); not cached_tokens, which counts this replica's reuse. Absent when 0.
	TransferTokens  int `json:"transfer_tokens,omitempty"`
	ComputedTokens  int `json:"computed_tokens"`
	DiscardedTokens int `json:"discarded_tokens"`
	// BlendedTokens took their K/V from cached chunks placed at their positions (the
	// request's blend); BlendRecomputedTokens had cached chunk K/V and were recomputed (in
	// computed_tokens). Blend says what became of each chunk. All three are present only
	// when the request asked to blend.
	BlendedTokens         *int         `json:"blended_tokens,omitempty"`
	BlendRecomputedTokens *int         `json:"blend_recomputed_tokens,omitempty"`
	Blend                 *BlendReport `json:"blend,omitempty"`
	// StateBytes, for a hybrid model, is the size of the recurrent-state checkpoint the
	// request resumed from (its reuse ends at that block end); absent when it reused nothing.
	StateBytes int `json:"state_bytes,omitempty"`
	// Miss is where and why the prompt left the longest cached chain, when the request set
	// cache_report and the prompt missed (Stockpot extension).
	Miss *miss.Report `json:"miss,omitempty"`
	// PinnedTokens is how many prompt tokens the request's pins (cache_control breakpoints,
	// prompt_cache_retention) hold pinned now, and PinRequestedTokens how many they asked for
	// (whole blocks): less pinned than requested is a partial pin (the pin budget ran out).
	// Both are absent when the request asked for no pin.
	PinnedTokens       *int `json:"pinned_tokens,omitempty"`
	PinRequestedTokens *int `json:"pin_requested_tokens,omitempty"`
	// PinLimit says why pinned_tokens is less than pin_requested_tokens when a limit did
	// it: "pin_budget" (the server's --pin-budget is full), "tenant_quota" (the tenant's pins
	// hold its cache_bytes quota), "other_tenants_shares" (what is free is other tenants'
	// guaranteed shares); absent when all was pinned (Stockpot extension).
	PinLimit string `json:"pin_limit,omitempty"`
	// StoppedBy says why the server stopped the generation where the finish reason does
	// not: "kv_pool_exhausted" when the decode outgrew the KV pool (the finish reason is
	// then "length", or Anthropic's "max_tokens"); absent otherwise (Stockpot extension).
	StoppedBy string `json:"stopped_by,omitempty"`
}

// Timings are per-request phase durations in milliseconds (Stockpot extension).
type Timings struct {
	QueueMs   Millis `json:"queue_ms"`
	RestoreMs Millis `json:"restore_ms"`
	PrefillMs Millis `json:"prefill_ms"`
	TTFTMs    Millis `json:"ttft_ms"`
	DecodeMs  Millis `json:"decode_ms"`
}

// Millis is a duration in milliseconds written with at most 3 decimals (microseconds), so
// usage stays readable; NaN and infinities (never expected) are written as 0 to keep the JSON
// valid.
type Millis float64

// MarshalJSON implements json.Marshaler.
func (m Millis) MarshalJSON() ([]byte, error) {
	f := float64(m)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = 0
	}
	return strconv.AppendFloat(nil, math.Round(f*1000)/1000, 'f', -1, 64), nil
}

// CompletionResponse is the body of a non-streamed /v1/completions response, and (with
// Object "text_completion" too, as OpenAI does) of each streamed chunk.
type CompletionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint,omitempty"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
	PromptTokenIDs    []int32            `json:"prompt_token_ids,omitempty"` // return_token_ids
	// KVTransferParams, on a prefill replica's answer to a request with do_remote_decode,
	// names where the prompt's blocks are for the decode replica (vLLM's shape).
	KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
}

// CompletionChoice is one choice; FinishReason is nil until the choice ends.
type CompletionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *CompletionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	TokenIDs     []int32             `json:"token_ids,omitempty"` // return_token_ids
}

// CompletionLogprobs is OpenAI's legacy logprobs shape. The four slices have one entry per
// generated token. TextOffset counts Unicode code points from the start of the choice's text,
// as Python's len does.
type CompletionLogprobs struct {
	Tokens        []string      `json:"tokens"`
	TokenLogprobs []Logprob     `json:"token_logprobs"`
	TopLogprobs   []TopLogprobs `json:"top_logprobs"`
	TextOffset    []int         `json:"text_offset"`
}

// TopLogprobs is a {token: logprob} object written best first. When two ids decode to the
// same text (partial UTF-8, for example) the first, more likely one is kept.
type TopLogprobs []TokenLogprob

// TokenLogprob is one entry of TopLogprobs.
type TokenLogprob struct {
	Token   string
	Logprob float64
}

// MarshalJSON writes the entries as one JSON object in order.
func (t TopLogprobs) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	seen := make(map[string]bool, len(t))
	for _, e := range t {
		if seen[e.Token] {
			continue
		}
		seen[e.Token] = true
		if len(seen) > 1 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(e.Token)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(appendLogprob(nil, e.Logprob))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// UnmarshalJSON reads a {token: logprob} object (order is lost; for clients and tests).
func (t *TopLogprobs) UnmarshalJSON(b []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*t = (*t)[:0]
	for k, v := range m {
		*t = append(*t, TokenLogprob{Token: k, Logprob: v})
	}
	return nil
}

// Logprob is a log-probability that marshals -Inf (a token with zero probability after
// masking) as -9999.0, as vLLM does, since JSON has no infinity.
type Logprob float64

// MarshalJSON implements json.Marshaler.
func (l Logprob) MarshalJSON() ([]byte, error) { return appendLogprob(nil, float64(l)), nil }

func appendLogprob(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = -9999.0
	}
	return strconv.AppendFloat(b, f, 'g', -1, 32)
}

// ChatCompletionResponse is the body of a non-streamed /v1/chat/completions response.
type ChatCompletionResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "chat.completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
	PromptTokenIDs    []int32      `json:"prompt_token_ids,omitempty"`
	// KVTransferParams: as CompletionResponse's.
	KVTransferParams *KVTransferParams `json:"kv_transfer_params,omitempty"`
}

// ChatChoice is one choice of a non-streamed chat response.
type ChatChoice struct {
	Index        int           `json:"index"`
	Message      ChatMessage   `json:"message"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	TokenIDs     []int32       `json:"token_ids,omitempty"`
}

// ChatMessage is an assistant message in a response. Content is null when the message is
// only tool calls, as OpenAI sends it; ReasoningContent is the model's thinking, split off as
// vLLM and llama.cpp do.
type ChatMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// ChatCompletionChunk is one streamed chat chunk ("chat.completion.chunk").
type ChatCompletionChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"`
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	SystemFingerprint string            `json:"system_fingerprint,omitempty"`
	Choices           []ChatChunkChoice `json:"choices"`
	Usage             *Usage            `json:"usage,omitempty"`
	PromptTokenIDs    []int32           `json:"prompt_token_ids,omitempty"`
}

// ChatChunkChoice is one choice of a chunk; FinishReason is null until the last one.
type ChatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        ChatDelta     `json:"delta"`
	Logprobs     *ChatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	TokenIDs     []int32       `json:"token_ids,omitempty"`
}

// ChatDelta is the incremental message of a chunk; the first carries the role.
type ChatDelta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"` // each with Index set
}

// ChatLogprobs is the chat logprobs shape: one entry per generated token.
type ChatLogprobs struct {
	Content []ChatTokenLogprob `json:"content"`
}

// ChatTokenLogprob is a token with its logprob, bytes and the top alternatives.
type ChatTokenLogprob struct {
	Token       string           `json:"token"`
	Logprob     Logprob          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []ChatTopLogprob `json:"top_logprobs"`
}

// ChatTopLogprob is one alternative in ChatTokenLogprob.TopLogprobs.
type ChatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob Logprob `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// TextBytes returns s's bytes as ints, the shape OpenAI uses for "bytes".
func TextBytes(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = int(s[i])
	}
	return out
}

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Object string      `json:"object"` // "list"
	Data   []ModelCard `json:"data"`
}

// ModelCard describes the served model.
type ModelCard struct {
	ID          string      `json:"id"`
	Object      string      `json:"object"` // "model"
	Created     int64       `json:"created"`
	OwnedBy     string      `json:"owned_by"`
	MaxModelLen int         `json:"max_model_len"` // vLLM's name for the context length
	Stockpot    ModelExtras `json:"stockpot"`
}

// ModelExtras are Stockpot's additions to a model card.
type ModelExtras struct {
	Fingerprint   string `json:"fingerprint"`
	ContextLength int    `json:"context_length"`
	BlockSize     int    `json:"block_size"`
	// MinReusableTokens is the shortest prefix a later request can reuse: the block size, or
	// for a hybrid model the state checkpoint granularity (block size x
	// --state-checkpoint-blocks). StateBytes is a hybrid's recurrent state per sequence (the
	// size of one checkpoint). Warning says when no prompt can hit the cache.
	MinReusableTokens int    `json:"min_reusable_tokens,omitempty"`
	StateBytes        int    `json:"state_bytes,omitempty"`
	Warning           string `json:"warning,omitempty"`
}

// TokenizeResponse is the body of POST /tokenize.
type TokenizeResponse struct {
	Tokens      []int32 `json:"tokens"`
	Count       int     `json:"count"`
	MaxModelLen int     `json:"max_model_len"`
}

// DetokenizeResponse is the body of POST /detokenize.
type DetokenizeResponse struct {
	Prompt string `json:"prompt"`
}

// FinishReasonPtr returns a pointer to a copy of s, for the nullable finish_reason fields.
func FinishReasonPtr(s string) *string { return &s }
