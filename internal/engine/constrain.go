package engine

import (
	"errors"
	"fmt"
	"math"
)

// Constraint restricts what a request may generate, token by token (grammar-constrained
// decoding: JSON schemas, tool calls). The engine owns this interface; *grammar.Matcher
// implements it. One Constraint serves one request and is used only from the runner.
//
// Before each token the engine asks FillMask which tokens may come next, sets the logits of
// the others to -inf (on a copy: the logits buffer belongs to the runner) and samples, greedy
// or seeded alike, from what is left; then it calls Accept with the chosen token. The model's
// end-of-generation tokens are allowed only where Complete is true, and once Done is true the
// next token is forced to the first end-of-generation token, so the request finishes with
// FinishStop. A constrained request stops at an end token even with IgnoreEOS. Logprobs are
// those of the constrained distribution (the masked logits renormalized), so disallowed tokens
// never appear among the alternatives. The prefix cache is unaffected: constraints only touch
// sampling.
type Constraint interface {
	// FillMask sets bit i of mask (word i/64, bit i%64) when token i may come next. The engine
	// passes a cleared mask of (vocabulary+63)/64 words.
	FillMask(mask []uint64)
	// Accept advances past tok, which the last mask allowed (never called for end tokens).
	Accept(tok int32) error
	// Complete reports whether the constrained output may end here.
	Complete() bool
	// Done reports whether it must end here.
	Done() bool
}

// ErrConstraint is wrapped by the error on a request's final output when its constraint
// allows no token at all or rejects the token it allowed; the output so far is kept.
var ErrConstraint = errors.New("engine: constraint")

// nextConstrained picks the next token under s.params.Constraint. eog are the model's end
// tokens.
func (s *sampler) nextConstrained(logits []float32, topN int, eog []int32) (Token, error) {
	c := s.params.Constraint
	if c.Done() {
		s.forced = -1 // the end is forced here, whatever the first token was
		if len(eog) == 0 {
			return Token{}, fmt.Errorf("%w: output complete but the model has no end token", ErrConstraint)
		}
		tok := Token{ID: eog[0]}
		if topN > 0 {
			tok.Top = []TokenLogprob{{ID: eog[0]}}
		}
		return tok, nil
	}
	n := len(logits)
	words := (n + 63) / 64
	if cap(s.mask) < words {
		s.mask = make([]uint64, words)
	}
	mask := s.mask[:words]
	clear(mask)
	c.FillMask(mask)
	complete := c.Complete()
	for _, e := range eog {
		if e >= 0 && int(e) < n {
			if complete {
				mask[e>>6] |= 1 << (uint(e) & 63)
			} else {
				mask[e>>6] &^= 1 << (uint(e) & 63)
			}
		}
	}
	if cap(s.masked) < n {
		s.masked = make([]float32, n)
	}
	masked := s.masked[:n]
	negInf := float32(math.Inf(-1))
	any := false
	for i, v := range logits {
		if mask[i>>6]>>(uint(i)&63)&1 != 0 {
			masked[i] = v
			any = true
		} else {
			masked[i] = negInf
		}
	}
	if !any {
		return Token{}, fmt.Errorf("%w: no token allowed", ErrConstraint)
	}
	tok := s.sample(masked, topN)
	if !isEOG(tok.ID, eog) {
		if err := c.Accept(tok.ID); err != nil {
			return Token{}, fmt.Errorf("%w: %v", ErrConstraint, err)
		}
	}
	return tok, nil
}

func isEOG(id int32, eog []int32) bool {
	for _, e := range eog {
		if e == id {
			return true
		}
	}
	return false
}

// next picks the next token, under the request's constraint if it has one.
func (s *sampler) next(logits []float32, topN int, eog []int32) (Token, error) {
	if s.params.Constraint == nil {
		return s.sample(logits, topN), nil
	}
	return s.nextConstrained(logits, topN, eog)
}
