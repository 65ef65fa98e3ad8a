package server

import (
	"cmp"
	"slices"
	"time"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/miss"
)

// Prompt-cache retention's answers: the engine's PinResults (for the pins internal/pipeline
// made of cache_control breakpoints and prompt_cache_retention) come back as each dialect's
// usage: usage.cache's pinned_tokens, pin_requested_tokens and pin_limit in OpenAI's
// dialects, cache reads and writes by TTL in Anthropic's (anthropicCacheSplit).

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
		RemoteTokens: u.RemoteTokens, TransferTokens: u.TransferTokens, ComputedTokens: u.ComputedTokens, DiscardedTokens: u.DiscardedTokens,
		StateBytes: u.StateBytes, StoppedBy: u.StoppedBy,
	}
	if len(u.Pins) > 0 {
		pinned, requested := pinTotals(u.Pins)
		c.PinnedTokens, c.PinRequestedTokens = &pinned, &requested
		c.PinLimit = pinLimit(u.Pins)
	}
	c.Miss = missReport(u) // miss.go: when the request set cache_report
	if b := u.Blend; b != nil {
		c.BlendedTokens, c.BlendRecomputedTokens = &b.BlendedTokens, &b.RecomputedTokens
		c.Blend = &api.BlendReport{Declined: b.Declined, Chunks: make([]api.BlendChunkReport, len(b.Chunks))}
		for i, ch := range b.Chunks {
			c.Blend.Chunks[i] = api.BlendChunkReport{Start: ch.Start, End: ch.End, HitTokens: ch.Hit, BlendedTokens: ch.Blended, Part: ch.Part}
			for _, tier := range kvtier.Below {
				if n := ch.Restored[tier]; n > 0 {
					if c.Blend.Chunks[i].RestoredTokens == nil {
						c.Blend.Chunks[i].RestoredTokens = map[string]int{}
					}
					c.Blend.Chunks[i].RestoredTokens[tier.String()] = int(n)
				}
			}
		}
	}
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

// missReport is usage.cache.miss: the report when the request asked for it (the runner's
// explanation, internal/runner's miss.go).
func missReport(u engine.Usage) *miss.Report {
	if u.Miss == nil {
		return nil
	}
	return u.Miss.Report
}
