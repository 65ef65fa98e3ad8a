package server

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/miss"
	"stockpot/internal/tokenizer"
)

// Miss explanations: the engine fixes the evidence at admission (engine.Usage.Miss); here,
// on the request's goroutine, the text half names the cause (miss.Explain), counted for every
// request in stockpot_prefix_miss_total{cause} and returned as usage.cache.miss when the
// request set cache_report.

func newMissCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockpot_prefix_miss_total",
		Help: "Requests that reused fewer prompt blocks than they could, by why the prompt left the longest cached chain.",
	}, []string{"cause"})
	for _, cause := range miss.Causes {
		c.WithLabelValues(string(cause)) // every series exists from the start, at 0
	}
	return c, reg.Register(c)
}

// explainMiss names the cause of u's miss (u.Miss, nil when the prompt reused all it could):
// u.Miss.Cause becomes Explain's answer, and the whole report is kept with the evidence when
// the request asked for it.
func (s *Server) explainMiss(spec *genSpec, u *engine.Usage) {
	if u.Miss == nil {
		return
	}
	r := miss.Explain(*u.Miss, spec.req.Prompt, spec.segments, s.tok)
	u.Miss.Cause = r.Cause
	if spec.cacheReport {
		u.Miss.Report = &r
	}
}

// countMiss counts a finished request's miss.
func (s *Server) countMiss(u engine.Usage) {
	if u.Miss != nil && u.Miss.Cause != "" {
		s.misses.WithLabelValues(string(u.Miss.Cause)).Inc()
	}
}

// missReport is usage.cache.miss: the report when the request asked for it.
func missReport(u engine.Usage) *miss.Report {
	if u.Miss == nil {
		return nil
	}
	return u.Miss.Report
}

// chatSegments locates the parts of a rendered chat prompt (tokenizer.ChatSegments) and
// maps them to token offsets of prompt, the tokens of text (a BOS in front included). Only
// for requests that asked for a report: it walks the whole prompt once.
func (s *Server) chatSegments(req *api.ChatRequest, text string, prompt []int32) []miss.Segment {
	opts := chatOptions(req)
	segs := tokenizer.ChatSegments(text, templateMessages(chatMessages(req.Messages)), opts.Tools, opts.AddGenerationPrompt)
	if len(segs) == 0 {
		return nil
	}
	starts := tokenStarts(s.tok, text, prompt)
	out := make([]miss.Segment, 0, len(segs))
	tok := 0
	for _, sg := range segs {
		for tok < len(starts) && starts[tok] < sg.Byte {
			tok++
		}
		out = append(out, miss.Segment{Kind: sg.Kind, Index: sg.Index, Role: sg.Role, Token: tok})
	}
	return out
}

// tokenStarts returns the byte of text where each token of ids begins. The tokens' pieces
// are text's bytes in order, except a control token the template did not write (a BOS the
// server added: no bytes) and SentencePiece's dummy-prefix space (one byte more).
func tokenStarts(tok Tokenizer, text string, ids []int32) []int {
	starts := make([]int, len(ids))
	pos := 0
	for i, id := range ids {
		starts[i] = pos
		p := tok.Piece(id)
		switch {
		case strings.HasPrefix(text[pos:], string(p)):
			pos += len(p)
		case len(p) > 0 && p[0] == ' ' && strings.HasPrefix(text[pos:], string(p[1:])):
			pos += len(p) - 1
		case tok.IsControl(id):
		default:
			pos = min(pos+len(p), len(text))
		}
	}
	return starts
}
