package pipeline

import (
	"strings"

	"stockpot/internal/api"
	"stockpot/internal/miss"
	"stockpot/internal/tokenizer"
)

// segments locates the parts of a rendered chat prompt (tokenizer.ChatSegments) and
// maps them to token offsets of prompt, the tokens of text (a BOS in front included). Only
// for requests that asked for a report: it walks the whole prompt once.
func (p *Pipeline) segments(req *api.ChatRequest, text string, prompt []int32) []miss.Segment {
	opts := OptionsOf(req)
	segs := tokenizer.ChatSegments(text, TemplateMessages(MessagesOf(req.Messages)), opts.Tools, opts.AddGenerationPrompt)
	if len(segs) == 0 {
		return nil
	}
	starts := tokenStarts(p.tok, text, prompt)
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
// pipeline added: no bytes) and SentencePiece's dummy-prefix space (one byte more).
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
