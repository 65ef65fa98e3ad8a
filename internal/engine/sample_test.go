package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// testLogits draws logits of a named shape: a normal body, peaked favourites, a flat
// (random-weights) spread, heavy ties (few distinct values, with -0 and +0), a long tail
// placed around the sum's rounding edge, and any of them with a share masked to -inf.
func testLogits(r *rand.Rand, n int, shape string, maskShare float64, temp float32) []float32 {
	if temp <= 0 {
		temp = 1
	}
	l := make([]float32, n)
	for i := range l {
		switch shape {
		case "normal":
			l[i] = float32(r.NormFloat64() * 3)
		case "peaked":
			l[i] = float32(r.NormFloat64() * 2)
			if r.IntN(500) == 0 {
				l[i] = 10 + float32(r.IntN(8))
			}
		case "flat":
			l[i] = float32(r.NormFloat64() * 0.05)
		case "ties":
			l[i] = float32(r.IntN(5)-2) * 0.5
			if l[i] == 0 && r.IntN(2) == 0 {
				l[i] = float32(math.Copysign(0, -1))
			}
		case "edge":
			// One favourite at 0 and a tail whose weights exp(logit/T) straddle ulp(1)/2 =
			// e^-36.74, where they stop moving the sum: each one above bumps it a unit.
			l[i] = temp * float32(-36.6+r.NormFloat64()*0.4)
			if i == n/3 {
				l[i] = 0
			}
		}
		if r.Float64() < maskShare {
			l[i] = float32(math.Inf(-1))
		}
	}
	if maskShare >= 1 {
		l[r.IntN(n)] = float32(r.NormFloat64()) // a constraint always allows one token
	}
	return l
}

func sameToken(a, b Token) bool {
	if a.ID != b.ID || math.Float32bits(a.Logprob) != math.Float32bits(b.Logprob) || len(a.Top) != len(b.Top) {
		return false
	}
	for i := range a.Top {
		if a.Top[i].ID != b.Top[i].ID || math.Float32bits(a.Top[i].Logprob) != math.Float32bits(b.Top[i].Logprob) {
			return false
		}
	}
	return true
}

// TestSampleMatchesReference: the partial-selection sampler draws the same tokens and reports
// the same logprobs, bit for bit, as the full-sort reference, step after step from one seed,
// over vocabulary sizes, logit shapes, masks, temperatures, top-k, top-p and top-n.
func TestSampleMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 42))
	temps := []float32{0, 0.05, 0.7, 1, 1.7, 8}
	topPs := []float32{0, 0.05, 0.5, 0.9, 0.95, 0.999, 1}
	shapes := []string{"normal", "peaked", "flat", "ties", "edge"}
	masks := []float64{0, 0.5, 0.999, 1}
	cases := 0
	for _, n := range []int{1, 2, 7, 64, 300, 5000, 49152} {
		trials := 60
		if n >= 5000 {
			trials = 25
		}
		for trial := range trials {
			shape := shapes[r.IntN(len(shapes))]
			maskShare := masks[r.IntN(len(masks))]
			topKs := []int{0, 1, 2, 40, 300, 5000, n - 1, n, n + 3}
			p := SamplingParams{
				Temperature: temps[r.IntN(len(temps))],
				TopK:        topKs[r.IntN(len(topKs))],
				TopP:        topPs[r.IntN(len(topPs))],
			}
			topN := []int{0, 1, 5, 20}[r.IntN(4)]
			seed := r.Uint64()
			fast, ref := newSampler(p, seed), newRefSampler(p, seed)
			name := fmt.Sprintf("n=%d/%d/%s/mask=%g/%+v/top=%d", n, trial, shape, maskShare, p, topN)
			for step := range 4 {
				logits := testLogits(r, n, shape, maskShare, p.Temperature)
				want := ref.sample(logits, topN)
				have := fast.sample(logits, topN)
				if !sameToken(have, want) {
					t.Fatalf("%s step %d: have %+v, want %+v", name, step, have, want)
				}
				cases++
			}
		}
	}
	t.Logf("%d steps compared", cases)
}

// TestSampleMatchesReferenceQwenVocab: the same on Qwen's vocabulary size, once per shape,
// with top-p alone (the case that grows the candidate set) and with no filter.
func TestSampleMatchesReferenceQwenVocab(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for _, shape := range []string{"peaked", "flat", "edge"} {
		for _, p := range []SamplingParams{{Temperature: 0.8, TopP: 0.95}, {Temperature: 1}, {Temperature: 0.6, TopK: 20, TopP: 0.9}} {
			seed := r.Uint64()
			fast, ref := newSampler(p, seed), newRefSampler(p, seed)
			for step := range 3 {
				logits := testLogits(r, 151936, shape, 0, p.Temperature)
				want, have := ref.sample(logits, 5), fast.sample(logits, 5)
				if !sameToken(have, want) {
					t.Fatalf("%s %+v step %d: have %+v, want %+v", shape, p, step, have, want)
				}
			}
		}
	}
}

// constSource makes rand.Float64 return the same u every time: (1<<53-1)/2^53 is the
// largest, where the walk is most likely to run past the last candidate on rounding.
type constSource uint64

func (c constSource) Uint64() uint64 { return uint64(c) << 11 }

// TestSampleMatchesReferenceExtremeDraws: with u at 0 and at its largest value, where rounding
// decides whether the walk ends at the last candidate, in the prefix or beyond it.
func TestSampleMatchesReferenceExtremeDraws(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, u := range []constSource{0, 1, 1<<53 - 1, 1<<53 - 2} {
		for _, n := range []int{3, 300, 20000} {
			for _, shape := range []string{"normal", "peaked", "flat", "ties", "edge"} {
				for _, p := range []SamplingParams{{Temperature: 1}, {Temperature: 0.3, TopP: 0.999}, {Temperature: 2, TopK: 100}} {
					fast, ref := newSampler(p, 0), newRefSampler(p, 0)
					fast.rng, ref.rng = rand.New(u), rand.New(u)
					logits := testLogits(r, n, shape, 0, p.Temperature)
					if want, have := ref.sample(logits, 2), fast.sample(logits, 2); !sameToken(have, want) {
						t.Fatalf("u=%d n=%d %s %+v: have %+v, want %+v", u, n, shape, p, have, want)
					}
				}
			}
		}
	}
}

// TestSampleWithoutLogprobs: a request that asked for no logprobs (topN < 0) gets the token
// that the same sampler state picks with logprobs, step after step from one seed (so the RNG
// is drawn the same), and no logprob or alternatives.
func TestSampleWithoutLogprobs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, p := range []SamplingParams{{}, {Temperature: 0.7}, {Temperature: 1, TopK: 40}, {Temperature: 0.8, TopP: 0.9}} {
		for _, n := range []int{1, 300, 49152} {
			seed := r.Uint64()
			with, without := newSampler(p, seed), newSampler(p, seed)
			for step := range 5 {
				logits := testLogits(r, n, []string{"normal", "peaked", "ties"}[step%3], 0.1*float64(step%2), p.Temperature)
				want := with.sample(logits, 0)
				have := without.sample(logits, -1)
				if have.ID != want.ID || have.Logprob != 0 || have.Top != nil {
					t.Fatalf("%+v n=%d step %d: without logprobs %+v, with %+v", p, n, step, have, want)
				}
			}
		}
	}
}
