package toolcall

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"unicode/utf8"
)

// Tool is one function the request offers the model. Parameters is its JSON Schema (the
// OpenAI "parameters" object); it types the values of XML-style calls (qwen3-coder, glm,
// minimax-m2, kimi-k3, seed-oss) and may be empty.
type Tool struct {
	Name       string
	Parameters json.RawMessage // nil when the tool takes no schema
}

// Call is one parsed tool call. Arguments is compact JSON text of an object.
type Call struct {
	ID        string
	Name      string
	Arguments string
}

// Result is a whole generation split into its parts.
type Result struct {
	Content   string
	Reasoning string
	Calls     []Call
}

// Options steer a parse.
type Options struct {
	// Tools the request offered. When non-empty, a call naming any other tool is not a
	// call: its text stays in Content. When empty, every well-formed call is accepted.
	Tools []Tool
	// ParseReasoning splits the family's reasoning block (<think>…</think> and the like)
	// out of the content into Reasoning. Without it that text stays in Content.
	ParseReasoning bool
	// StartsInReasoning says the prompt's generation prompt already opened the reasoning
	// block (see PromptOpensReasoning), so the text begins inside it. Only with
	// ParseReasoning.
	StartsInReasoning bool
	// NewID makes the id of a call that carries none of its own. Nil means "call_" and 24
	// random letters and digits.
	NewID func() string
	// NoCalls reads no calls: the request offered no tools, or tool_choice "none", so the
	// family's call markup is content like any text. Its reasoning markers and the markers
	// that wrap content are still read, since the model writes them either way: Kimi K3's
	// answer sits in a response channel whose tags are not content, and Mistral and
	// Command R mark reasoning their own way. A family without reasoning markers of its
	// own is read with <think>, the markers of most templates.
	NoCalls bool
}

// Delta is one piece of a streamed result; exactly one field is set.
type Delta struct {
	Content   string
	Reasoning string
	Call      *CallDelta
}

// CallDelta is a piece of the call with the given Index (0-based over the whole output).
// The first delta of a call carries its ID and Name and empty Arguments; the following
// ones carry fragments of Arguments, to be concatenated.
type CallDelta struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Parse splits a whole generation. It is exactly what a Parser yields when fed text at
// once and finished, collected.
func Parse(f Family, text string, opts Options) Result {
	p := NewParser(f, opts)
	ds := p.Feed(text)
	ds = append(ds, p.Finish()...)
	return Collect(ds)
}

// Collect folds streamed deltas into the Result they stand for.
func Collect(ds []Delta) Result {
	var r Result
	var content, reasoning strings.Builder
	for _, d := range ds {
		content.WriteString(d.Content)
		reasoning.WriteString(d.Reasoning)
		if c := d.Call; c != nil {
			for len(r.Calls) <= c.Index {
				r.Calls = append(r.Calls, Call{})
			}
			rc := &r.Calls[c.Index]
			if c.ID != "" {
				rc.ID = c.ID
			}
			if c.Name != "" {
				rc.Name = c.Name
			}
			rc.Arguments += c.Arguments
		}
	}
	r.Content, r.Reasoning = content.String(), reasoning.String()
	return r
}

// mode is where the scanner stands in the generation.
type mode int

const (
	modeBegin        mode = iota // nothing read yet: a reasoning block may open
	modeReasoning                // inside the reasoning block
	modeContentStart             // at the start of the content: whole-message calls may start
	modeContent                  // in content, looking for call markers
	modeSection                  // inside a call section, between calls
	modeDone                     // Finish ran
)

// Parser splits a generation fed in pieces into deltas. It holds back only text that may
// still turn out to be part of a marker or a call; everything else comes out at once.
//
// Invariant: buf[:pos] has been decided (its deltas returned); buf[pos:] is pending. A
// decision is only made when no continuation of the text could change it, so feeding the
// same text in any chunking returns deltas that Collect to the same Result.
type Parser struct {
	syn  *syntax
	opts Options
	tool map[string]*Tool

	// buf is the text not yet dropped, kept in sb so that appending does not copy it.
	sb   strings.Builder
	buf  string
	pos  int
	mode mode

	// A call that needs more text is parsed again only when the new text may finish it
	// (its closing literal arrived) or has grown by half (so that a call that breaks is
	// still found early): a long call fed token by token is otherwise parsed once per
	// token, quadratic in its length. waitAt is the offset in buf of the waiting call,
	// waitLen how many bytes of it the last parse saw (0: none waiting).
	waitAt, waitLen int

	// sectionStart is the offset in buf of the marker that opened the current call
	// section; sectionCalls counts the calls parsed in it. While sectionCalls is 0 the
	// marker may still turn out to be content, so buf is kept from sectionStart.
	sectionStart int
	sectionCalls int
	section      *marker

	types map[string]map[string]string // tool name → parameter → schema type, filled lazily

	calls int // calls emitted so far; the next call's index

	// Whitespace next to markers is layout, not content. pendingWS holds trailing
	// whitespace of content until more content (flushed) or a boundary (a call, the end
	// of reasoning, a wrapper marker) shows which it is. After a boundary trimLead
	// collects leading whitespace in leadWS; sepWS is the run before the boundary. Where
	// content lies on both sides (emitted), one run separates them; elsewhere the
	// whitespace is dropped. Reasoning is trimmed at both ends (rTrimLead, rPendingWS).
	trimLead   bool
	emitted    bool
	pendingWS  string
	leadWS     string
	sepWS      string
	rTrimLead  bool
	rPendingWS string
	out        []Delta
}

// NewParser starts a streamed parse of a generation by a model of family f.
func NewParser(f Family, opts Options) *Parser {
	syn := syntaxOf(f)
	if opts.NoCalls {
		syn = contentSyntaxOf(f)
	}
	p := &Parser{syn: syn, opts: opts, rTrimLead: true}
	if len(opts.Tools) > 0 {
		p.tool = make(map[string]*Tool, len(opts.Tools))
		for i := range opts.Tools {
			p.tool[opts.Tools[i].Name] = &opts.Tools[i]
		}
	}
	if p.opts.NewID == nil {
		p.opts.NewID = randomID
	}
	if !opts.ParseReasoning || len(p.syn.thinkOpen) == 0 {
		p.mode = modeContentStart
	}
	return p
}

// Feed adds generated text and returns the deltas it decides.
func (p *Parser) Feed(s string) []Delta {
	if p.mode == modeDone {
		return nil
	}
	p.sb.WriteString(s)
	p.buf = p.sb.String()
	p.advance(false)
	return p.take()
}

// Finish ends the generation: all pending text is decided (an unfinished call is content)
// and the last deltas are returned. Feed and Finish do nothing after Finish.
func (p *Parser) Finish() []Delta {
	if p.mode == modeDone {
		return nil
	}
	p.advance(true)
	if p.pendingWS != "" {
		p.emit(Delta{Content: p.pendingWS})
		p.pendingWS = ""
	}
	p.mode = modeDone
	p.sb.Reset()
	p.buf = ""
	p.pos = 0
	return p.take()
}

func (p *Parser) take() []Delta {
	out := p.out
	p.out = nil
	// Keep only what is pending, so long generations do not grow buf.
	keep := p.pos
	if p.mode == modeSection && p.sectionCalls == 0 {
		keep = p.sectionStart
	}
	if keep > 0 && p.mode != modeDone {
		tail := p.buf[keep:]
		p.sb.Reset()
		p.sb.WriteString(tail)
		p.buf = p.sb.String()
		p.pos -= keep
		p.sectionStart -= keep
		p.waitAt -= keep
	}
	return out
}

// emit appends d, merging it into the previous delta when both are text of one kind.
func (p *Parser) emit(d Delta) {
	if n := len(p.out); n > 0 && d.Call == nil && p.out[n-1].Call == nil {
		last := &p.out[n-1]
		switch {
		case d.Content != "" && last.Content != "":
			last.Content += d.Content
			return
		case d.Reasoning != "" && last.Reasoning != "":
			last.Reasoning += d.Reasoning
			return
		}
	}
	p.out = append(p.out, d)
}

// content emits s as content, applying the whitespace rules above.
//
// content(a); content(b) has the same effect as content(a+b), whatever the split: the
// whitespace rules look at runs of whitespace, not at pieces.
func (p *Parser) content(s string) {
	if s == "" {
		return
	}
	if p.trimLead {
		t := strings.TrimLeft(s, wsChars)
		p.leadWS += s[:len(s)-len(t)]
		if t == "" {
			return
		}
		p.trimLead = false
		if p.emitted {
			// Content on both sides of a boundary: one run of whitespace separates them.
			sep := p.leadWS
			if sep == "" {
				sep = p.sepWS
			}
			if sep != "" {
				p.emit(Delta{Content: sep})
			}
		}
		p.leadWS, p.sepWS = "", ""
		s = t
	}
	body := strings.TrimRight(s, wsChars)
	if body == "" {
		p.pendingWS += s
		return
	}
	if p.pendingWS != "" {
		p.emit(Delta{Content: p.pendingWS})
		p.pendingWS = ""
	}
	p.emit(Delta{Content: body})
	p.emitted = true
	p.pendingWS = s[len(body):]
}

// boundary marks a call, a reasoning block or a wrapper marker in the content: the
// whitespace on its sides is layout. If content follows, one run of it (the one after,
// else the one before) is kept as the separator from earlier content.
func (p *Parser) boundary() {
	if p.trimLead {
		if p.leadWS != "" {
			p.sepWS = p.leadWS
		}
	} else {
		p.sepWS = p.pendingWS
	}
	p.leadWS, p.pendingWS = "", ""
	p.trimLead = true
}

// reasoning emits s as reasoning; the block is trimmed at both ends.
func (p *Parser) reasoning(s string) {
	if s == "" {
		return
	}
	if p.rTrimLead {
		s = strings.TrimLeft(s, wsChars)
		if s == "" {
			return
		}
		p.rTrimLead = false
	}
	body := strings.TrimRight(s, wsChars)
	if body == "" {
		p.rPendingWS += s
		return
	}
	if p.rPendingWS != "" {
		p.emit(Delta{Reasoning: p.rPendingWS})
		p.rPendingWS = ""
	}
	p.emit(Delta{Reasoning: body})
	p.rPendingWS = s[len(body):]
}

// emitCalls emits parsed calls: whitespace before them is dropped and whitespace after
// them will be.
func (p *Parser) emitCalls(cs []rawCall) {
	p.boundary()
	for _, c := range cs {
		id := c.id
		if id == "" {
			id = p.opts.NewID()
		}
		idx := p.calls
		p.calls++
		p.emit(Delta{Call: &CallDelta{Index: idx, ID: id, Name: c.name}})
		p.emit(Delta{Call: &CallDelta{Index: idx, Arguments: c.args}})
	}
}

// advance decides as much of buf[pos:] as it can. With final, it decides all of it.
// Each step reads at its mode and reports whether it moved on (true: look again) or must
// wait for more text (false).
func (p *Parser) advance(final bool) {
	for {
		var more bool
		switch p.mode {
		case modeBegin:
			more = p.stepBegin(final)
		case modeReasoning:
			more = p.stepReasoning(final)
		case modeContentStart:
			more = p.stepContentStart(final)
		case modeContent:
			more = p.stepContent(final)
		case modeSection:
			more = p.stepSection(final)
		case modeDone:
			return
		}
		if !more {
			return
		}
	}
}

// stepBegin skips leading whitespace and looks for a reasoning block's opener, or a closer
// the prompt's opener left to the model; without either, reasoning or content starts.
func (p *Parser) stepBegin(final bool) bool {
	syn := p.syn
	rest := p.buf[p.pos:]
	t := strings.TrimLeft(rest, wsChars)
	if m, full := matchAny(t, syn.thinkOpen); full {
		p.pos += len(rest) - len(t) + len(m)
		p.mode = modeReasoning
		return true
	} else if m != "" && !final {
		return false // may still be the opening marker
	}
	// A closer first: the prompt opened the block and the model closed it at once.
	if m, full := matchAny(t, syn.thinkClose); full {
		p.pos += len(rest) - len(t) + len(m)
		p.mode = modeContentStart
		p.boundary()
		return true
	} else if m != "" && !final {
		return false
	}
	if t == "" && !final {
		return false
	}
	if p.opts.StartsInReasoning {
		p.mode = modeReasoning
	} else {
		p.mode = modeContentStart
	}
	return true
}

// stepReasoning passes reasoning text on up to the marker that ends it (a closer, consumed,
// or a call marker, left for content), holding back what may be the start of one.
func (p *Parser) stepReasoning(final bool) bool {
	syn := p.syn
	rest := p.buf[p.pos:]
	i, m := indexAny(rest, syn.reasoningEnds)
	if i >= 0 {
		p.reasoning(rest[:i])
		p.rPendingWS = ""
		p.pos += i
		if !syn.callEndsReasoning[m] {
			p.pos += len(m) // a closer, not a call marker: consumed
		}
		p.mode = modeContentStart
		p.boundary()
		return true
	}
	if final {
		p.reasoning(rest)
		p.rPendingWS = ""
		p.pos = len(p.buf)
		return false
	}
	k := len(rest) - partialSuffix(rest, syn.reasoningEnds)
	k -= partialRune(rest[:k])
	p.reasoning(rest[:k])
	p.pos += k
	return false
}

// stepContentStart parses a call written with no marker (Llama 3's JSON) at the start of the
// content when the syntax has one; else content starts.
func (p *Parser) stepContentStart(final bool) bool {
	syn := p.syn
	rest := p.buf[p.pos:]
	if syn.whole != nil {
		t := strings.TrimLeft(rest, wsChars)
		if t == "" && !final {
			return false
		}
		if t != "" && syn.whole.starts(t) {
			if p.wait(p.pos, rest, "", "", final) {
				return false
			}
			cs, n, st := syn.whole.parse(rest, final, p)
			st = p.parsed(p.pos, rest, st, final)
			switch st {
			case needMore:
				return false
			case complete:
				p.emitCalls(cs)
				p.pos += n
				p.mode = modeContent
				return true
			}
		}
	}
	p.mode = modeContent
	return true
}

// stepContent passes content on up to the next marker and acts on it: a dropped marker, a
// call section, or a call to parse.
func (p *Parser) stepContent(final bool) bool {
	syn := p.syn
	rest := p.buf[p.pos:]
	i, mk := p.nextMarker(rest)
	if i < 0 {
		k := len(rest)
		if !final {
			k -= syn.partial(rest)
			k -= partialRune(rest[:k])
		}
		p.content(rest[:k])
		p.pos += k
		return false
	}
	p.content(rest[:i])
	p.pos += i
	switch mk.kind {
	case markDrop:
		p.pos += len(mk.text)
		p.boundary() // the marker separates content the way a call does
	case markSection:
		p.mode = modeSection
		p.sectionStart = p.pos
		p.sectionCalls = 0
		p.section = mk
		p.pos += len(mk.text)
	case markCall:
		if p.wait(p.pos, p.buf[p.pos:], mk.closer, mk.closerAny, final) {
			return false
		}
		cs, n, st := mk.parse(p.buf[p.pos:], final, p)
		st = p.parsed(p.pos, p.buf[p.pos:], st, final)
		switch st {
		case needMore:
			return false
		case complete:
			p.emitCalls(cs)
			p.pos += n
		default:
			p.content(mk.text)
			p.pos += len(mk.text)
		}
	}
	return true
}

// stepSection parses the calls of a section one at a time until its end marker.
func (p *Parser) stepSection(final bool) bool {
	rest := p.buf[p.pos:]
	t := strings.TrimLeft(rest, wsChars)
	skip := len(rest) - len(t)
	if m, full := matchAny(t, p.section.sectionEnd); full {
		p.pos += skip + len(m)
		p.mode = modeContent
		p.boundary()
		return true
	} else if m != "" && !final {
		return false
	}
	if t == "" {
		if !final {
			return false
		}
		if p.sectionCalls > 0 {
			p.pos = len(p.buf) // an unclosed section after whole calls
			return false
		}
		p.sectionInvalid()
		return true
	}
	if p.wait(p.pos+skip, t, p.section.closer, p.section.closerAny, final) {
		return false
	}
	cs, n, st := p.section.parse(t, final, p)
	st = p.parsed(p.pos+skip, t, st, final)
	switch st {
	case needMore:
		return false
	case complete:
		p.emitCalls(cs)
		p.sectionCalls += len(cs)
		p.pos += skip + n
	default:
		if p.sectionCalls == 0 {
			p.sectionInvalid()
		} else {
			p.mode = modeContent
		}
	}
	return true
}

// wait reports whether the call starting at buf offset at, whose text so far is s, can
// be left waiting without parsing it again: nothing in what arrived since its last parse
// can finish it. Skipping a parse changes no decision (a parser's complete and invalid
// hold for every continuation), it only comes later.
func (p *Parser) wait(at int, s, closer, closerAny string, final bool) bool {
	if final || at != p.waitAt || p.waitLen == 0 || p.waitLen > len(s) {
		return false
	}
	seen := p.waitLen
	switch {
	case len(s)-seen >= max(minReparse, seen/2):
		return false
	case closer != "":
		return !strings.Contains(s[max(0, seen-len(closer)+1):], closer)
	case closerAny != "":
		return !strings.ContainsAny(s[seen:], closerAny)
	}
	return true // finishes only with the generation: the growth rule alone
}

// parsed notes a parse of the call at buf offset at, whose text was s, and settles its
// status (needMore becomes invalid at the end).
func (p *Parser) parsed(at int, s string, st status, final bool) status {
	st = settle(st, final)
	p.waitAt, p.waitLen = at, 0
	if st == needMore {
		p.waitLen = len(s)
	}
	return st
}

// minReparse is the least growth (bytes) that makes a waiting call be parsed again with
// no closer in sight. The growth rule is geometric (half of what was seen), which keeps
// the total parsing linear in the call's length; the minimum only spares tiny calls a
// parse per token, and bounds how long broken call text is held before it streams out.
const minReparse = 16

// sectionInvalid turns the marker that opened a section with no good call into content.
func (p *Parser) sectionInvalid() {
	p.pos = p.sectionStart
	rest := p.buf[p.pos:]
	i, mk := p.nextMarker(rest)
	if i != 0 || mk.kind != markSection {
		panic("toolcall: section start lost")
	}
	p.content(mk.text)
	p.pos += len(mk.text)
	p.mode = modeContent
}

// nextMarker finds the earliest marker in s (the longest at one offset).
func (p *Parser) nextMarker(s string) (int, *marker) {
	best, bi := -1, (*marker)(nil)
	for k := range p.syn.markers {
		mk := &p.syn.markers[k]
		i := strings.Index(s, mk.text)
		if i < 0 {
			continue
		}
		if best < 0 || i < best || (i == best && len(mk.text) > len(bi.text)) {
			best, bi = i, mk
		}
	}
	return best, bi
}

// known reports whether a call may name tool name.
func (p *Parser) known(name string) bool {
	if name == "" {
		return false
	}
	if p.tool == nil {
		return true
	}
	_, ok := p.tool[name]
	return ok
}

const wsChars = " \t\r\n"

// matchAny reports the marker in ms that t starts with (full), or failing that one that t
// is a proper, non-empty prefix of (m != "", full false).
func matchAny(t string, ms []string) (m string, full bool) {
	for _, x := range ms {
		if strings.HasPrefix(t, x) {
			return x, true
		}
	}
	if t == "" {
		return "", false
	}
	for _, x := range ms {
		if strings.HasPrefix(x, t) {
			return x, false
		}
	}
	return "", false
}

// indexAny is the earliest offset of any of ms in s, and which.
func indexAny(s string, ms []string) (int, string) {
	best, bm := -1, ""
	for _, m := range ms {
		if i := strings.Index(s, m); i >= 0 && (best < 0 || i < best) {
			best, bm = i, m
		}
	}
	return best, bm
}

// partialSuffix is the length of the longest suffix of s that is a proper prefix of one
// of ms: text to hold back because the next piece may complete the marker.
func partialSuffix(s string, ms []string) int {
	n := 0
	for _, m := range ms {
		for k := min(len(m)-1, len(s)); k > n; k-- {
			if strings.HasSuffix(s, m[:k]) {
				n = k
				break
			}
		}
	}
	return n
}

// partialRune is the length of an incomplete UTF-8 sequence at the end of s, held back so
// that no delta splits a character.
func partialRune(s string) int {
	for n := 1; n <= utf8.UTFMax-1 && n <= len(s); n++ {
		b := s[len(s)-n]
		if b < 0x80 {
			return 0 // ASCII: complete
		}
		if b >= 0xC0 { // a lead byte: is its sequence cut short?
			need := 2
			switch {
			case b >= 0xF0:
				need = 4
			case b >= 0xE0:
				need = 3
			}
			if need > n {
				return n
			}
			return 0
		}
	}
	return 0
}

const idChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomID is an OpenAI-style call id. It need not be unpredictable, only unique enough
// within a conversation.
func randomID() string {
	var b [5 + 24]byte
	copy(b[:], "call_")
	for i := 5; i < len(b); i++ {
		b[i] = idChars[rand.IntN(len(idChars))]
	}
	return string(b[:])
}
