package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// stepTally is one step's sums over its requests that answered.
type stepTally struct {
	reused, other, recomputed float64
	reusable                  int64
	reported, known, hits     bool
	firstErr                  string
	ttft, tpot                []float64
}

// tallyStep sums a step's requests into st (errors, the warm requests' full / partial /
// missed counts, the engine's hit classes) and returns the sums the verdict reads.
func tallyStep(st *AcceptStep, g []acceptObs) stepTally {
	t := stepTally{reported: true, known: true, hits: true}
	for _, o := range g {
		if o.err != "" {
			st.Errors++
			if t.firstErr == "" {
				t.firstErr = o.err
			}
			continue
		}
		r, x, ok := o.reused()
		if !ok {
			t.reported = false
			continue
		}
		t.reused, t.other, t.recomputed = t.reused+r, t.other+x, t.recomputed+o.server["computed"]
		t.known = t.known && o.knownReuse
		t.reusable += int64(o.reusable)
		t.hits = t.hits && o.hits != nil
		st.ServerHitClasses = addInto(st.ServerHitClasses, o.hits)
		if o.kind == "warm" && o.knownReuse {
			switch {
			case r >= float64(o.reusable):
				st.Full++
			case r > 0:
				st.Partial++
			default:
				st.Missed++
			}
		}
		if o.ttft != nil {
			t.ttft = append(t.ttft, *o.ttft)
		}
		if o.tpot != nil {
			t.tpot = append(t.tpot, *o.tpot)
		}
	}
	if !t.hits {
		st.ServerHitClasses = nil
	}
	return t
}

// judgeStep gives one step (its requests in g, all of one name and tier) its verdict.
func judgeStep(cfg Config, g []acceptObs) AcceptStep {
	st := AcceptStep{Name: g[0].step, Kind: g[0].kind, Tier: g[0].tier, Requests: len(g)}
	st.Threshold = fmt.Sprintf("< %.1f%% of prompt", cfg.AcceptColdMax*100)
	if st.Kind == "warm" {
		st.Threshold = fmt.Sprintf("≥ %.1f%% of reusable", cfg.AcceptWarmMin*100)
	}
	t := tallyStep(&st, g)
	st.TTFT, st.TPOT = summarize(t.ttft), summarize(t.tpot)
	switch {
	case st.Errors > 0:
		st.Reason = fmt.Sprintf("%d of %d requests failed: %s", st.Errors, st.Requests, t.firstErr)
		return st
	case !t.reported:
		st.Reason = "not reported: the server's /metrics has no stockpot_prompt_tokens_total{source} (a missing counter is not 0)"
		return st
	}
	st.Reused, st.OtherTiers, st.Recomputed = ptr(t.reused), ptr(t.other), ptr(t.recomputed)
	if t.known {
		st.Reusable = ptr(t.reusable)
	}
	total := t.reused + t.other + t.recomputed
	if total == 0 {
		st.Reason = "the server counted no prompt tokens for this step"
		return st
	}
	st.Ratio = ptr(t.reused / total)
	if st.Kind == "cold" {
		st.Pass = *st.Ratio < cfg.AcceptColdMax
		st.Reason = fmt.Sprintf("reused %.0f of %.0f prompt tokens", t.reused, total)
		if !st.Pass {
			st.Reason += ": blocks left by earlier traffic (clear them with DELETE /v1/cache), or a prompt that shares a prefix with an earlier one"
		}
		return st
	}
	switch {
	case !t.known:
		st.Reason = "reusable tokens unknown (the target gave no token ids and no usage.prompt_tokens)"
		return st
	case t.reusable == 0:
		st.Reason = "nothing reusable: each prompt is shorter than one block (or state checkpoint) plus a token"
		return st
	}
	st.OfReusable = ptr(t.reused / float64(t.reusable))
	st.Pass = *st.OfReusable >= cfg.AcceptWarmMin
	from := "from " + st.Tier
	if st.Tier == "none" {
		from = "(no tier served any)"
	}
	st.Reason = fmt.Sprintf("reused %.0f of %d reusable tokens %s (%.0f from other tiers, %.0f recomputed); %d full, %d partial, %d missed",
		t.reused, t.reusable, from, t.other, t.recomputed, st.Full, st.Partial, st.Missed)
	return st
}

// AcceptError is nil when the gate passed (or did not run), else ErrAcceptFailed wrapped with
// how many steps failed.
func (r *Report) AcceptError() error {
	a := r.Accept
	if a == nil || a.Pass {
		return nil
	}
	failed := 0
	for _, st := range a.Steps {
		if !st.Pass {
			failed++
		}
	}
	if len(a.Steps) == 0 {
		return fmt.Errorf("%w: no step was measured", ErrAcceptFailed)
	}
	return fmt.Errorf("%w: %d of %d steps failed", ErrAcceptFailed, failed, len(a.Steps))
}

// verdict is PASS or FAIL.
func verdict(pass bool) string {
	if pass {
		return "PASS"
	}
	return "FAIL"
}

// fmtShare is "99.2% (2032 ÷ 2048)", or "not reported" / "n/a".
func fmtShare(share *float64, num *float64, den float64, missing string) string {
	if share == nil || num == nil {
		return missing
	}
	return fmt.Sprintf("%.1f%% (%.0f ÷ %.0f)", *share*100, *num, den)
}

// acceptColumns is one step's columns in the verdict: step, tier, reused ÷ (reused +
// recomputed), reused ÷ reusable, threshold, verdict, why.
func (st AcceptStep) acceptColumns() []string {
	var total float64
	if st.Reused != nil {
		total = *st.Reused + *st.OtherTiers + *st.Recomputed
	}
	ofPrompt := fmtShare(st.Ratio, st.Reused, total, "not reported")
	ofReusable := "n/a"
	if st.Reusable != nil {
		ofReusable = fmtShare(st.OfReusable, st.Reused, float64(*st.Reusable), "n/a")
	}
	return []string{st.Name, st.Tier, ofPrompt, ofReusable, st.Threshold, verdict(st.Pass), st.Reason}
}

// acceptHead names acceptColumns.
var acceptHead = []string{"step", "tier", "reused ÷ (reused+recomputed)", "reused ÷ reusable", "threshold", "verdict", "why"}

// WriteVerdict prints the gate: one line per step and a last line with the overall verdict.
// It prints nothing when the run was not an acceptance run.
func (r *Report) WriteVerdict(w io.Writer) error {
	a := r.Accept
	if a == nil {
		return nil
	}
	fmt.Fprintf(w, "acceptance gate (server counters; cold < %.1f%% of prompt, warm ≥ %.1f%% of reusable):\n", a.ColdMax*100, a.WarmMin*100)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range append([][]string{acceptHead}, acceptRows(a)...) {
		for i, v := range c {
			sep := "\t"
			if i == len(c)-1 {
				sep = "\n"
			}
			fmt.Fprint(tw, v+sep)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range a.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintf(w, "TPOT ms p50 cold / warm / partial: %s / %s / %s\n", p50(a.TPOTCold), p50(a.TPOTWarm), p50(a.TPOTPartial))
	if err := r.AcceptError(); err != nil {
		_, err := fmt.Fprintf(w, "accept: FAIL (%v)\n", err)
		return err
	}
	_, err := fmt.Fprintf(w, "accept: PASS (%d steps)\n", len(a.Steps))
	return err
}

func acceptRows(a *AcceptReport) [][]string {
	rows := make([][]string, len(a.Steps))
	for i, st := range a.Steps {
		rows[i] = st.acceptColumns()
	}
	return rows
}

// acceptTable is the gate as a table of the HTML report.
func (r *Report) acceptTable() htmlTable {
	a := r.Accept
	title := fmt.Sprintf("Acceptance gate: %s (cold < %.1f%% of prompt, warm ≥ %.1f%% of reusable, from server counters)",
		verdict(a.Pass), a.ColdMax*100, a.WarmMin*100)
	return htmlTable{ID: "accept", Title: title, Head: acceptHead, Rows: acceptRows(a)}
}
