package pipeline

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"stockpot/internal/api"
	"stockpot/internal/blend"
)

// DefaultBlendRecompute is the fraction of chunk tokens a blend recomputes when the request
// names none: CacheBlend's operating point (about 15% kept quality within a few percent of a
// full prefill on its benchmarks); EPIC reports similar quality from far fewer tokens.
const DefaultBlendRecompute = 0.15

// BlendConfig is the server's side of chunk blending (serve --blend-recompute,
// --blend-max-chunks). The zero BlendConfig is DefaultBlendConfig.
type BlendConfig struct {
	// Recompute is the fraction of chunk tokens recomputed when a request names none, in
	// [0, 1].
	Recompute float64
	// MaxChunks bounds the chunks of one request, token spans and marked parts together
	// (0: blend.DefaultMaxChunks).
	MaxChunks int
}

// DefaultBlendConfig recomputes DefaultBlendRecompute and allows blend.DefaultMaxChunks.
func DefaultBlendConfig() BlendConfig {
	return BlendConfig{Recompute: DefaultBlendRecompute, MaxChunks: blend.DefaultMaxChunks}
}

// Validate checks c's fraction.
func (c BlendConfig) Validate() error {
	if math.IsNaN(c.Recompute) || c.Recompute < 0 || c.Recompute > 1 {
		return fmt.Errorf("blend recompute fraction %v is outside [0, 1]", c.Recompute)
	}
	if c.MaxChunks < 0 {
		return fmt.Errorf("blend chunk bound %d is negative", c.MaxChunks)
	}
	return nil
}

func (c BlendConfig) withDefaults() BlendConfig {
	if c == (BlendConfig{}) {
		return DefaultBlendConfig()
	}
	if c.MaxChunks == 0 {
		c.MaxChunks = blend.DefaultMaxChunks
	}
	return c
}

// BlendPart names a chunk that a chat marked on a message or content part: the chunk's
// token span and the field that marked it, for usage.cache.blend.
type BlendPart struct {
	Chunk blend.Chunk
	Param string
}

// blendSpec turns a request's blend object and its marked parts (spans of prompt tokens,
// found by markSpans) into the engine's, checked against its prompt of n tokens and the
// model's context: the bad marks of the issue (overlapping or empty spans, too many, longer
// than the context, a fraction outside [0, 1]) are 400s naming blend. What the engine cannot
// blend (a hybrid model) it refuses itself (engine.ErrBlend). Without either it is nil.
func (p *Pipeline) blendSpec(bp *api.BlendParams, marked []BlendPart, n int) (*blend.Spec, error) {
	if bp == nil && len(marked) == 0 {
		return nil, nil
	}
	cfg := p.cfg.Blend.withDefaults()
	s := &blend.Spec{Recompute: cfg.Recompute}
	if bp != nil {
		pol, err := blend.ParsePolicy(bp.Policy)
		if err != nil {
			return nil, api.Invalid("blend", "%v", err)
		}
		s.Policy = pol
		if bp.Recompute != nil {
			s.Recompute = *bp.Recompute
		}
		for _, c := range bp.Chunks {
			s.Chunks = append(s.Chunks, blend.Chunk{Start: c[0], End: c[1]})
		}
	}
	for _, m := range marked {
		s.Chunks = append(s.Chunks, m.Chunk)
	}
	if err := s.Validate(n, blend.Limits{MaxChunks: cfg.MaxChunks, ContextLength: p.cfg.ContextLength}); err != nil {
		return nil, api.Invalid("blend", "%v", err)
	}
	return s, nil
}

// markSpans finds the token span of each text a chat marked "blend": true (req.BlendMarks)
// in its rendered prompt: text, tokenized as prompt.
//
// What it guarantees: a marked part's chunk is a run of the prompt's tokens lying inside the
// part's text that are exactly the tokens the text gives tokenized alone (the chat's own
// flags: no BOS, special-token text parsed), at the same bytes. So the same text marked in
// another prompt, around other neighbours, gives the same chunk tokens and finds the same
// cached blocks. A BPE token that merges across the part's edge (".\n" where the template
// joins parts with a newline, a word the template continues, SentencePiece's dummy-prefix
// space on the text alone) is left out of the chunk: at most one token at each end, computed
// as an ordinary prompt token. A part whose tokens differ from its alone tokenization
// anywhere else, or that keeps no token, is refused with a 400 naming it.
//
// Where it looks: in the rendering after the messages before the part's own (each skipped
// when found by its whole text) and after the marks before it; a template that trimmed the
// text is followed (the trimmed text is then what is marked).
func (p *Pipeline) markSpans(req *api.ChatRequest, text string, prompt []int32) ([]BlendPart, error) {
	marks := req.BlendMarks
	if len(marks) == 0 {
		return nil, nil
	}
	starts := tokenStarts(p.tok, text, prompt)
	out := make([]BlendPart, 0, len(marks))
	cursor, k := 0, 0
	for i, m := range req.Messages {
		if k < len(marks) && marks[k].Message != i {
			// A message before the next mark: skip past it when the template wrote it as
			// sent, unless what it would skip holds the next mark's text.
			if t := m.Text; t != "" {
				if at := strings.Index(text[cursor:], t); at >= 0 && !strings.Contains(text[cursor:cursor+at+len(t)], marks[k].Text) {
					cursor += at + len(t)
				}
			}
			continue
		}
		for ; k < len(marks) && marks[k].Message == i; k++ {
			mk := marks[k]
			body := mk.Text
			at := strings.Index(text[cursor:], body)
			if at < 0 {
				if body = strings.TrimSpace(body); body != "" {
					at = strings.Index(text[cursor:], body)
				}
			}
			if at < 0 {
				return nil, api.Invalid(mk.Param, "%s is marked blend, but the chat template did not render its text as sent (it rewrote or dropped it), so its tokens cannot be found in the prompt", mk.Param)
			}
			lo := cursor + at
			cursor = lo + len(body)
			alone := p.tok.Encode(body, false, true)
			c, ok := chunkOf(starts, prompt, len(text), lo, alone, tokenStarts(p.tok, body, alone), len(body))
			if !ok {
				return nil, api.Invalid(mk.Param, "%s is marked blend, but its tokens in the rendered prompt are not the tokens its text gives alone (they merge with the text around it beyond its first and last token), so it cannot be cached as a chunk; start and end it at a word boundary, or send the chunk as token offsets in blend.chunks", mk.Param)
			}
			out = append(out, BlendPart{Chunk: c, Param: mk.Param})
		}
		if k == len(marks) {
			break
		}
	}
	return out, nil
}

// chunkOf is the chunk of a marked text at bytes [lo, lo+bodyLen) of a prompt's text
// (textLen bytes, tokens prompt starting at starts): the prompt's tokens inside those bytes
// from the first to the last one that the text tokenized alone (alone, starting at
// aloneStarts, offsets into the text) has too, at the same byte and with the same id, all
// of them so in between. ok is false when that run is empty or leaves out more than one
// token at either end of the text. starts and aloneStarts are tokenStarts' answers:
// non-decreasing byte offsets; a token with no bytes (a BOS the pipeline added) is skipped.
func chunkOf(starts []int, prompt []int32, textLen, lo int, alone []int32, aloneStarts []int, bodyLen int) (blend.Chunk, bool) {
	n, hi := len(starts), lo+bodyLen
	end := func(t int) int {
		if t+1 < n {
			return starts[t+1]
		}
		return textLen
	}
	// [t0, t1): the prompt's tokens with bytes, wholly inside the text.
	t0 := sort.SearchInts(starts, lo)
	for t0 < n && end(t0) == starts[t0] {
		t0++
	}
	t1 := sort.SearchInts(starts, hi)
	if t1 > 0 && end(t1-1) > hi {
		t1-- // straddles the end
	}
	// Walk both tokenizations by byte: a prompt token is in the run when the text alone has
	// a token starting at the same byte with the same id and the same length.
	aloneEnd := func(u int) int {
		if u+1 < len(alone) {
			return aloneStarts[u+1]
		}
		return bodyLen
	}
	rs, re := -1, -1
	u := 0
	for t := t0; t < t1; t++ {
		b := starts[t] - lo
		for u < len(alone) && aloneStarts[u] < b {
			u++
		}
		same := u < len(alone) && aloneStarts[u] == b && alone[u] == prompt[t] && aloneEnd(u)+lo == end(t)
		switch {
		case same && rs < 0:
			rs, re = t, t+1
		case same && re == t:
			re = t + 1
		case same:
			return blend.Chunk{}, false // a second run: the text's tokens differ inside it
		}
	}
	if rs < 0 || rs > t0+1 || re < t1-1 {
		return blend.Chunk{}, false
	}
	// The tokens around [t0, t1) straddle the text's edges: at most one lost at each end
	// in all, counting those.
	lostLo := rs - t0
	if t0 > 0 && starts[t0] > lo {
		lostLo++
	}
	lostHi := t1 - re
	if t1 < n && starts[t1] < hi {
		lostHi++ // token t1 straddles the end
	}
	if lostLo > 1 || lostHi > 1 {
		return blend.Chunk{}, false
	}
	return blend.Chunk{Start: rs, End: re}, true
}
