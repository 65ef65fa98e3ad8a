package toolcall

import (
	"strings"
)

// status is what a call parser makes of the text from a marker on.
//
// The decision must not depend on where the text ends except through needMore: invalid
// and complete are only returned when every continuation of the text would get the same
// answer. That is what makes streaming agree with Parse.
type status int

const (
	needMore status = iota // the text so far may still become a call
	invalid                // no continuation makes this a call
	complete               // a call (or calls) ending at n
)

// settle turns needMore into invalid at the end of the generation.
func settle(st status, final bool) status {
	if final && st == needMore {
		return invalid
	}
	return st
}

// rawCall is a parsed call before the parser gives it an index (and maybe an id).
type rawCall struct {
	id, name, args string
}

// parseFunc parses call(s) from the start of s. It returns the bytes they take.
type parseFunc func(s string, final bool, p *Parser) ([]rawCall, int, status)

type markKind int

const (
	markCall    markKind = iota // parse calls from the marker on
	markSection                 // opens a section of calls, closed by sectionEnd
	markDrop                    // a wrapper marker that is not content
)

// marker is a literal that starts something in the content.
type marker struct {
	text       string
	kind       markKind
	parse      parseFunc // markCall: from the marker; markSection: one call in the section
	sectionEnd []string  // markSection
	// closer is the closing literal that must arrive for a call to complete, or
	// closerAny the bytes one of which must (the last bytes of JSON, "}]"). Neither
	// means only the end of the generation completes it. They only save work (see
	// Parser.wait): a wrong one delays decisions, it cannot change them.
	closer, closerAny string
}

// whole is a call syntax with no marker: the whole content is the call (Llama 3's JSON).
type whole struct {
	starts func(t string) bool // t: the content with leading whitespace cut
	parse  parseFunc
}

// syntax is how one family writes reasoning and calls.
type syntax struct {
	thinkOpen, thinkClose []string
	markers               []marker
	whole                 *whole
	texts                 []string // marker texts, for partialSuffix

	// reasoningEnds are the texts that end a reasoning block: thinkClose, and for
	// families whose models call tools from inside an unclosed block (Kimi K2 Thinking)
	// their call markers, which callEndsReasoning names.
	reasoningEnds     []string
	callEndsReasoning map[string]bool
}

func (s *syntax) partial(rest string) int { return partialSuffix(rest, s.texts) }

func newSyntax(open, close []string, whole *whole, ms ...marker) *syntax {
	s := &syntax{thinkOpen: open, thinkClose: close, markers: ms, whole: whole, reasoningEnds: close}
	for _, m := range ms {
		s.texts = append(s.texts, m.text)
	}
	return s
}

// callsEndReasoning makes s's call markers end a reasoning block as well.
func (s *syntax) callsEndReasoning() *syntax {
	s.callEndsReasoning = map[string]bool{}
	s.reasoningEnds = append([]string(nil), s.thinkClose...)
	for _, m := range s.markers {
		if m.kind != markDrop {
			s.reasoningEnds = append(s.reasoningEnds, m.text)
			s.callEndsReasoning[m.text] = true
		}
	}
	return s
}

var (
	think        = []string{"<think>"}
	thinkEnd     = []string{"</think>"}
	mistralThink = []string{"[THINK]"}
	mistralEnd   = []string{"[/THINK]"}

	toolCallMarker = marker{text: "<tool_call>", kind: markCall, parse: toolCallTag("<tool_call>", "</tool_call>", false), closer: "</tool_call>"}
	glmCallMarker  = marker{text: "<tool_call>", kind: markCall, parse: toolCallTag("<tool_call>", "</tool_call>", true), closer: "</tool_call>"}

	deepSeekSection = marker{
		text: "<｜tool▁calls▁begin｜>", kind: markSection, parse: parseDeepSeekCall,
		sectionEnd: []string{"<｜tool▁calls▁end｜>"}, closer: "<｜tool▁call▁end｜>",
	}

	syntaxes = map[Family]*syntax{
		None:   newSyntax(think, thinkEnd, nil),
		Hermes: newSyntax(think, thinkEnd, nil, toolCallMarker),
		Qwen3Coder: newSyntax(think, thinkEnd, nil, toolCallMarker,
			marker{text: "<function=", kind: markCall, parse: parseBareFunction, closer: "</tool_call>"}),
		GLM:         newSyntax(think, thinkEnd, nil, glmCallMarker),
		Llama3:      newSyntax(think, thinkEnd, &whole{starts: startsJSONObject, parse: parseLlamaJSON}, marker{text: "<|python_tag|>", kind: markCall, parse: parsePythonTag}),
		Mistral:     newSyntax(mistralThink, mistralEnd, nil, marker{text: "[TOOL_CALLS]", kind: markCall, parse: parseMistral, closerAny: "}]\""}),
		MistralArgs: newSyntax(mistralThink, mistralEnd, nil, marker{text: "[TOOL_CALLS]", kind: markCall, parse: parseMistral, closerAny: "}]\""}),
		DeepSeekR1:  newSyntax(think, thinkEnd, nil, deepSeekSection),
		DeepSeekV3:  newSyntax(think, thinkEnd, nil, deepSeekSection),
		Kimi: newSyntax(think, thinkEnd, nil, marker{
			text: "<|tool_calls_section_begin|>", kind: markSection, parse: parseKimiCall,
			sectionEnd: []string{"<|tool_calls_section_end|>"}, closer: "<|tool_call_end|>",
		}).callsEndReasoning(),
		KimiK3: newSyntax([]string{k3ThinkOpen}, []string{k3ThinkClose, k3RespOpen}, nil,
			marker{text: k3MsgOpen, kind: markDrop},
			marker{text: k3RespOpen, kind: markDrop},
			marker{text: k3RespClose, kind: markDrop},
			marker{text: k3MsgClose, kind: markDrop},
			marker{text: k3EndOfMsg, kind: markDrop},
			marker{text: k3ToolsOpen, kind: markSection, parse: parseK3Call, sectionEnd: []string{k3ToolsClose}, closer: "<|close|>call<|sep|>"},
		),
		MiniMax: newSyntax(think, thinkEnd, nil, marker{
			text: "<minimax:tool_call>", kind: markSection, parse: parseInvoke,
			sectionEnd: []string{"</minimax:tool_call>"}, closer: "</invoke>",
		}),
		Granite:      newSyntax(think, thinkEnd, nil, marker{text: "<|tool_call|>", kind: markCall, parse: arrayCall("<|tool_call|>", ""), closerAny: "]"}),
		Apriel:       newSyntax(nil, nil, nil, marker{text: "<tool_calls>", kind: markCall, parse: arrayCall("<tool_calls>", "</tool_calls>"), closer: "</tool_calls>"}),
		Firefunction: newSyntax(nil, nil, nil, marker{text: "functools", kind: markCall, parse: arrayCall("functools", ""), closerAny: "]"}),
		CommandR: newSyntax([]string{"<|START_THINKING|>"}, []string{"<|END_THINKING|>"}, nil,
			marker{text: "<|START_RESPONSE|>", kind: markDrop},
			marker{text: "<|END_RESPONSE|>", kind: markDrop},
			marker{text: "<|START_TEXT|>", kind: markDrop},
			marker{text: "<|END_TEXT|>", kind: markDrop},
			marker{text: "<|START_ACTION|>", kind: markCall, parse: arrayCall("<|START_ACTION|>", "<|END_ACTION|>"), closer: "<|END_ACTION|>"},
		),
		SeedOSS: newSyntax([]string{"<seed:think>"}, []string{"</seed:think>"}, nil,
			marker{text: "<seed:tool_call>", kind: markCall, parse: toolCallTag("<seed:tool_call>", "</seed:tool_call>", false), closer: "</seed:tool_call>"}),
		Functionary: newSyntax(nil, nil, nil, marker{text: "<function=", kind: markCall, parse: parseFunctionary, closer: "</function>"}),
	}
)

func syntaxOf(f Family) *syntax {
	if s, ok := syntaxes[f]; ok {
		return s
	}
	return syntaxes[None]
}

// contentSyntaxes are the syntaxes of Options.NoCalls: each family's reasoning markers
// (<think> for families with none of their own) and the markers that wrap its content,
// without call markers.
var contentSyntaxes = func() map[Family]*syntax {
	out := make(map[Family]*syntax, len(syntaxes))
	for f, s := range syntaxes {
		open, close := s.thinkOpen, s.thinkClose
		if len(open) == 0 {
			open, close = think, thinkEnd
		}
		var drops []marker
		for _, m := range s.markers {
			if m.kind == markDrop {
				drops = append(drops, m)
			}
		}
		out[f] = newSyntax(open, close, nil, drops...)
	}
	return out
}()

func contentSyntaxOf(f Family) *syntax {
	if s, ok := contentSyntaxes[f]; ok {
		return s
	}
	return contentSyntaxes[None]
}

// Kimi K3 wraps every part of a message in <|open|>TAG attrs<|sep|> … <|close|>TAG<|sep|>.
const (
	k3MsgOpen    = `<|open|>message role="assistant"<|sep|>`
	k3MsgClose   = "<|close|>message<|sep|>"
	k3EndOfMsg   = "<|end_of_msg|>"
	k3ThinkOpen  = "<|open|>think<|sep|>"
	k3ThinkClose = "<|close|>think<|sep|>"
	k3RespOpen   = "<|open|>response<|sep|>"
	k3RespClose  = "<|close|>response<|sep|>"
	k3ToolsOpen  = "<|open|>tools<|sep|>"
	k3ToolsClose = "<|close|>tools<|sep|>"
)

// cursor walks a call's text. Each step either advances or reports why it cannot: the
// text ended (needMore) or it is not what the syntax expects (invalid).
type cursor struct {
	s string
	i int
}

func (c *cursor) rest() string { return c.s[c.i:] }

func (c *cursor) ws() { c.i = len(c.s) - len(strings.TrimLeft(c.s[c.i:], wsChars)) }

// lit steps over literal l.
func (c *cursor) lit(l string) status {
	r := c.rest()
	if strings.HasPrefix(r, l) {
		c.i += len(l)
		return complete
	}
	if strings.HasPrefix(l, r) {
		return needMore
	}
	return invalid
}

// optLit steps over l if it is there. It returns needMore when the text ends inside it.
func (c *cursor) optLit(l string) (bool, status) {
	r := c.rest()
	if strings.HasPrefix(r, l) {
		c.i += len(l)
		return true, complete
	}
	if strings.HasPrefix(l, r) {
		return false, needMore
	}
	return false, complete
}

// until returns the text up to end and steps past end. ok, if set, vets the text before
// end (also while it is incomplete, so bad text is rejected early); it must accept every
// prefix of a string it accepts.
func (c *cursor) until(end string, ok func(string) bool) (string, status) {
	r := c.rest()
	if j := strings.Index(r, end); j >= 0 {
		if ok != nil && !ok(r[:j]) {
			return "", invalid
		}
		c.i += j + len(end)
		return r[:j], complete
	}
	if ok != nil && !ok(r[:len(r)-partialSuffix(r, []string{end})]) {
		return "", invalid
	}
	return "", needMore
}

// jsonValue steps over one JSON object or array (or a string when strOK).
func (c *cursor) jsonValue(strOK bool) (string, status) {
	r := c.rest()
	if r == "" {
		return "", needMore
	}
	if r[0] != '{' && r[0] != '[' && (!strOK || r[0] != '"') {
		return "", invalid
	}
	n, st := scanJSON(r)
	if st != complete {
		return "", st
	}
	c.i += n
	return r[:n], complete
}

// nameChars vets a function name: no whitespace or markup.
func nameChars(s string) bool {
	return !strings.ContainsAny(s, " \t\r\n<>[]{}\"'")
}

func startsJSONObject(t string) bool { return t[0] == '{' }

// toolCallTag parses <tool_call>…</tool_call> (or another pair of tags) with any of three
// bodies:
//
//	{"name": "f", "arguments": {…}}                         Hermes, Qwen2.5, Qwen3
//	<function=f><parameter=k>v</parameter>…</function>      Qwen3-Coder, Qwen3.5, Nemotron 3
//	f<arg_key>k</arg_key><arg_value>v</arg_value>…           GLM 4.5+ (only with glm)
//
// Models of one family now and then write the other's JSON or XML body; both are
// accepted. The GLM body (a bare name) is only read for GLM, where a bare word after
// <tool_call> is a call and not a model's slip.
func toolCallTag(open, close string, glm bool) parseFunc {
	return func(s string, final bool, p *Parser) ([]rawCall, int, status) {
		return parseToolCallTag(s, open, close, glm, p)
	}
}

func parseToolCallTag(s, open, close string, glm bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	if st := c.lit(open); st != complete {
		return nil, 0, st
	}
	c.ws()
	r := c.rest()
	var call rawCall
	switch {
	case r == "":
		return nil, 0, needMore
	case r[0] == '{':
		raw, st := c.jsonValue(false)
		if st != complete {
			return nil, 0, st
		}
		var ok bool
		if call, ok = decodeJSONCall(raw, p); !ok {
			return nil, 0, invalid
		}
	case r[0] == '<':
		var st status
		if call, st = parseFunctionXML(&c, p); st != complete {
			return nil, 0, st
		}
	case !glm:
		return nil, 0, invalid
	default:
		var st status
		if call, st = parseGLMBody(&c, p); st != complete {
			return nil, 0, st
		}
	}
	c.ws()
	if st := c.lit(close); st != complete {
		return nil, 0, st
	}
	return []rawCall{call}, c.i, complete
}

// parseFunctionXML parses <function=NAME> (<parameter=KEY>\nVALUE\n</parameter>)* </function>.
func parseFunctionXML(c *cursor, p *Parser) (rawCall, status) {
	if st := c.lit("<function="); st != complete {
		return rawCall{}, st
	}
	name, st := c.until(">", nameChars)
	if st != complete {
		return rawCall{}, st
	}
	if !p.known(name) {
		return rawCall{}, invalid
	}
	var args argsBuilder
	for {
		c.ws()
		more, st := c.optLit("<parameter=")
		if st != complete {
			return rawCall{}, st
		}
		if !more {
			break
		}
		key, st := c.until(">", nameChars)
		if st != complete {
			return rawCall{}, st
		}
		val, st := c.until("</parameter>", nil)
		if st != complete {
			return rawCall{}, st
		}
		args.add(key, xmlValue(val, p.paramType(name, key)))
	}
	if st := c.lit("</function>"); st != complete {
		return rawCall{}, st
	}
	return rawCall{name: name, args: args.done()}, complete
}

// parseBareFunction parses a Qwen3-Coder call whose model left out the opening
// <tool_call> (llama.cpp's tests show models doing so): <function=…>…</function></tool_call>.
func parseBareFunction(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	call, st := parseFunctionXML(&c, p)
	if st != complete {
		return nil, 0, st
	}
	c.ws()
	if st := c.lit("</tool_call>"); st != complete {
		return nil, 0, st
	}
	return []rawCall{call}, c.i, complete
}

// parseGLMBody parses NAME\n(<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n)*.
func parseGLMBody(c *cursor, p *Parser) (rawCall, status) {
	r := c.rest()
	j := strings.IndexAny(r, "\n<")
	if j < 0 {
		if !nameChars(r) {
			return rawCall{}, invalid
		}
		return rawCall{}, needMore
	}
	name := r[:j]
	if name == "" || !nameChars(name) || !p.known(name) {
		return rawCall{}, invalid
	}
	c.i += j
	var args argsBuilder
	for {
		c.ws()
		more, st := c.optLit("<arg_key>")
		if st != complete {
			return rawCall{}, st
		}
		if !more {
			break
		}
		key, st := c.until("</arg_key>", noMarkup)
		if st != complete {
			return rawCall{}, st
		}
		c.ws()
		if st := c.lit("<arg_value>"); st != complete {
			return rawCall{}, st
		}
		val, st := c.until("</arg_value>", nil)
		if st != complete {
			return rawCall{}, st
		}
		args.add(key, xmlValue(val, p.paramType(name, key)))
	}
	return rawCall{name: name, args: args.done()}, complete
}

func noMarkup(s string) bool { return !strings.ContainsAny(s, "<>") }

// parseInvoke parses one MiniMax-M2 call:
// <invoke name="NAME"> (<parameter name="KEY">VALUE</parameter>)* </invoke>.
func parseInvoke(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	if st := c.lit(`<invoke name="`); st != complete {
		return nil, 0, st
	}
	name, st := c.until(`">`, nameChars)
	if st != complete {
		return nil, 0, st
	}
	if !p.known(name) {
		return nil, 0, invalid
	}
	var args argsBuilder
	for {
		c.ws()
		more, st := c.optLit(`<parameter name="`)
		if st != complete {
			return nil, 0, st
		}
		if !more {
			break
		}
		key, st := c.until(`">`, noQuote)
		if st != complete {
			return nil, 0, st
		}
		val, st := c.until("</parameter>", nil)
		if st != complete {
			return nil, 0, st
		}
		args.add(key, xmlValue(val, p.paramType(name, key)))
	}
	if st := c.lit("</invoke>"); st != complete {
		return nil, 0, st
	}
	return []rawCall{{name: name, args: args.done()}}, c.i, complete
}

func noQuote(s string) bool { return !strings.ContainsAny(s, "\"<>") }

// parseLlamaJSON parses a whole message of JSON calls: {"name": "f", "parameters": {…}},
// several separated by ';'. Only the end of the message says it is one.
func parseLlamaJSON(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	var calls []rawCall
	for {
		c.ws()
		raw, st := c.jsonValue(false)
		if st != complete {
			return nil, 0, st
		}
		call, ok := decodeJSONCall(raw, p)
		if !ok {
			return nil, 0, invalid
		}
		calls = append(calls, call)
		c.ws()
		if c.rest() == "" {
			if !final {
				return nil, 0, needMore
			}
			return calls, c.i, complete
		}
		if st := c.lit(";"); st != complete {
			return nil, 0, st
		}
	}
}

// parsePythonTag parses what follows Llama 3.1's <|python_tag|>: JSON calls as in
// parseLlamaJSON, or a builtin tool call brave_search.call(query="…"), to the end.
func parsePythonTag(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	if st := c.lit("<|python_tag|>"); st != complete {
		return nil, 0, st
	}
	c.ws()
	r := c.rest()
	if r == "" {
		return nil, 0, needMore
	}
	if r[0] == '{' {
		calls, n, st := parseLlamaJSON(r, final, p)
		return calls, c.i + n, st
	}
	call, n, st := parseBuiltinCall(r, p)
	if st != complete {
		return nil, 0, st
	}
	c.i += n
	c.ws()
	if c.rest() != "" {
		return nil, 0, invalid
	}
	if !final {
		return nil, 0, needMore
	}
	return []rawCall{call}, c.i, complete
}

// parseMistral parses what follows [TOOL_CALLS]: either a JSON array of calls (Mistral
// Nemo) or NAME[ARGS]{…} with an optional [CALL_ID]ID before [ARGS] (Mistral Small 3.2,
// Devstral, Ministral 3).
func parseMistral(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	if st := c.lit("[TOOL_CALLS]"); st != complete {
		return nil, 0, st
	}
	c.ws()
	r := c.rest()
	if r == "" {
		return nil, 0, needMore
	}
	if r[0] == '[' {
		raw, st := c.jsonValue(false)
		if st != complete {
			return nil, 0, st
		}
		calls, ok := decodeJSONCalls(raw, p)
		if !ok {
			return nil, 0, invalid
		}
		return calls, c.i, complete
	}
	name, st := c.until("[", nameChars)
	if st != complete {
		return nil, 0, st
	}
	c.i-- // back onto the '['
	if !p.known(name) {
		return nil, 0, invalid
	}
	var id string
	hasID, st := c.optLit("[CALL_ID]")
	if st != complete {
		return nil, 0, st
	}
	if hasID {
		if id, st = c.until("[", nameChars); st != complete {
			return nil, 0, st
		}
		c.i--
	}
	if st := c.lit("[ARGS]"); st != complete {
		return nil, 0, st
	}
	c.ws()
	raw, st := c.jsonValue(true)
	if st != complete {
		return nil, 0, st
	}
	args, ok := normArgs(raw)
	if !ok {
		return nil, 0, invalid
	}
	return []rawCall{{id: id, name: name, args: args}}, c.i, complete
}

// parseDeepSeekCall parses one call in a DeepSeek section, in either form:
//
//	<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>   R1
//	<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}<｜tool▁call▁end｜>                           V3.1
func parseDeepSeekCall(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	if st := c.lit("<｜tool▁call▁begin｜>"); st != complete {
		return nil, 0, st
	}
	head, st := c.until("<｜tool▁sep｜>", noMarkupOrSpace)
	if st != complete {
		return nil, 0, st
	}
	name := head
	fenced := false
	if head == "function" {
		// R1: the name runs to the end of the line, then a fenced JSON block.
		r := c.rest()
		j := strings.IndexAny(r, "\n`{")
		if j < 0 {
			if !noMarkupOrSpace(strings.TrimRight(r, " ")) {
				return nil, 0, invalid
			}
			return nil, 0, needMore
		}
		name = strings.TrimSpace(r[:j])
		if !noMarkupOrSpace(name) {
			return nil, 0, invalid
		}
		c.i += j
		c.ws()
		if fenced, st = c.optLit("```"); st != complete {
			return nil, 0, st
		}
		if fenced {
			if _, st := c.optLit("json"); st != complete {
				return nil, 0, st
			}
		}
		c.ws()
	}
	if name == "" || !p.known(name) {
		return nil, 0, invalid
	}
	raw, st := c.jsonValue(true)
	if st != complete {
		return nil, 0, st
	}
	args, ok := normArgs(raw)
	if !ok {
		return nil, 0, invalid
	}
	c.ws()
	if fenced {
		if st := c.lit("```"); st != complete {
			return nil, 0, st
		}
		c.ws()
	}
	if st := c.lit("<｜tool▁call▁end｜>"); st != complete {
		return nil, 0, st
	}
	return []rawCall{{name: name, args: args}}, c.i, complete
}

func noMarkupOrSpace(s string) bool { return !strings.ContainsAny(s, " \t\r\n<>{}[]\"'`｜") }

// parseKimiCall parses one Kimi K2 call:
// <|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{…}<|tool_call_end|>.
// The id functions.NAME:IDX is the call's id (the template sends it back in results).
func parseKimiCall(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	if st := c.lit("<|tool_call_begin|>"); st != complete {
		return nil, 0, st
	}
	c.ws()
	id, st := c.until("<|tool_call_argument_begin|>", noMarkupOrSpace)
	if st != complete {
		return nil, 0, st
	}
	id = strings.TrimSpace(id)
	name := strings.TrimPrefix(id, "functions.")
	if k := strings.LastIndexByte(name, ':'); k >= 0 {
		if !allDigits(name[k+1:]) {
			return nil, 0, invalid
		}
		name = name[:k]
	}
	if !p.known(name) {
		return nil, 0, invalid
	}
	c.ws()
	raw, st := c.jsonValue(true)
	if st != complete {
		return nil, 0, st
	}
	args, ok := normArgs(raw)
	if !ok {
		return nil, 0, invalid
	}
	c.ws()
	if st := c.lit("<|tool_call_end|>"); st != complete {
		return nil, 0, st
	}
	return []rawCall{{id: id, name: name, args: args}}, c.i, complete
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseK3Call parses one Kimi K3 call:
//
//	<|open|>call tool="NAME" index="1"<|sep|>
//	  <|open|>argument key="K" type="string"<|sep|>VALUE<|close|>argument<|sep|>…
//	  or <|open|>json type="object"<|sep|>{…}<|close|>json<|sep|>
//	<|close|>call<|sep|>
func parseK3Call(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	if st := c.lit("<|open|>call"); st != complete {
		return nil, 0, st
	}
	attrs, st := c.until("<|sep|>", k3AttrText)
	if st != complete {
		return nil, 0, st
	}
	at, ok := k3Attrs(attrs)
	if !ok {
		return nil, 0, invalid
	}
	name := at["tool"]
	if !p.known(name) {
		return nil, 0, invalid
	}
	var args argsBuilder
	var jsonArgs string
	for {
		c.ws()
		isArg, st := c.optLit("<|open|>argument")
		if st != complete {
			return nil, 0, st
		}
		if isArg {
			if jsonArgs != "" {
				return nil, 0, invalid
			}
			attrs, st := c.until("<|sep|>", k3AttrText)
			if st != complete {
				return nil, 0, st
			}
			at, ok := k3Attrs(attrs)
			if !ok || at["key"] == "" {
				return nil, 0, invalid
			}
			val, st := c.until("<|close|>argument<|sep|>", nil)
			if st != complete {
				return nil, 0, st
			}
			args.add(at["key"], k3Value(val, at["type"], p.paramType(name, at["key"])))
			continue
		}
		isJSON, st := c.optLit("<|open|>json")
		if st != complete {
			return nil, 0, st
		}
		if !isJSON {
			break
		}
		if jsonArgs != "" || args.n > 0 {
			return nil, 0, invalid
		}
		if _, st := c.until("<|sep|>", k3AttrText); st != complete {
			return nil, 0, st
		}
		c.ws()
		raw, st := c.jsonValue(false)
		if st != complete {
			return nil, 0, st
		}
		if jsonArgs, ok = normArgs(raw); !ok {
			return nil, 0, invalid
		}
		c.ws()
		if st := c.lit("<|close|>json<|sep|>"); st != complete {
			return nil, 0, st
		}
	}
	if st := c.lit("<|close|>call<|sep|>"); st != complete {
		return nil, 0, st
	}
	if jsonArgs == "" {
		jsonArgs = args.done()
	}
	return []rawCall{{name: name, args: jsonArgs}}, c.i, complete
}

func k3AttrText(s string) bool { return !strings.Contains(s, "<|") }

// k3Attrs parses ` key="value" key2="value2"`; values escape & and " as &amp; &quot;.
func k3Attrs(s string) (map[string]string, bool) {
	m := map[string]string{}
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			return m, true
		}
		eq := strings.Index(s, `="`)
		if eq <= 0 {
			return nil, false
		}
		key := s[:eq]
		s = s[eq+2:]
		end := strings.IndexByte(s, '"')
		if end < 0 {
			return nil, false
		}
		m[key] = strings.ReplaceAll(strings.ReplaceAll(s[:end], "&quot;", `"`), "&amp;", "&")
		s = s[end+1:]
	}
}

// arrayCall parses OPEN [ {call}, … ] CLOSE, with CLOSE optional when empty: granite's
// <|tool_call|>, Apriel's <tool_calls>, firefunction's functools, Command R's actions.
func arrayCall(open, close string) parseFunc {
	return func(s string, final bool, p *Parser) ([]rawCall, int, status) {
		c := cursor{s: s}
		if st := c.lit(open); st != complete {
			return nil, 0, st
		}
		c.ws()
		raw, st := c.jsonValue(false)
		if st != complete {
			return nil, 0, st
		}
		calls, ok := decodeJSONCalls(raw, p)
		if !ok {
			return nil, 0, invalid
		}
		if close != "" {
			c.ws()
			if st := c.lit(close); st != complete {
				return nil, 0, st
			}
		}
		return calls, c.i, complete
	}
}

// parseFunctionary parses functionary v3.1's <function=NAME>{…}</function>.
func parseFunctionary(s string, final bool, p *Parser) ([]rawCall, int, status) {
	c := cursor{s: s}
	if st := c.lit("<function="); st != complete {
		return nil, 0, st
	}
	name, st := c.until(">", nameChars)
	if st != complete {
		return nil, 0, st
	}
	if !p.known(name) {
		return nil, 0, invalid
	}
	c.ws()
	raw, st := c.jsonValue(false)
	if st != complete {
		return nil, 0, st
	}
	args, ok := normArgs(raw)
	if !ok {
		return nil, 0, invalid
	}
	c.ws()
	if st := c.lit("</function>"); st != complete {
		return nil, 0, st
	}
	return []rawCall{{name: name, args: args}}, c.i, complete
}
