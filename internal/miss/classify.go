package miss

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// verdict is the text half's answer, with the two decoded windows and the byte where they
// part.
type verdict struct {
	cause        Cause
	detail       string
	pText, cText string
	at           int
}

// agreeBytes is how far the two texts must agree after a cause's span for the cause to
// explain the difference (or up to the end of the shorter window).
const agreeBytes = 16

// maxSpans is how many differences in a row one cause may explain (a date and a time, two
// ids, a run of whitespace changes).
const maxSpans = 8

// classify compares the prompt's tokens shared+pTail with the cached chain's shared+cTail;
// they first differ at token at of the tails.
func classify(t Text, shared, pTail, cTail []int32, at int) verdict {
	if pc, cc := tokenAt(pTail, at), tokenAt(cTail, at); (pc >= 0 && t.IsControl(pc)) || (cc >= 0 && t.IsControl(cc)) {
		v := texts(t, shared, pTail, cTail)
		v.cause = Template
		v.detail = fmt.Sprintf("a control token differs: %s in the prompt, %s in the cache", pieceName(t, pc), pieceName(t, cc))
		return v
	}
	v := texts(t, shared, pTail, cTail)
	p, c, d := v.pText, v.cText, v.at
	switch {
	case d == len(p) || d == len(c):
		v.cause, v.detail = Template, "the same text, tokenized differently (a turn rendered or split another way)"
	case markup(p, c, d):
		v.cause, v.detail = Template, "template markup differs (think or tool-call tags, special tokens)"
	case spans(timestampRE, p, c, d, nil):
		v.cause, v.detail = Timestamp, "a date or time differs"
	case spans(nonceRE, p, c, d, looksLikeID):
		v.cause, v.detail = UUID, "a UUID, nonce or id differs"
	default:
		if detail, ok := reordered(p, c, d); ok {
			v.cause, v.detail = Reordered, detail
		} else if whitespace(p, c, d) {
			v.cause, v.detail = Whitespace, "whitespace differs"
		} else {
			v.cause, v.detail = NewContent, "the prompt's text differs from the cached chain's"
		}
	}
	return v
}

func tokenAt(toks []int32, i int) int32 {
	if i < len(toks) {
		return toks[i]
	}
	return -1
}

func pieceName(t Text, id int32) string {
	if id < 0 {
		return "the end"
	}
	return fmt.Sprintf("%q", t.Piece(id))
}

// texts renders both windows as the bytes their tokens stand for (control tokens as their
// text, so template markup shows) and finds where they first differ.
func texts(t Text, shared, pTail, cTail []int32) verdict {
	var b strings.Builder
	for _, id := range shared {
		b.Write(t.Piece(id))
	}
	head := b.String()
	render := func(tail []int32) string {
		var b strings.Builder
		b.WriteString(head)
		for _, id := range tail {
			b.Write(t.Piece(id))
		}
		return b.String()
	}
	p, c := render(pTail), render(cTail)
	d := commonPrefix(p, c)
	for d > 0 && d < len(p) && !utf8.RuneStart(p[d]) {
		d-- // report the divergence on a character boundary
	}
	return verdict{pText: p, cText: c, at: d}
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// agree reports whether two texts that differ first at d agree long enough there: d is at
// least agreeBytes, or reaches the end of one of them.
func agree(p, c string, d int) bool {
	return d >= agreeBytes || d == len(p) || d == len(c)
}

var (
	// markupRE is template markup: think and tool-call tags, <|...|> special-token text.
	markupRE = regexp.MustCompile(`</?think>|</?tool_call>|</?tools>|<\|[A-Za-z0-9_]+\|>|\[/?INST\]|<</?SYS>>`)

	// timestampRE: ISO-8601 and RFC 3339 stamps, dates with slashes or dots, times of day,
	// month and weekday names with a day, unix epochs in seconds or milliseconds.
	timestampRE = regexp.MustCompile(`(?i)` +
		`\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?` +
		`|\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:\s?[ap]\.?m\.?)?(?:\s?(?:UTC|GMT|[A-Z]{3,4}))?` +
		`|\d{1,4}[/.]\d{1,2}[/.]\d{1,4}` +
		`|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tue|wed|thu|fri|sat|sun)\b` +
		`|\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]{0,6}\.?\s+\d{1,2}\b(?:st|nd|rd|th)?(?:,?\s+\d{4})?` +
		`|\b\d{1,2}(?:st|nd|rd|th)?\s+(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]{0,6}\.?(?:,?\s+\d{4})?` +
		`|\b1\d{9}(?:\d{3})?(?:\.\d+)?\b`)

	// nonceRE: UUIDs, hex strings of 12 or more digits, and id-like runs (a prefix such as
	// req_ or call_, or 20 or more letters and digits).
	nonceRE = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}` +
		`|\b[0-9a-fA-F]{12,}\b` +
		`|\b(?:req|msg|call|chatcmpl|toolu|run|sess|session|trace|id|nonce)[_-][A-Za-z0-9_-]{6,}` +
		`|[A-Za-z0-9+/_-]{20,}={0,2}`)
)

// looksLikeID keeps nonce matches that hold a digit (a long word is not a nonce).
func looksLikeID(s string) bool { return strings.ContainsAny(s, "0123456789") }

// spanWindow is how far around the divergence a cause's span is searched for.
const spanWindow = 64

// spanAt reports whether a match of re covers byte d of s.
func spanAt(re *regexp.Regexp, s string, d int) bool {
	_, _, ok := matchAt(re, s, d, nil)
	return ok
}

// matchAt returns the match of re (passing keep, when set) covering byte d of s.
func matchAt(re *regexp.Regexp, s string, d int, keep func(string) bool) (int, int, bool) {
	lo, hi := max(d-spanWindow, 0), min(d+spanWindow, len(s))
	for _, m := range re.FindAllStringIndex(s[lo:hi], -1) {
		a, b := lo+m[0], lo+m[1]
		if a <= d && d < b && (keep == nil || keep(s[a:b])) {
			return a, b, true
		}
	}
	return 0, 0, false
}

// spans reports whether, each time p and c differ, a match of re covers the difference in
// both, and after at most maxSpans of them the texts agree.
func spans(re *regexp.Regexp, p, c string, d int, keep func(string) bool) bool {
	for range maxSpans {
		_, bp, okp := matchAt(re, p, d, keep)
		_, bc, okc := matchAt(re, c, d, keep)
		if !okp || !okc {
			return false
		}
		p, c = p[bp:], c[bc:]
		d = commonPrefix(p, c)
		if agree(p, c, d) {
			return true
		}
	}
	return false
}

// markup reports whether the texts agree once template markup covering each difference is
// skipped, on either side (a think block or a tag one rendering has and the other lacks).
func markup(p, c string, d int) bool {
	for range maxSpans {
		_, bp, okp := matchAt(markupRE, p, d, nil)
		_, bc, okc := matchAt(markupRE, c, d, nil)
		if !okp && !okc {
			return false
		}
		if okp {
			p = p[bp:]
		} else {
			p = p[d:]
		}
		if okc {
			c = c[bc:]
		} else {
			c = c[d:]
		}
		p, c = strings.TrimLeftFunc(p, unicode.IsSpace), strings.TrimLeftFunc(c, unicode.IsSpace)
		d = commonPrefix(p, c)
		if agree(p, c, d) {
			return true
		}
	}
	return false
}

// whitespace reports whether the texts agree once the whitespace at each difference is
// skipped (at most maxSpans differences).
func whitespace(p, c string, d int) bool {
	for range maxSpans {
		if !isSpaceAt(p, d) && !isSpaceAt(c, d) {
			return false
		}
		a := d
		for a > 0 && isSpaceAt(p, a-1) {
			a--
		}
		p, c = strings.TrimLeftFunc(p[a:], unicode.IsSpace), strings.TrimLeftFunc(c[a:], unicode.IsSpace)
		d = commonPrefix(p, c)
		if agree(p, c, d) {
			return true
		}
	}
	return false
}

func isSpaceAt(s string, i int) bool {
	if i < 0 || i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return unicode.IsSpace(r)
}

// maxJSONStarts bounds how many enclosing brackets reordered tries.
const maxJSONStarts = 16

// reordered reports whether the difference at d lies in a JSON value that is the same with
// its keys sorted (or its arrays sorted), or in a run of JSON values that holds the same
// values in another order (a tools list rendered one per line).
func reordered(p, c string, d int) (string, bool) {
	starts := openBrackets(p[:d])
	if len(starts) > maxJSONStarts {
		starts = starts[:maxJSONStarts]
	}
	for _, s := range starts {
		vp, ep, okp := decodeValue(p[s:])
		vc, ec, okc := decodeValue(c[s:])
		if okp && okc && s+ep > d && s+ec > d {
			if canonical(vp, false) == canonical(vc, false) {
				return "JSON keys reordered", true
			}
			if canonical(vp, true) == canonical(vc, true) {
				if looksLikeTools(vp) {
					return "tools reordered", true
				}
				return "JSON arrays reordered", true
			}
		}
		sp, sc := decodeRun(p[s:]), decodeRun(c[s:])
		for n := 2; n <= min(len(sp), len(sc)); n++ {
			if slices.Equal(sp[:n], sc[:n]) {
				continue
			}
			a, b := slices.Clone(sp[:n]), slices.Clone(sc[:n])
			slices.Sort(a)
			slices.Sort(b)
			if slices.Equal(a, b) {
				if strings.Contains(a[0], `"name"`) {
					return "tools reordered", true
				}
				return "JSON values reordered", true
			}
		}
	}
	return "", false
}

// openBrackets returns the positions of the '{' and '[' of s still open at its end,
// outermost first. Quotes toggle strings only inside brackets (prose around JSON has
// apostrophes and quotes of its own).
func openBrackets(s string) []int {
	var stack []int
	inString, escaped := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
			}
			continue
		}
		switch ch {
		case '"':
			if len(stack) > 0 {
				inString = true
			}
		case '{', '[':
			stack = append(stack, i)
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
	return stack
}

// decodeValue decodes the JSON value at the start of s and returns it with its length.
func decodeValue(s string) (any, int, bool) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, 0, false
	}
	return v, int(dec.InputOffset()), true
}

// maxRun bounds decodeRun.
const maxRun = 64

// decodeRun decodes consecutive JSON objects or arrays at the start of s (separated by
// whitespace or commas) and returns each in canonical form.
func decodeRun(s string) []string {
	var out []string
	for len(out) < maxRun {
		s = strings.TrimLeft(s, " \t\r\n,")
		if s == "" || (s[0] != '{' && s[0] != '[') {
			break
		}
		v, n, ok := decodeValue(s)
		if !ok {
			break
		}
		out = append(out, canonical(v, false))
		s = s[n:]
	}
	return out
}

// canonical is v as JSON with sorted keys (encoding/json sorts map keys), and with every
// array sorted too when sortArrays.
func canonical(v any, sortArrays bool) string {
	if sortArrays {
		v = sortedArrays(v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func sortedArrays(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = sortedArrays(e)
		}
		return out
	case []any:
		keys := make([]string, len(x))
		for i, e := range x {
			keys[i] = canonical(e, true)
		}
		slices.Sort(keys)
		out := make([]any, len(keys))
		for i, k := range keys {
			out[i] = json.RawMessage(k)
		}
		return out
	}
	return v
}

// looksLikeTools reports an array of objects with a "function" or "name" (a tools list).
func looksLikeTools(v any) bool {
	arr, ok := v.([]any)
	if !ok || len(arr) == 0 {
		return false
	}
	obj, ok := arr[0].(map[string]any)
	if !ok {
		return false
	}
	_, f := obj["function"]
	_, n := obj["name"]
	return f || n
}
