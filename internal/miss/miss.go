package miss

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"stockpot/internal/prefix"
)

// Cause names why a prompt left the cached chain; the values are the label of
// stockpot_prefix_miss_total{cause} and usage.cache.miss.cause.
type Cause string

// The causes, in the order Explain tries the text ones.
const (
	BelowBlock Cause = "below_block"
	Evicted    Cause = "evicted"
	Salt       Cause = "salt"
	Template   Cause = "template"
	Timestamp  Cause = "timestamp"
	UUID       Cause = "uuid"
	Reordered  Cause = "reordered"
	Whitespace Cause = "whitespace"
	NewContent Cause = "new_content"
	// IncompleteState: a hybrid model's K/V was cached past the reuse, but no complete
	// recurrent-state checkpoint: the prefix could only be resumed at an earlier block end.
	IncompleteState Cause = "incomplete_state"
)

// Causes lists every cause (metrics pre-create their series from it).
var Causes = []Cause{BelowBlock, Evicted, Salt, Template, Timestamp, UUID, Reordered, Whitespace, NewContent, IncompleteState}

// MaxCachedTokens bounds Evidence.Cached: the window of the cached chain the text half
// compares (enough for a tools list of a few dozen functions).
const MaxCachedTokens = 2048

// Evidence is what the engine found at admission (see prefix.Cache.Diverge).
type Evidence struct {
	// Cause is set when the hash chain decides it (BelowBlock, Evicted, Salt, NewContent),
	// or the engine does (IncompleteState);
	// empty when the text must (Cached holds the cached chain). A caller that ran Explain
	// may store its answer here.
	Cause Cause
	// Block is the first prompt block not reused, Offset the first token where the prompt
	// leaves the best cached chain (Block*BlockSize when it shares nothing of that block).
	Block, Offset int
	// Matched is how many prompt tokens were reused (Block*BlockSize).
	Matched int
	// Cached is the best cached chain's tokens from Block*BlockSize on, at most
	// MaxCachedTokens.
	Cached []int32
	// BlockSize of the cache.
	BlockSize int
	// Report is Explain's answer, kept with the evidence by a caller that was asked for it
	// (the server, for a request's cache_report). Nil until then.
	Report *Report
}

// FromDivergence is the Evidence of what prefix.Cache.Diverge found, or nil for no miss.
func FromDivergence(d prefix.Divergence, blockSize int) *Evidence {
	ev := &Evidence{Block: d.Block, Offset: d.Offset, Matched: d.Block * blockSize, Cached: d.Cached, BlockSize: blockSize}
	switch d.Kind {
	case prefix.DivergeNone:
		return nil
	case prefix.DivergeBelowBlock:
		ev.Cause = BelowBlock
	case prefix.DivergeEvicted:
		ev.Cause = Evicted
	case prefix.DivergeOtherRoot:
		ev.Cause = Salt
	case prefix.DivergeNoChild:
		ev.Cause = NewContent
	}
	return ev
}

// Segment is a part of a rendered chat prompt, from its first token to the next segment's.
type Segment struct {
	Kind  string // "system", "tools", "message", "generation"
	Index int    // message index (Kind "message" and "system")
	Role  string // message role
	Token int    // first token
}

// String names the segment as reports show it: "system", "tools", "message 3 (user)",
// "generation prompt".
func (s Segment) String() string {
	switch s.Kind {
	case "message":
		return fmt.Sprintf("message %d (%s)", s.Index, s.Role)
	case "generation":
		return "generation prompt"
	}
	return s.Kind
}

// Text is what Explain needs of the tokenizer.
type Text interface {
	// Decode renders ids as text (control tokens as nothing).
	Decode(ids []int32) string
	// Piece returns the bytes a token stands for, control tokens as their text.
	Piece(id int32) []byte
	// IsControl reports a control token (BOS, <|im_start|>...).
	IsControl(id int32) bool
}

// Report is a miss explained: usage.cache.miss.
type Report struct {
	Cause  Cause  `json:"cause"`
	Detail string `json:"detail,omitempty"`
	// Offset is the token where the prompt leaves the cached chain, Block its block.
	Offset int `json:"token_offset"`
	Block  int `json:"block"`
	// MatchedTokens were reused.
	MatchedTokens int `json:"matched_tokens"`
	// Segment is the part of the chat holding Offset ("" for plain completions).
	Segment string `json:"segment,omitempty"`
	// Prompt and Cached are the text around the divergence: up to contextBytes before it
	// (shared) and after it, in the prompt and in the cached chain.
	Prompt string `json:"prompt_text,omitempty"`
	Cached string `json:"cached_text,omitempty"`
}

// Window sizes: how much text Explain decodes and shows.
const (
	// beforeTokens is the most tokens decoded before the divergence (from the segment's
	// start when nearer): enough to hold the start of a JSON value around it.
	beforeTokens = 1024
	// afterTokens is the most decoded after it, in each side.
	afterTokens = MaxCachedTokens
	// contextBytes is the text shown either side of the divergence in a Report.
	contextBytes = 48
)

// Explain names the cause of a miss from the engine's evidence, the prompt's tokens and its
// segments (nil for a plain completion). It decodes at most a few thousand tokens.
func Explain(ev Evidence, prompt []int32, segs []Segment, t Text) Report {
	r := Report{Cause: ev.Cause, Offset: ev.Offset, Block: ev.Block, MatchedTokens: ev.Matched}
	if seg, ok := segmentAt(segs, ev.Offset); ok {
		r.Segment = seg.String()
	}
	switch ev.Cause {
	case BelowBlock:
		r.Detail = fmt.Sprintf("the prompt (%d tokens) has no full block of %d before its last token: nothing to reuse", len(prompt), ev.BlockSize)
		return r
	case Evicted:
		r.Detail = "this prefix was cached and was evicted"
		return r
	case Salt:
		r.Detail = "the same content is cached under another root: another cache_salt or tenant"
		return r
	case NewContent:
		r.Detail = "nothing cached continues after the reused blocks"
		return r
	case IncompleteState:
		r.Detail = "the K/V is cached further, but the recurrent state is checkpointed only up to here: the rest was discarded and recomputed"
		return r
	}
	if t == nil || ev.Offset > len(prompt) {
		r.Cause, r.Detail = NewContent, "no text to compare"
		return r
	}
	start := max(ev.Block*ev.BlockSize-beforeTokens, 0)
	if seg, ok := segmentAt(segs, ev.Offset); ok && seg.Token > start && seg.Token <= ev.Block*ev.BlockSize {
		start = seg.Token
	}
	base := ev.Block * ev.BlockSize
	if base > len(prompt) || base < start {
		r.Cause, r.Detail = NewContent, "no text to compare"
		return r
	}
	shared := prompt[start:base]
	pTail := prompt[base:min(len(prompt), ev.Offset+afterTokens)]
	cTail := ev.Cached[:min(len(ev.Cached), ev.Offset-base+afterTokens)]
	c := classify(t, shared, pTail, cTail, ev.Offset-base)
	r.Cause, r.Detail = c.cause, c.detail
	r.Prompt, r.Cached = around(c.pText, c.at), around(c.cText, c.at)
	return r
}

// segmentAt returns the segment holding token offset.
func segmentAt(segs []Segment, offset int) (Segment, bool) {
	var got Segment
	ok := false
	for _, s := range segs {
		if s.Token > offset {
			break
		}
		got, ok = s, true
	}
	return got, ok
}

// around returns text's bytes within contextBytes of at, on character boundaries (a Report
// shows the prompt's and the cache's one above the other, parting at the same byte).
func around(text string, at int) string {
	if at > len(text) {
		at = len(text)
	}
	lo := max(at-contextBytes, 0)
	for lo > 0 && !utf8.RuneStart(text[lo]) {
		lo--
	}
	hi := min(at+contextBytes, len(text))
	for hi < len(text) && !utf8.RuneStart(text[hi]) {
		hi++
	}
	return strings.ToValidUTF8(text[lo:hi], "\uFFFD")
}
