package engine

import (
	"math"
	"math/rand/v2"
	"sort"
)

// refSampler is the sampler as it was before the partial-selection rewrite (a full sort of
// the vocabulary per draw), kept verbatim as the oracle: the fast sampler must draw the same
// tokens and report the same logprobs, bit for bit, for the same seed.
type refSampler struct {
	params SamplingParams
	rng    *rand.Rand
	logp   []float64
	idx    []int
}

func newRefSampler(p SamplingParams, seed uint64) *refSampler {
	return &refSampler{params: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// logSoftmax fills s.logp with log-probabilities of logits, accumulated in float64.
func (s *refSampler) logSoftmax(logits []float32) []float64 {
	if cap(s.logp) < len(logits) {
		s.logp = make([]float64, len(logits))
	}
	lp := s.logp[:len(logits)]
	mx := math.Inf(-1)
	for _, v := range logits {
		if float64(v) > mx {
			mx = float64(v)
		}
	}
	sum := 0.0
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	lse := mx + math.Log(sum)
	for i, v := range logits {
		lp[i] = float64(v) - lse
	}
	return lp
}

// argmax returns the first index of the largest logit (llama.cpp's greedy choice on ties).
func refArgmax(logits []float32) int {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return best
}

// sample picks the next token and reports its log-probability and the top n alternatives
// under the distribution of logits before the sampling filters (temperature, top-k, top-p).
// Tokens at -inf (masked by a constraint) are never picked nor listed.
func (s *refSampler) sample(logits []float32, topN int) Token {
	var id int
	p := s.params
	if p.Temperature <= 0 {
		id = refArgmax(logits)
	} else {
		id = s.draw(logits)
	}
	lp := s.logSoftmax(logits)
	tok := Token{ID: int32(id), Logprob: float32(lp[id])}
	if topN > 0 {
		tok.Top = refTopK(lp, topN)
	}
	return tok
}

// draw samples with temperature, top-k and top-p.
func (s *refSampler) draw(logits []float32) int {
	p := s.params
	n := len(logits)
	if cap(s.idx) < n {
		s.idx = make([]int, n)
	}
	idx := s.idx[:n]
	for i := range idx {
		idx[i] = i
	}
	// Sort candidates by logit, descending; ties by id so the order is deterministic.
	sort.Slice(idx, func(a, b int) bool {
		la, lb := logits[idx[a]], logits[idx[b]]
		if la != lb {
			return la > lb
		}
		return idx[a] < idx[b]
	})
	if p.TopK > 0 && p.TopK < n {
		idx = idx[:p.TopK]
	}
	// Masked tokens sort last; drop them so that rounding can never pick one.
	for len(idx) > 1 && math.IsInf(float64(logits[idx[len(idx)-1]]), -1) {
		idx = idx[:len(idx)-1]
	}
	inv := 1 / float64(p.Temperature)
	mx := float64(logits[idx[0]])
	probs := make([]float64, len(idx))
	sum := 0.0
	for i, t := range idx {
		probs[i] = math.Exp((float64(logits[t]) - mx) * inv)
		sum += probs[i]
	}
	if p.TopP > 0 && p.TopP < 1 {
		cum := 0.0
		for i := range probs {
			cum += probs[i] / sum
			if cum >= float64(p.TopP) {
				probs = probs[:i+1]
				idx = idx[:i+1]
				break
			}
		}
		sum = 0
		for _, v := range probs {
			sum += v
		}
	}
	r := s.rng.Float64() * sum
	for i, v := range probs {
		r -= v
		if r < 0 {
			return idx[i]
		}
	}
	return idx[len(idx)-1]
}

// topK returns the n most likely tokens, best first (ties by id).
func refTopK(lp []float64, n int) []TokenLogprob {
	n = min(n, len(lp))
	out := make([]TokenLogprob, 0, n+1)
	for i, v := range lp {
		if math.IsInf(v, -1) || (len(out) == n && v <= float64(out[n-1].Logprob)) {
			continue
		}
		t := TokenLogprob{ID: int32(i), Logprob: float32(v)}
		j := sort.Search(len(out), func(k int) bool { return float64(out[k].Logprob) < v })
		out = append(out, TokenLogprob{})
		copy(out[j+1:], out[j:])
		out[j] = t
		if len(out) > n {
			out = out[:n]
		}
	}
	return out
}
