package api

import (
	"bytes"
	"encoding/json"
	"math"
	"time"
)

// The cache admin API's request bodies (POST /v1/cache/prewarm on serve and route).

// PrewarmRequest is the body of POST /v1/cache/prewarm: exactly one of prompt (a string or a
// token-id array, as on /v1/completions) and messages (chat messages rendered with the chat
// template, with optional tools, as on /v1/chat/completions), plus the tenant's cache_salt and
// an optional pin.
type PrewarmRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	Messages  json.RawMessage `json:"messages"`
	Tools     json.RawMessage `json:"tools"`
	CacheSalt string          `json:"cache_salt"`
	Pin       json.RawMessage `json:"pin"`
	// Public marks the prompt's full blocks public (the server's --tenants): every tenant with
	// public_reads continues them. Its cache_salt must be empty: public blocks have their own
	// namespace.
	Public bool `json:"public"`
	// Tenant, with --tenants, computes the prompt in that tenant's namespace (cache_salt then
	// subdivides it, as on the tenant's own requests).
	Tenant string `json:"tenant"`
	// AddGenerationPrompt renders messages with the assistant turn's opening (default false:
	// a prewarm computes the conversation prefix later requests extend).
	AddGenerationPrompt bool `json:"add_generation_prompt"`

	// Set by parsing. Completion holds a prompt's text or tokens; Chat the parsed messages and
	// tools. Exactly one is non-nil.
	Completion *CompletionRequest `json:"-"`
	Chat       *ChatRequest       `json:"-"`
	// PinTTL is the pin's time to live; 0 without a pin. PinStrict (pin.strict) refuses a pin
	// the pin budget cannot hold whole instead of pinning part of it.
	PinTTL    time.Duration `json:"-"`
	PinStrict bool          `json:"-"`
}

// Pin TTLs: Anthropic's two cache_control TTLs and OpenAI's prompt_cache_retention "24h", by
// name, or a number of seconds up to MaxPinTTL.
var pinTTLs = map[string]time.Duration{"5m": 5 * time.Minute, "1h": time.Hour, "24h": 24 * time.Hour}

// MaxPinTTL bounds a pin given in seconds: 7 days, past the longest retention any provider
// offers for a prompt cache (DeepSeek's disk cache keeps entries "hours to days").
const MaxPinTTL = 7 * 24 * time.Hour

// ParsePrewarmRequest decodes and validates a /v1/cache/prewarm body. Errors are *Error.
func ParsePrewarmRequest(body []byte) (*PrewarmRequest, error) {
	var r PrewarmRequest
	if err := decodeObject(body, &r); err != nil {
		return nil, err
	}
	if len(r.CacheSalt) > MaxCacheSaltBytes {
		return nil, Invalid("cache_salt", "cache_salt is %d bytes, over the limit of %d; use a tenant id or a hash of one", len(r.CacheSalt), MaxCacheSaltBytes)
	}
	if r.Public && (r.CacheSalt != "" || r.Tenant != "") {
		return nil, Invalid("public", "a public prefix has its own namespace: send public without cache_salt and tenant")
	}
	if len(r.Tenant) > 64 {
		return nil, Invalid("tenant", "tenant is %d bytes; tenant names have at most 64", len(r.Tenant))
	}
	ttl, strict, err := parsePin(r.Pin)
	if err != nil {
		return nil, err
	}
	r.PinTTL, r.PinStrict = ttl, strict
	hasPrompt, hasMessages := !isNull(bytes.TrimSpace(r.Prompt)), !isNull(bytes.TrimSpace(r.Messages))
	switch {
	case hasPrompt && hasMessages:
		return nil, Invalid("prompt", "send either prompt or messages, not both")
	case !hasPrompt && !hasMessages:
		return nil, Invalid("prompt", "a prewarm needs prompt (a string or token ids) or messages")
	case hasPrompt:
		if !isNull(bytes.TrimSpace(r.Tools)) {
			return nil, Invalid("tools", "tools are rendered with messages; send messages (a system message is enough) with tools")
		}
		c := &CompletionRequest{Prompt: r.Prompt}
		c.CacheSalt = r.CacheSalt
		if err := c.parsePrompt(); err != nil {
			return nil, err
		}
		r.Completion = c
	default:
		chat := map[string]any{"messages": r.Messages, "add_generation_prompt": r.AddGenerationPrompt}
		if !isNull(bytes.TrimSpace(r.Tools)) {
			chat["tools"] = r.Tools
		}
		if r.CacheSalt != "" {
			chat["cache_salt"] = r.CacheSalt
		}
		b, err := json.Marshal(chat)
		if err != nil {
			return nil, Invalid("messages", "cannot read messages: %v", err)
		}
		if r.Chat, err = ParseChatRequest(b); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// parsePin reads pin: null/absent (no pin) or {"ttl": "5m"|"1h"|"24h"|seconds, "strict": bool}.
func parsePin(raw json.RawMessage) (time.Duration, bool, error) {
	raw = bytes.TrimSpace(raw)
	if isNull(raw) {
		return 0, false, nil
	}
	var p struct {
		TTL    json.RawMessage `json:"ttl"`
		Strict bool            `json:"strict"`
	}
	if raw[0] != '{' || json.Unmarshal(raw, &p) != nil {
		return 0, false, Invalid("pin", `pin must be an object {"ttl": "5m" | "1h" | "24h" | seconds, "strict": false}`)
	}
	ttl, err := parsePinTTL(p.TTL)
	return ttl, p.Strict, err
}

// parsePinTTL reads pin.ttl.
func parsePinTTL(ttl json.RawMessage) (time.Duration, error) {
	ttl = bytes.TrimSpace(ttl)
	if isNull(ttl) {
		return 0, Invalid("pin.ttl", `pin.ttl is required: "5m", "1h", "24h" or a number of seconds`)
	}
	if ttl[0] == '"' {
		var s string
		if json.Unmarshal(ttl, &s) != nil {
			return 0, Invalid("pin.ttl", "pin.ttl must be a string or a number")
		}
		d, ok := pinTTLs[s]
		if !ok {
			return 0, Invalid("pin.ttl", `unknown pin.ttl %s: want "5m", "1h", "24h" or a number of seconds`, Quote(s))
		}
		return d, nil
	}
	var secs float64
	if json.Unmarshal(ttl, &secs) != nil {
		return 0, Invalid("pin.ttl", "pin.ttl must be a string or a number")
	}
	if secs != math.Trunc(secs) || secs < 1 || secs > MaxPinTTL.Seconds() {
		return 0, Invalid("pin.ttl", "pin.ttl is %s seconds; want a whole number from 1 to %d", ttl, int(MaxPinTTL.Seconds()))
	}
	return time.Duration(secs) * time.Second, nil
}
