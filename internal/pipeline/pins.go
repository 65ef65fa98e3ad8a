package pipeline

import (
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
//     BreakpointPins); usage splits the prompt into cache reads, cache writes (by TTL) and the
//     rest.
//
// pin_strict (a Stockpot extension in every dialect) turns a pin over the budget into a 400
// in the dialect's error shape; without it the pin is partial and the usage says so.

// retentionPins is the pin prompt_cache_retention asks for on a prompt of n tokens.
func retentionPins(gp *api.GenerationParams, n int) []engine.PinSpec {
	ttl := gp.RetentionTTL()
	if ttl <= 0 {
		return nil
	}
	return []engine.PinSpec{{Tokens: n, TTL: ttl}}
}

// BreakpointPins turns a Messages request's breakpoints into pins of prompt: breakpoint i
// pins the common token prefix of prompt and the render of the conversation cut right after
// its block (api.MessagesRequest.CutChat). Conservative: tokens the template or the
// tokenizer would render differently once later blocks follow are not part of the prefix.
// A cut the template cannot render pins nothing.
func (p *Pipeline) BreakpointPins(req *api.MessagesRequest, prompt []int32) []engine.PinSpec {
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
		_, ids, err := p.ChatPrompt(cut)
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
