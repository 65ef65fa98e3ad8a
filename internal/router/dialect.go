package router

import (
	"bytes"
	"context"
	"encoding/json"
)

// Dialects. Every generation endpoint is routed by its prompt as the replica renders it: the
// router has no tokenizer, so it asks a replica for the tokens of the whole request body
// (POST /tokenize/render?endpoint=PATH, internal/server/render.go): the chat template with
// tools, chat_template_kwargs, a Responses request's instructions and items, a Messages
// request's system blocks and tool definitions. Two turns of an agent with tools then share
// the prefix the replica cached, tools and all, not only a system prompt. A completion's
// prompt is read from the body (token ids) or tokenized by /tokenize as before. A replica that
// predates the endpoint answers 404: a chat is then tokenized as before (its messages alone),
// and a Responses or Messages request is placed without tokens (its key or session, else the
// least loaded).
//
// Usage is read from every dialect's answer, streamed or not: chat and completions'
// usage.prompt_tokens_details.cached_tokens, Responses' usage.input_tokens_details.cached_tokens
// (a stream's response.completed event), and Anthropic's usage.cache_read_input_tokens (a
// stream's message_start and message_delta; the prompt is input + cache reads + cache
// writes there). A missing cached count is unknown, never 0: the dashboard's delivered tokens
// say -1 and stockpot_router_cached_tokens_total does not count the request.

// dialect is what the router reads of a generation endpoint's answers.
type dialect uint8

const (
	dialectOpenAI    dialect = iota // /v1/completions, /v1/chat/completions: data: [DONE] ends a stream
	dialectResponses                // /v1/responses
	dialectMessages                 // /v1/messages (Anthropic)
)

func dialectOf(path string) dialect {
	switch path {
	case "/v1/responses":
		return dialectResponses
	case "/v1/messages":
		return dialectMessages
	}
	return dialectOpenAI
}

// renderPath is the replica endpoint that renders and tokenizes a request body of any dialect.
const renderPath = "/tokenize/render"

// renders reports whether the router asks a replica to render requests on path (every
// generation endpoint whose prompt is a chat: a completion's prompt needs no template).
func renders(path string) bool {
	switch path {
	case "/v1/chat/completions", "/v1/responses", "/v1/messages":
		return true
	}
	return false
}

// usageInfo is what the router reads of an answer's usage.
type usageInfo struct {
	ok     bool // the answer had a usage object
	prompt int
	// cached is the prompt tokens the backend reused; cachedKnown says the answer said so (a
	// missing field is unknown, never 0).
	cached      int
	cachedKnown bool
	// transfer is usage.cache.transfer_tokens: prompt tokens a decode replica pulled from
	// its prefill replica (pd.go).
	transfer int
}

// wireUsage is the union of the dialects' usage objects.
type wireUsage struct {
	PromptTokens *int `json:"prompt_tokens"` // chat, completions
	InputTokens  *int `json:"input_tokens"`  // Responses, Messages
	Details      *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	InputDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	CacheRead     *int `json:"cache_read_input_tokens"`     // Messages
	CacheCreation *int `json:"cache_creation_input_tokens"` // Messages
	Cache         *struct {
		TransferTokens int `json:"transfer_tokens"`
	} `json:"cache"`
}

// usageOf converts a usage object of dialect d.
func usageOf(d dialect, u *wireUsage) usageInfo {
	out := usageInfo{ok: true}
	val := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	switch d {
	case dialectOpenAI:
		out.prompt = val(u.PromptTokens)
		if u.Details != nil && u.Details.CachedTokens != nil {
			out.cached, out.cachedKnown = *u.Details.CachedTokens, true
		}
	case dialectResponses:
		out.prompt = val(u.InputTokens)
		if u.InputDetails != nil && u.InputDetails.CachedTokens != nil {
			out.cached, out.cachedKnown = *u.InputDetails.CachedTokens, true
		}
	case dialectMessages:
		// Anthropic's input_tokens leaves out the tokens read from and written to the cache.
		out.prompt = val(u.InputTokens) + val(u.CacheRead) + val(u.CacheCreation)
		if u.CacheRead != nil {
			out.cached, out.cachedKnown = *u.CacheRead, true
		}
	}
	if u.Cache != nil {
		out.transfer = u.Cache.TransferTokens
	}
	return out
}

// parseUsageFor reads the usage of an answer (or of one stream event's data) of dialect d: a
// top-level "usage", or for a Responses event the "usage" of its "response" and for a
// Messages message_start the "usage" of its "message".
func parseUsageFor(d dialect, b []byte) usageInfo {
	var body struct {
		Usage    *wireUsage `json:"usage"`
		Response *struct {
			Usage *wireUsage `json:"usage"`
		} `json:"response"`
		Message *struct {
			Usage *wireUsage `json:"usage"`
		} `json:"message"`
	}
	if json.Unmarshal(b, &body) != nil {
		return usageInfo{}
	}
	u := body.Usage
	switch {
	case u != nil:
	case d == dialectResponses && body.Response != nil:
		u = body.Response.Usage
	case d == dialectMessages && body.Message != nil:
		u = body.Message.Usage
	}
	if u == nil {
		return usageInfo{}
	}
	return usageOf(d, u)
}

// parseUsage reads a chat or completion answer's usage.
func parseUsage(b []byte) usageInfo { return parseUsageFor(dialectOpenAI, b) }

// mergeUsage folds a later stream event's usage into what earlier ones said: the later wins,
// but a later one that does not say the cached count (an Anthropic message_delta with output
// tokens only) keeps the earlier count, and its prompt when it has none.
func mergeUsage(prev, next usageInfo) usageInfo {
	switch {
	case !next.ok:
		return prev
	case !prev.ok || next.cachedKnown || !prev.cachedKnown:
		if next.prompt == 0 && prev.ok {
			next.prompt = prev.prompt
		}
		return next
	}
	next.cached, next.cachedKnown = prev.cached, true
	if next.prompt == 0 {
		next.prompt = prev.prompt
	}
	return next
}

// usageScanner reads the usage of a Responses or Messages stream as its events go by: every
// data line that mentions "usage" is parsed (a handful per stream: the created, in-progress
// and completed events, or message_start and message_delta), so a completed event larger
// than any tail still counts.
type usageScanner struct {
	d dialect
	u usageInfo
}

// scan reads the complete events in p.
func (s *usageScanner) scan(p []byte) {
	for len(p) > 0 {
		i := bytes.Index(p, []byte(`"usage"`))
		if i < 0 {
			return
		}
		start := bytes.LastIndex(p[:i], []byte("data:"))
		end := bytes.IndexByte(p[i:], '\n')
		if end < 0 {
			end = len(p)
		} else {
			end += i
		}
		if start >= 0 && bytes.IndexByte(p[start:i], '\n') < 0 {
			s.u = mergeUsage(s.u, parseUsageFor(s.d, bytes.TrimSpace(p[start+len("data:"):end])))
		}
		p = p[end:]
	}
}

// renderedTokens returns the prompt tokens of a request body on path (a chat, Responses or
// Messages endpoint) as a replica renders it (renderPath); nil when no replica could say. A
// chat whose replicas all predate renderPath is tokenized as before: its messages alone.
func (r *Router) renderedTokens(ctx context.Context, path string, body []byte, gb *generateBody) []int32 {
	ids, notFound := r.askTokensErr(ctx, renderPath+"?endpoint="+path, path, body)
	if ids == nil && notFound && path == "/v1/chat/completions" {
		ids, _ = r.promptTokens(ctx, gb) // a text prompt is no chat's: messages only
	}
	return ids
}
