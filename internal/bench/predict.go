package bench

import (
	"sort"
	"time"
)

// predictInput is one request as the predictor sees it. Units are token ids when the target
// gave them, or runes of the prompt text as a fallback (then Scale converts units to tokens).
type predictInput struct {
	Start, End time.Duration
	Prompt     []int32 // prompt units, in order
	Output     []int32 // generated units (nil when unknown); cached once the request ended
	Tokens     int     // prompt length in tokens (len(Prompt) when Prompt holds token ids)
	OK         bool    // the request succeeded; failed requests leave nothing behind
}

// reusable returns how many prompt tokens a block-aligned prefix cache can reuse for a
// prompt of p tokens sharing its first shared tokens with the cache: whole blocks only, and
// never the last prompt token, which must be computed to produce the first output.
//
//	min(⌊shared/B⌋·B, ⌊(P−1)/B⌋·B)
func reusable(shared, p, b int) int {
	if p <= 0 || b <= 0 {
		return 0
	}
	r := shared / b * b
	if m := (p - 1) / b * b; m < r {
		r = m
	}
	if r < 0 {
		r = 0
	}
	return r
}

// naiveAgentRate is the shape-only estimate for an append-only agent with T equal turns: turn t
// reuses t−1 of its t parts, so Σ(t−1)/Σt = (T−1)/(T+1).
func naiveAgentRate(turns int) float64 {
	if turns < 1 {
		return 0
	}
	return float64(turns-1) / float64(turns+1)
}

// predictReuse returns, for each request, the tokens a block-aligned prefix cache without
// eviction would reuse. A request sees the prompts of every request that started before it
// (in-flight blocks are shared once computed: the server deduplicates them) and the prompt plus
// output of every request that ended before it. The output's last token is left out: its K/V
// is never computed. Ties put ends before starts, since the runner starts a session's next turn
// only after the previous one ended.
//
// Cost: O(requests × cached sequences × common prefix); mismatches end each comparison early.
func predictReuse(reqs []predictInput, blockSize int) []int {
	type event struct {
		at  time.Duration
		end bool
		i   int
	}
	ev := make([]event, 0, 2*len(reqs))
	for i, r := range reqs {
		ev = append(ev, event{r.Start, false, i})
		if r.OK {
			ev = append(ev, event{r.End, true, i})
		}
	}
	sort.SliceStable(ev, func(a, b int) bool {
		if ev[a].at != ev[b].at {
			return ev[a].at < ev[b].at
		}
		return ev[a].end && !ev[b].end
	})
	var cached [][]int32
	out := make([]int, len(reqs))
	for _, e := range ev {
		r := reqs[e.i]
		if e.end {
			seq := r.Prompt
			if len(r.Output) > 1 {
				seq = append(append([]int32(nil), r.Prompt...), r.Output[:len(r.Output)-1]...)
			}
			cached = append(cached, seq)
			continue
		}
		shared := 0
		for _, c := range cached {
			if n := commonPrefix(r.Prompt, c); n > shared {
				shared = n
			}
		}
		if len(r.Prompt) > 0 && r.Tokens != len(r.Prompt) {
			// Units are runes: scale to tokens, rounding down.
			shared = shared * r.Tokens / len(r.Prompt)
		}
		out[e.i] = reusable(shared, r.Tokens, blockSize)
		if r.OK {
			cached = append(cached, r.Prompt)
		}
	}
	return out
}

func commonPrefix(a, b []int32) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
