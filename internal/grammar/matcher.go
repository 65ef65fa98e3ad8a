package grammar

import (
	"errors"
	"fmt"
)

// Matcher follows one generation through a grammar, token by token. It is not safe for
// concurrent use; many matchers of one Grammar and Vocab may run at once (they share the
// lazily built tables under a mutex).
type Matcher struct {
	t     *table
	state int32
	ended bool // an end token was accepted
}

// ErrRejected is wrapped by Accept for a token the grammar does not allow here.
var ErrRejected = errors.New("grammar: token not allowed")

// NewMatcher starts a matcher at the beginning of g, over vocabulary v.
func (g *Grammar) NewMatcher(v *Vocab) *Matcher {
	t := g.table(v)
	return &Matcher{t: t, state: t.start}
}

// FillMask sets bit i of mask when token i may come next, and clears the bits of the other
// tokens of the vocabulary. Words past (Size+63)/64 are left alone; a shorter mask gets the
// words that fit (a model whose logits cover fewer ids than the vocabulary). End tokens are
// set only where the grammar is complete. After an end token nothing is allowed.
func (m *Matcher) FillMask(mask []uint64) {
	words := m.t.v.MaskWords()
	if m.ended {
		clear(mask[:min(words, len(mask))])
		return
	}
	t := m.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(mask) >= words {
		t.fill(m.state, mask[:words])
		return
	}
	if len(t.short) < words {
		t.short = make([]uint64, words)
	}
	t.fill(m.state, t.short[:words])
	copy(mask, t.short)
}

// Accept advances past token tok, or returns an error wrapping ErrRejected (and stays put)
// when tok is not allowed here.
func (m *Matcher) Accept(tok int32) error {
	t := m.t
	v := t.v
	if m.ended {
		return fmt.Errorf("%w: token %d after the end", ErrRejected, tok)
	}
	if tok < 0 || int(tok) >= v.n {
		return fmt.Errorf("%w: token %d outside the vocabulary of %d", ErrRejected, tok, v.n)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v.isEOS[tok] {
		if !t.states[m.state].complete {
			return fmt.Errorf("%w: end token %d before the grammar is complete", ErrRejected, tok)
		}
		m.ended = true
		return nil
	}
	if !v.ok[tok] {
		return fmt.Errorf("%w: token %d is excluded", ErrRejected, tok)
	}
	s := m.state
	for _, b := range v.tokens[tok] {
		if s = t.step(s, b); s == deadState {
			return fmt.Errorf("%w: token %d (%q)", ErrRejected, tok, v.tokens[tok])
		}
	}
	m.state = s
	return nil
}

// AcceptBytes advances past raw bytes (for text forced outside the vocabulary, and tests).
func (m *Matcher) AcceptBytes(p []byte) error {
	if m.ended {
		return fmt.Errorf("%w: bytes after the end", ErrRejected)
	}
	t := m.t
	t.mu.Lock()
	defer t.mu.Unlock()
	s := m.state
	for i, b := range p {
		if s = t.step(s, b); s == deadState {
			return fmt.Errorf("%w: byte %d (%q) of %q", ErrRejected, i, b, p)
		}
	}
	m.state = s
	return nil
}

// Complete reports whether the grammar may end here (an end token is allowed).
func (m *Matcher) Complete() bool {
	if m.ended {
		return true
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	return m.t.states[m.state].complete
}

// Done reports whether the grammar must end here: nothing but an end token can follow.
func (m *Matcher) Done() bool {
	if m.ended {
		return true
	}
	m.t.mu.Lock()
	defer m.t.mu.Unlock()
	return m.t.states[m.state].done
}

// Clone returns an independent copy of m at the same position.
func (m *Matcher) Clone() *Matcher {
	c := *m
	return &c
}
