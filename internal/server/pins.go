package server

import (
	"cmp"
	"slices"
	"time"

	"stockpot/internal/api"
	"stockpot/internal/engine"
)

// Prompt-cache retention in the dialects: Anthropic's cache_control breakpoints and OpenAI's
// prompt_cache_retention become engine pins (engine.PinSpec); the engine's PinResults come
// back as each dialect's usage.
//
//   - OpenAI (chat completions, completions, Responses): prompt_cache_retention pins the whole
//     prompt's full blocks ("in_memory": api.RetentionInMemory, "24h": 24 hours after the
//     last use). usage.prompt_tokens_details.cached_tokens is unchanged; usage.cache gains
//     pinned_tokens and pin_requested_tokens.
//   - Anthropic: each breakpoint pins the prompt up to the end of its block (see
//     breakpointPins); usage splits the prompt into cache reads, cache writes (by TTL) and the
//     rest.
//
// pin_strict (a Stockpot extension in every dialect) turns a pin over the budget into a 400
// in the dialect's error shape; without it the pin is partial and the usage says so.

// retentionPins is the pin prompt_cache_retention asks for on a prompt of n tokens.
func retentionPins(p *api.GenerationParams, n int) []engine.PinSpec {
	ttl := p.RetentionTTL()
	if ttl <= 0 {
		return nil
	}
	return []engine.PinSpec{{Tokens: n, TTL: ttl}}
}

// breakpointPins turns a Messages request's breakpoints into pins of prompt: breakpoint i
// pins the common token prefix of prompt and the render of the conversation cut right after
// its block (api.MessagesRequest.CutChat). Conservative: tokens the template or the
// tokenizer would render differently once later blocks follow are not part of the prefix.
// A cut the template cannot render pins nothing.
func (s *Server) breakpointPins(req *api.MessagesRequest, prompt []int32) []engine.PinSpec {
	if len(req.Breakpoints) == 0 {
		return nil
	}
	pins := make([]engine.PinSpec, len(req.Breakpoints))
	for i, b := range req.Breakpoints {
		pins[i] = engine.PinSpec{Tokens: len(prompt), TTL: b.Duration()}
		cut := req.CutChat(i)
		if cut == nil {
			continue // the whole prompt
		}
		_, ids, err := s.chatPrompt(cut)
		if err != nil {
			pins[i].Tokens = 0
			continue
		}
		pins[i].Tokens = commonPrefix(ids, prompt)
	}
	return pins
}

func commonPrefix(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// pinLimit is why the longest of a request's pins holds less than it asked ("" when it holds
// all, or no limit was the cause): engine.PinLimit*.
func pinLimit(pins []engine.PinResult) string {
	why, longest := "", -1
	for _, p := range pins {
		if p.Requested > longest {
			why, longest = p.Limit, p.Requested
		}
	}
	return why
}

// pinTotals is what a request's pins hold: the longest pin's pinned and requested tokens
// (pins are prefixes of one prompt, so the longest covers the others).
func pinTotals(pins []engine.PinResult) (pinned, requested int) {
	for _, p := range pins {
		pinned = max(pinned, p.Pinned)
		requested = max(requested, p.Requested)
	}
	return pinned, requested
}

// cacheUsage is usage.cache: where the prompt came from, and what its pins hold.
func cacheUsage(u engine.Usage) api.CacheUsage {
	c := api.CacheUsage{
		DeviceTokens: u.DeviceTokens, HostTokens: u.HostTokens, DiskTokens: u.DiskTokens,
		RemoteTokens: u.RemoteTokens, ComputedTokens: u.ComputedTokens, DiscardedTokens: u.DiscardedTokens,
		StateBytes: u.StateBytes, StoppedBy: u.StoppedBy,
	}
	if len(u.Pins) > 0 {
		pinned, requested := pinTotals(u.Pins)
		c.PinnedTokens, c.PinRequestedTokens = &pinned, &requested
		c.PinLimit = pinLimit(u.Pins)
	}
	c.Miss = missReport(u) // miss.go: when the request set cache_report
	return c
}

// anthropicCacheSplit splits a prompt's cache writes by TTL. Pins are prefixes: sorted by
// length, pin i's writes beyond the shorter ones' go to the longest TTL among the pins that
// reach past them (what the engine pins a block for).
func anthropicCacheSplit(pins []engine.PinResult) (m5, h1 int) {
	ps := slices.Clone(pins)
	slices.SortStableFunc(ps, func(a, b engine.PinResult) int { return cmp.Compare(a.Pinned, b.Pinned) })
	prev := 0
	for i, p := range ps {
		seg := p.Created - prev
		if seg <= 0 {
			continue
		}
		prev = p.Created
		ttl := time.Duration(0)
		for _, q := range ps[i:] {
			ttl = max(ttl, q.TTL)
		}
		if ttl >= time.Hour {
			h1 += seg
		} else {
			m5 += seg
		}
	}
	return m5, h1
}
