package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The go-live acceptance gate (`stockpot bench --accept`), after the seed's method: the reuse
// ratio is the server's reused tokens ÷ (reused + recomputed), read from the server's own
// counters (stockpot_prompt_tokens_total{source}), never from usage; a cold step must reuse
// under 1%, a warm step at least 99%, and each tier is checked on its own.
//
// A warm step is measured against its reusable tokens, not its prompt: reuse is per full
// block (or per state checkpoint of a hybrid model), the partial tail block and at least the
// last prompt token are always computed, and a later agent turn's new message was never
// cached. So a warm step's share is reused ÷ reusable, where reusable is the block-aligned
// prefix an ideal cache could give it: ⌊(P−1)/U⌋·U for a repeated prompt (longctx), and the
// predictor's count for the scripted workloads (predict.go: the longest prefix shared with
// what earlier requests left, in whole units, the last token excluded). Both shares are in
// the report; the gate reads reused ÷ (reused + recomputed) for cold steps and reused ÷
// reusable for warm ones.
//
// Steps:
//   - longctx: each length's cold request, then the same prompt warm from the pool (tier
//     device) and from each lower tier in turn (host, disk, remote). A warm step counts only
//     the tokens its tier served: tokens served by another tier are reported apart and do not
//     count, so a tier that silently fell back to another fails.
//   - agent, docqa, sysprompt, rag, random: a request with nothing reusable (the first turn of
//     a session that shares nothing with earlier ones) is cold; the others are warm, grouped
//     by the tiers their reused tokens came from ("device", "device+host", or "none" for a
//     warm request that reused nothing).
//
// A warm request that reused some but not all of its reusable tokens is partial. Partial
// requests stay in their step's sums (averaging them away would hide them) and are also
// counted apart, with their own TPOT beside cold and warm.
//
// One request is in flight at a time (Config.validate sets the concurrency to 1), so each
// counter delta is one request's. A counter the server does not export is "not reported",
// which fails the step: it never reads as 0.

// ErrAcceptFailed is returned (wrapped, with the count) by Report.AcceptError when a step of
// the gate failed.
var ErrAcceptFailed = errors.New("acceptance gate failed")

// AcceptReport is report.json's accept section.
type AcceptReport struct {
	ColdMax float64      `json:"cold_max"` // a cold step passes when reused ÷ (reused + recomputed) < this
	WarmMin float64      `json:"warm_min"` // a warm step passes when reused ÷ reusable ≥ this
	Basis   string       `json:"basis"`
	Pass    bool         `json:"pass"`
	Steps   []AcceptStep `json:"steps"`
	// TPOT of the cold requests, the warm ones that reused all their reusable tokens, and the
	// partial ones (some or none of it), client side: (last token − first) ÷ (tokens − 1).
	TPOTCold    *Percentiles `json:"tpot_cold_ms"`
	TPOTWarm    *Percentiles `json:"tpot_warm_ms"`
	TPOTPartial *Percentiles `json:"tpot_partial_ms"`
	Notes       []string     `json:"notes,omitempty"`
}

// AcceptStep is one line of the verdict. Token counts are the server's counter deltas summed
// over the step's requests; null when the server did not report them.
type AcceptStep struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"` // "cold" or "warm"
	Tier     string `json:"tier"` // warm: the tier(s) meant to serve it; cold: "any"
	Requests int    `json:"requests"`
	Errors   int    `json:"errors"`
	// Reused is what counts for the step: any tier's for a cold step, Tier's for a warm one.
	Reused *float64 `json:"reused_tokens"`
	// OtherTiers is what a warm step got from tiers other than Tier (not counted as reused).
	OtherTiers *float64 `json:"reused_other_tiers_tokens"`
	Recomputed *float64 `json:"recomputed_tokens"`
	Reusable   *int64   `json:"reusable_tokens"` // null when unknown
	// Ratio is reused ÷ (reused + other tiers + recomputed): the share of the prompt.
	Ratio *float64 `json:"reused_ratio"`
	// OfReusable is reused ÷ reusable (warm steps; null for cold ones or when unknown).
	OfReusable *float64 `json:"reused_of_reusable"`
	Threshold  string   `json:"threshold"`
	Pass       bool     `json:"pass"`
	Reason     string   `json:"reason"`
	// Warm requests by what they reused of their reusable tokens: all, some, none.
	Full    int `json:"full_requests"`
	Partial int `json:"partial_requests"`
	Missed  int `json:"missed_requests"`
	// ServerHitClasses is the engine's own count of requests by hit class over the step
	// (stockpot_engine_requests_total{hit}); its warm is "every block of the prompt", so a
	// later agent turn is partial there. Null when not reported.
	ServerHitClasses map[string]float64 `json:"server_hit_classes"`
	TTFT             *Percentiles       `json:"ttft_ms"`
	TPOT             *Percentiles       `json:"tpot_ms"`
}

// acceptObs is one request as the gate sees it.
type acceptObs struct {
	step, kind, tier string
	// countTier, when set, is the only source whose tokens count as reused (longctx's
	// designed tier); empty: every cached source counts.
	countTier  string
	err        string
	server     map[string]float64 // prompt tokens by source; nil: not reported
	hits       map[string]float64
	reusable   int
	knownReuse bool // reusable is known
	ttft, tpot *float64
}

// acceptBasis is the report's statement of what the shares are taken against.
const acceptBasis = "server counters (stockpot_prompt_tokens_total{source}) per request, one in flight; " +
	"cold: reused ÷ (reused + recomputed) of the prompt, any tier; " +
	"warm: reused ÷ reusable, reusable being the block-aligned prefix an ideal cache could serve (the partial tail block and the last prompt token are always computed, new turns' tokens were never cached)"

// measureServer runs send between two scrapes of the server's counters when cfg.Accept, and
// keeps the delta in s.Server (nil when the server does not report them).
func measureServer(ctx context.Context, cfg Config, s *Sample, send func()) {
	if !cfg.Accept {
		send()
		return
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	before, err := scrapeServers(ctx, hc, cfg)
	send()
	if err != nil || !before.Present {
		return
	}
	after, err := settledScrape(context.WithoutCancel(ctx), hc, cfg, before, []Sample{*s})
	if err != nil || !after.Present {
		return
	}
	d := counterDelta(before, after)
	s.Server = &d
}

// sampleTPOT is the client-side time per output token after the first, in ms.
func sampleTPOT(s Sample) *float64 {
	n := s.CompletionTokens
	if !s.UsageReported {
		n = s.Chunks
	}
	if !s.OK || s.FirstToken <= 0 || n <= 1 {
		return nil
	}
	return ptr(ms(s.End-s.FirstToken) / float64(n-1))
}

// acceptScripted is the gate over a scripted workload's samples (sorted by start); pred is
// the predictor's reusable tokens per sample (nil when it had no units to work on).
func acceptScripted(cfg Config, samples []Sample, pred []predicted) *AcceptReport {
	obs := make([]acceptObs, 0, len(samples))
	for i, s := range samples {
		o := acceptObs{err: s.Err, tpot: sampleTPOT(s)}
		if !s.OK && o.err == "" {
			o.err = fmt.Sprintf("HTTP %d", s.Status)
		}
		if s.OK && s.FirstToken > 0 {
			o.ttft = ptr(ms(s.FirstToken - s.Start))
		}
		if s.Server != nil {
			o.server, o.hits = s.Server.Tiers, s.Server.HitClasses
		}
		if pred != nil && s.OK {
			o.reusable, o.knownReuse = pred[i].reuse, true
		}
		o.kind = "warm"
		if (o.knownReuse && o.reusable == 0) || (!o.knownReuse && s.Turn == 0) {
			o.kind = "cold"
		}
		o.step, o.tier = cfg.Workload+" "+o.kind, "any"
		if o.kind == "warm" {
			o.tier = servedBy(o.server)
		}
		obs = append(obs, o)
	}
	a := judge(cfg, obs)
	if pred == nil {
		a.Notes = append(a.Notes, "no token ids and no usage.prompt_tokens: reusable tokens unknown, so warm steps cannot pass")
	}
	return a
}

// servedBy names the cached sources a request's tokens came from, fastest first ("device",
// "device+host"); "none" when nothing was reused, "not reported" without counters.
func servedBy(server map[string]float64) string {
	if server == nil {
		return "not reported"
	}
	var parts []string
	for _, t := range tierNames[1:] {
		if server[t] > 0 {
			parts = append(parts, t)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// acceptLongCtx is the gate over a longctx run: one step per request of every measured
// length. unit is the reuse granularity (block, or state checkpoint of a hybrid model).
func acceptLongCtx(cfg Config, lc *LongCtxReport, unit int, admin bool) *AcceptReport {
	var obs []acceptObs
	var notes []string
	for _, l := range lc.Lengths {
		if l.Skipped != "" {
			notes = append(notes, fmt.Sprintf("length %d skipped: %s", l.Target, l.Skipped))
			continue
		}
		for _, st := range l.Steps {
			o := acceptObs{step: fmt.Sprintf("longctx %d %s", l.Target, st.Source), kind: "warm", tier: st.Source,
				countTier: st.Source, err: st.Error, server: st.ServerTokens, hits: st.ServerHitClasses, tpot: st.TPOTMs, ttft: st.TTFTMs}
			if st.Source == "cold" {
				o.kind, o.tier, o.countTier = "cold", "any", ""
			}
			if st.Source == "staging" {
				o.tier, o.countTier = "lower tiers", ""
			}
			if p := st.PromptTokens; p > 0 && unit > 0 {
				o.reusable, o.knownReuse = (p-1)/unit*unit, true
			}
			obs = append(obs, o)
		}
	}
	a := judge(cfg, obs)
	a.Notes = append(a.Notes, notes...)
	if !admin {
		a.Notes = append(a.Notes, "no --admin-key: only cold and warm from the pool were checked; the lower tiers (host, disk, remote) were not")
	}
	return a
}

// judge groups the observations into steps (in order of first appearance) and gives each its
// verdict.
func judge(cfg Config, obs []acceptObs) *AcceptReport {
	a := &AcceptReport{ColdMax: cfg.AcceptColdMax, WarmMin: cfg.AcceptWarmMin, Basis: acceptBasis, Pass: true, Steps: []AcceptStep{}}
	type key struct{ step, tier string }
	var order []key
	groups := map[key][]acceptObs{}
	var cold, warm, partial []float64
	for _, o := range obs {
		k := key{o.step, o.tier}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], o)
		if o.tpot == nil {
			continue
		}
		switch r, _, _ := o.reused(); {
		case o.kind == "cold":
			cold = append(cold, *o.tpot)
		case o.knownReuse && r >= float64(o.reusable):
			warm = append(warm, *o.tpot)
		default:
			partial = append(partial, *o.tpot)
		}
	}
	for _, k := range order {
		st := judgeStep(cfg, groups[k])
		a.Pass = a.Pass && st.Pass
		a.Steps = append(a.Steps, st)
	}
	if len(a.Steps) == 0 {
		a.Pass = false
		a.Notes = append(a.Notes, "no step was measured")
	}
	a.TPOTCold, a.TPOTWarm, a.TPOTPartial = summarize(cold), summarize(warm), summarize(partial)
	return a
}

// reused splits one request's server counts: what counts as reused, what other tiers
// served, and what was recomputed. ok is false when the server reported nothing.
func (o acceptObs) reused() (reused, other float64, ok bool) {
	if o.server == nil {
		return 0, 0, false
	}
	for src, v := range o.server {
		switch {
		case src == "computed":
		case o.countTier == "" || src == o.countTier:
			reused += v
		default:
			other += v
		}
	}
	return reused, other, true
}
