package engine

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchLogits returns logits shaped like a trained model's ("peaked": a normal body with a
// few dozen clear favourites, so top-p 0.95 keeps a handful of tokens, though the body still
// counts in the sum; "sharp": a confident step, where the body does not), or like the random
// weights of the synthetic presets ("flat": top-p keeps most of the vocabulary).
func benchLogits(n int, shape string, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(r.NormFloat64())
	}
	switch shape {
	case "sharp": // a confident step: the tail weighs under 2^-53 of the favourites
		for k := range 8 {
			l[r.IntN(n)] = 40 + float32(k)/2
		}
	case "peaked":
		for i := range l {
			l[i] *= 2
		}
		for k := range 32 {
			l[r.IntN(n)] = 12 + float32(k)/4
		}
	default:
		for i := range l {
			l[i] *= 0.05
		}
	}
	return l
}

type benchCase struct {
	name string
	p    SamplingParams
	topN int
}

var benchCases = []benchCase{
	{"greedy-top5", SamplingParams{}, 5},
	{"greedy", SamplingParams{}, 0},
	{"greedy-nologprobs", SamplingParams{}, -1},
	{"temp0.8", SamplingParams{Temperature: 0.8}, 0},
	{"topk40", SamplingParams{Temperature: 0.8, TopK: 40}, 0},
	{"topp0.95", SamplingParams{Temperature: 0.8, TopP: 0.95}, 0},
	{"topk40-topp0.9-top5", SamplingParams{Temperature: 0.8, TopK: 40, TopP: 0.9}, 5},
}

// BenchmarkSample: one sampling step over Qwen's (151936) and SmolLM's (49152) vocabulary,
// the full-sort reference ("ref", the peer) against the sampler ("fast") in the same run.
func BenchmarkSample(b *testing.B) {
	for _, n := range []int{151936, 49152} {
		for _, shape := range []string{"sharp", "peaked", "flat"} {
			logits := benchLogits(n, shape, 7)
			for _, c := range benchCases {
				if shape != "peaked" && c.p.Temperature == 0 {
					continue
				}
				b.Run(fmt.Sprintf("v%d/%s/%s/ref", n, shape, c.name), func(b *testing.B) {
					s := newRefSampler(c.p, 1)
					b.ReportAllocs()
					for b.Loop() {
						s.sample(logits, c.topN)
					}
				})
				b.Run(fmt.Sprintf("v%d/%s/%s/fast", n, shape, c.name), func(b *testing.B) {
					s := newSampler(c.p, 1)
					b.ReportAllocs()
					for b.Loop() {
						s.sample(logits, c.topN)
					}
				})
			}
		}
	}
}

// BenchmarkSampleParts: the passes every step makes whatever the filters, over Qwen's
// vocabulary: logSumExp (one math.Exp per token, for the chosen token's logprob) and argmax.
func BenchmarkSampleParts(b *testing.B) {
	logits := benchLogits(151936, "peaked", 7)
	s := newSampler(SamplingParams{}, 1)
	b.Run("logsumexp", func(b *testing.B) {
		for b.Loop() {
			s.logSumExp(logits)
		}
	})
	b.Run("argmax", func(b *testing.B) {
		for b.Loop() {
			argmax(logits)
		}
	})
}
