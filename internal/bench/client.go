package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// target is what the bench learned about the server before the run.
type target struct {
	base      string
	apiKey    string
	model     string
	blockSize int // from GET /v1/models (stockpot.block_size), else the configured or 16
	// reuseUnit is the granularity of a hit, for the prediction: the target's
	// stockpot.min_reusable_tokens (a hybrid model reuses prefixes only up to a state
	// checkpoint, every few blocks), else blockSize.
	reuseUnit int
	stockpot  bool // the target is Stockpot: ask for return_token_ids
	tokenize  bool // POST /tokenize works
	http      *http.Client
}

func (t *target) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, t.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if t.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+t.apiKey)
	}
	return t.http.Do(req)
}

// unit is the granularity of a hit the prediction assumes (reuseUnit, else blockSize).
func (t *target) unit() int {
	if t.reuseUnit > 0 {
		return t.reuseUnit
	}
	return t.blockSize
}

// probe reads GET /v1/models for the model name and Stockpot's block size, and checks whether
// POST /tokenize answers. Neither is required: an OpenAI-compatible server without them still
// gets benchmarked, with a coarser prediction.
func (t *target) probe(ctx context.Context, blockSize int) {
	t.blockSize = blockSize
	if resp, err := t.do(ctx, http.MethodGet, "/v1/models", nil); err == nil {
		var ml struct {
			Data []struct {
				ID       string `json:"id"`
				Stockpot *struct {
					BlockSize         int `json:"block_size"`
					MinReusableTokens int `json:"min_reusable_tokens"`
				} `json:"stockpot"`
			} `json:"data"`
		}
		if resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&ml) == nil && len(ml.Data) > 0 {
			if t.model == "" {
				t.model = ml.Data[0].ID
			}
			if sp := ml.Data[0].Stockpot; sp != nil {
				t.stockpot = true
				if blockSize == 0 && sp.BlockSize > 0 {
					t.blockSize = sp.BlockSize
					if sp.MinReusableTokens > sp.BlockSize && sp.MinReusableTokens%sp.BlockSize == 0 {
						t.reuseUnit = sp.MinReusableTokens
					}
				}
			}
		}
		resp.Body.Close()
	}
	if t.blockSize == 0 {
		t.blockSize = 16
	}
	if t.reuseUnit == 0 {
		t.reuseUnit = t.blockSize
	}
	if t.model == "" {
		t.model = "default"
	}
	if _, err := t.tokenizeText(ctx, "probe", true); err == nil {
		t.tokenize = true
	}
}

// tokenizeText asks POST /tokenize for the ids of a completion prompt.
func (t *target) tokenizeText(ctx context.Context, text string, special bool) ([]int32, error) {
	return t.tokenizeBody(ctx, map[string]any{"model": t.model, "prompt": text, "add_special": special})
}

// tokenizeChat asks POST /tokenize for the ids of chat messages, rendered with the template.
func (t *target) tokenizeChat(ctx context.Context, msgs []Message) ([]int32, error) {
	return t.tokenizeBody(ctx, map[string]any{"model": t.model, "messages": msgs})
}

func (t *target) tokenizeBody(ctx context.Context, body any) ([]int32, error) {
	resp, err := t.do(ctx, http.MethodPost, "/tokenize", body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("/tokenize: HTTP %d", resp.StatusCode)
	}
	var tr struct {
		Tokens []int32 `json:"tokens"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil {
		return nil, fmt.Errorf("/tokenize: %w", err)
	}
	if tr.Tokens == nil {
		return nil, fmt.Errorf("/tokenize: no tokens in the answer")
	}
	return tr.Tokens, nil
}

// calibrate measures tokens per word-list word with /tokenize, so token-length flags come out
// close. Without /tokenize it returns the English default.
func (t *target) calibrate(ctx context.Context, seed uint64) float64 {
	if !t.tokenize {
		return defaultTokensPerWord
	}
	const words = 400
	g := &textGen{rng: newRand(seed ^ 0xca1b), tokensPerWord: 1}
	text := g.words(words)
	ids, err := t.tokenizeText(ctx, text, false)
	if err != nil || len(ids) == 0 {
		return defaultTokensPerWord
	}
	return float64(len(ids)) / float64(words)
}

// Timings is usage.timings, Stockpot's server-side phases of one request in milliseconds:
// the engine's own clock, free of the network and of the client's stream parsing.
type Timings struct {
	QueueMs   float64 `json:"queue_ms"`
	RestoreMs float64 `json:"restore_ms"`
	PrefillMs float64 `json:"prefill_ms"`
	TTFTMs    float64 `json:"ttft_ms"`
}

// CacheUsage is usage.cache, Stockpot's per-tier split of the prompt.
type CacheUsage struct {
	DeviceTokens    int `json:"device_tokens"`
	HostTokens      int `json:"host_tokens"`
	DiskTokens      int `json:"disk_tokens"`
	RemoteTokens    int `json:"remote_tokens"`
	ComputedTokens  int `json:"computed_tokens"`
	DiscardedTokens int `json:"discarded_tokens"`
}

type usageWire struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	Cache   *CacheUsage `json:"cache"`
	Timings *Timings    `json:"timings"`

	// Anthropic's usage (/v1/messages: message_start's message.usage, message_delta's usage).
	InputTokens              *int `json:"input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
	CacheCreation            *struct {
		Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
		Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
}

// anthropic reports whether u is Anthropic's usage shape.
func (u *usageWire) anthropic() bool {
	return u.InputTokens != nil || u.OutputTokens != nil || u.CacheReadInputTokens != nil || u.CacheCreationInputTokens != nil
}

// CacheSplit is Anthropic's split of a prompt into cache reads and writes by TTL, as the
// server reported it on /v1/messages.
type CacheSplit struct {
	Read    int `json:"cache_read_input_tokens"`
	Write5m int `json:"cache_write_5m_tokens"`
	Write1h int `json:"cache_write_1h_tokens"`
	Input   int `json:"input_tokens"` // the uncached rest
}

// merge folds one Anthropic usage object into the split (later fields win, as
// message_delta's usage completes message_start's).
func (c *CacheSplit) merge(u *usageWire) {
	if u.InputTokens != nil {
		c.Input = *u.InputTokens
	}
	if u.CacheReadInputTokens != nil {
		c.Read = *u.CacheReadInputTokens
	}
	switch {
	case u.CacheCreation != nil:
		c.Write5m, c.Write1h = u.CacheCreation.Ephemeral5m, u.CacheCreation.Ephemeral1h
	case u.CacheCreationInputTokens != nil:
		c.Write5m, c.Write1h = *u.CacheCreationInputTokens, 0 // no split given: the default TTL
	}
}

type chunkWire struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content   string          `json:"content"`
			ToolCalls json.RawMessage `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
		TokenIDs     []int32 `json:"token_ids"`
	} `json:"choices"`
	Usage          *usageWire `json:"usage"`
	PromptTokenIDs []int32    `json:"prompt_token_ids"`
	// Anthropic's stream: message_start's message, content_block_delta's and message_delta's
	// delta.
	Message *struct {
		Usage *usageWire `json:"usage"`
	} `json:"message"`
	Delta *struct {
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// Sample is what the client saw of one request. Times are offsets from the start of the run.
type Sample struct {
	Session int `json:"session"`
	Turn    int `json:"turn"`

	Start      time.Duration `json:"-"`
	FirstToken time.Duration `json:"-"` // 0: no content arrived
	End        time.Duration `json:"-"`

	OK     bool   `json:"ok"`
	Status int    `json:"status"`
	Err    string `json:"error,omitempty"`

	UsageReported    bool        `json:"usage_reported"`
	PromptTokens     int         `json:"prompt_tokens"`
	CompletionTokens int         `json:"completion_tokens"`
	CachedTokens     *int        `json:"cached_tokens"` // nil: not reported (field absent)
	Cache            *CacheUsage `json:"cache,omitempty"`
	CacheSplit       *CacheSplit `json:"cache_split,omitempty"` // /v1/messages only
	Timings          *Timings    `json:"timings,omitempty"`     // Stockpot's usage.timings; nil when absent
	Chunks           int         `json:"chunks"`
	FinishReason     string      `json:"finish_reason,omitempty"`

	PromptIDs  []int32 `json:"-"`
	OutputIDs  []int32 `json:"-"`
	PromptText string  `json:"-"`
	OutputText string  `json:"-"`

	// Server is the server's counter deltas over this request alone (--accept runs one
	// request at a time); nil when not measured or not reported.
	Server *counterSnapshot `json:"-"`
}

// messageUsage is message_start's message.usage, nil otherwise.
func messageUsage(c *chunkWire) *usageWire {
	if c.Message == nil {
		return nil
	}
	return c.Message.Usage
}

// send posts one streamed request and reads the SSE answer to the end. The first content
// chunk's arrival is the TTFT; usage comes from the last chunk (stream_options.include_usage).
func (t *target) send(ctx context.Context, endpoint string, body map[string]any, epoch time.Time, s *Sample) {
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	if t.stockpot {
		body["return_token_ids"] = true
	}
	if _, ok := body["model"]; !ok {
		body["model"] = t.model
	}
	s.Start = time.Since(epoch)
	defer func() { s.End = time.Since(epoch) }()
	resp, err := t.do(ctx, http.MethodPost, endpoint, body)
	if err != nil {
		s.Err = err.Error()
		return
	}
	defer resp.Body.Close()
	s.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		s.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))
		return
	}
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			done = true
			break
		}
		var c chunkWire
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			s.Err = fmt.Sprintf("bad SSE chunk: %v", err)
			return
		}
		if c.Error != nil {
			s.Err = "stream error: " + c.Error.Message
			return
		}
		if c.PromptTokenIDs != nil {
			s.PromptIDs = c.PromptTokenIDs
		}
		for _, ch := range c.Choices {
			text := ch.Text + ch.Delta.Content
			// A tool call streamed as delta.tool_calls is output as much as text is.
			calls := len(ch.Delta.ToolCalls) > 0 && string(ch.Delta.ToolCalls) != "null"
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				s.FinishReason = *ch.FinishReason
			}
			if text != "" || calls {
				if s.FirstToken == 0 {
					s.FirstToken = time.Since(epoch)
				}
				s.Chunks++
				out.WriteString(text)
			}
			s.OutputIDs = append(s.OutputIDs, ch.TokenIDs...)
		}
		if d := c.Delta; d != nil {
			if d.Text != "" || d.PartialJSON != "" {
				if s.FirstToken == 0 {
					s.FirstToken = time.Since(epoch)
				}
				s.Chunks++
				out.WriteString(d.Text)
			}
			if d.StopReason != "" {
				s.FinishReason = d.StopReason
			}
		}
		for _, u := range []*usageWire{c.Usage, messageUsage(&c)} {
			if u != nil && u.anthropic() {
				if s.CacheSplit == nil {
					s.CacheSplit = &CacheSplit{}
				}
				s.CacheSplit.merge(u)
				sp := *s.CacheSplit
				s.UsageReported = true
				s.PromptTokens, s.CachedTokens = sp.Input+sp.Read+sp.Write5m+sp.Write1h, &sp.Read
				if u.OutputTokens != nil {
					s.CompletionTokens = *u.OutputTokens
				}
			}
		}
		if u := c.Usage; u != nil && !u.anthropic() {
			s.UsageReported = true
			s.PromptTokens, s.CompletionTokens = u.PromptTokens, u.CompletionTokens
			if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil {
				v := *u.PromptTokensDetails.CachedTokens
				s.CachedTokens = &v
			}
			s.Cache = u.Cache
			s.Timings = u.Timings
		}
	}
	if err := sc.Err(); err != nil {
		s.Err = fmt.Sprintf("reading stream: %v", err)
		return
	}
	if !done && ctx.Err() != nil {
		s.Err = ctx.Err().Error()
		return
	}
	s.OutputText = out.String()
	s.OK = true
}
