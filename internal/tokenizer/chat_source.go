package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// tojsonName is the name `| tojson` is renamed to in template sources.
// github.com/ardanlabs/jinja looks builtin filters up before the template's
// variables, and its tojson with indent= goes through Go maps (sorted keys,
// HTML-escaped), so a Llama 3.1 tool list would not render as
// transformers renders it. Renaming the filter in the source to a name the
// engine does not know makes it call ours (tojsonFilter) from the variables.
const tojsonName = "stockpot_tojson"

// tagSpan is one {{ ... }} or {% ... %} tag of a template source: the
// offsets of its inside (after the opening delimiter and an optional '-' or
// '+', before the closing one).
type tagSpan struct {
	start, end int
	stmt       bool // {% %}
}

// scanTags finds the expression and statement tags of src, skipping
// comments and {% raw %} blocks (for the source analyses below). Unclosed tags end the scan (the compiler
// reports them).
func scanTags(src string) []tagSpan {
	var tags []tagSpan
	i := 0
	for {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 || i+j+1 >= len(src) {
			return tags
		}
		i += j
		switch src[i+1] {
		case '#':
			k := strings.Index(src[i+2:], "#}")
			if k < 0 {
				return tags
			}
			i += 2 + k + 2
			continue
		case '{', '%':
		default:
			i++
			continue
		}
		stmt := src[i+1] == '%'
		closer := "}}"
		if stmt {
			closer = "%}"
		}
		start := i + 2
		if start < len(src) && (src[start] == '-' || src[start] == '+') {
			start++
		}
		end, ok := tagEnd(src, start, closer)
		if !ok {
			return tags
		}
		inner := end
		if inner > start && (src[inner-1] == '-' || src[inner-1] == '+') {
			inner--
		}
		tags = append(tags, tagSpan{start: start, end: inner, stmt: stmt})
		i = end + 2
		if stmt && strings.TrimSpace(src[start:inner]) == "raw" {
			loc := endrawRE.FindStringIndex(src[i:])
			if loc == nil {
				return tags
			}
			i += loc[1]
		}
	}
}

var endrawRE = regexp.MustCompile(`\{%[-+]?\s*endraw\s*[-+]?%\}`)

// tagEnd finds closer after start outside string literals.
func tagEnd(src string, start int, closer string) (int, bool) {
	var quote byte
	for k := start; k < len(src); k++ {
		c := src[k]
		if quote != 0 {
			if c == '\\' {
				k++
			} else if c == quote {
				quote = 0
			}
			continue
		}
		if c == '\'' || c == '"' {
			quote = c
			continue
		}
		if strings.HasPrefix(src[k:], closer) {
			return k, true
		}
	}
	return 0, false
}

// codeOnly returns the inside of a tag with string literals blanked out
// (quotes kept), so that searches do not match text in strings.
func codeOnly(s string) string {
	b := []byte(s)
	var quote byte
	for k := 0; k < len(b); k++ {
		c := b[k]
		if quote != 0 {
			if c == '\\' && k+1 < len(b) {
				b[k], b[k+1] = ' ', ' '
				k++
			} else if c == quote {
				quote = 0
			} else {
				b[k] = ' '
			}
			continue
		}
		if c == '\'' || c == '"' {
			quote = c
		}
	}
	return string(b)
}

var tojsonFilterRE = regexp.MustCompile(`\|\s*tojson\b`)

// renameTojson renames `| tojson` in the inside of one tag.
func renameTojson(inner string) string {
	locs := tojsonFilterRE.FindAllStringIndex(codeOnly(inner), -1)
	if locs == nil {
		return inner
	}
	var b strings.Builder
	last := 0
	for _, l := range locs {
		w := l[1] - len("tojson")
		b.WriteString(inner[last:w])
		b.WriteString(tojsonName)
		last = w + len("tojson")
	}
	b.WriteString(inner[last:])
	return b.String()
}

// rewriteTemplate prepares a template source for the engine: `| tojson`
// becomes tojsonName, and the whitespace control of Jinja2 as transformers
// configures it (trim_blocks, lstrip_blocks, the - and + markers) is applied
// here, to the text, so that the engine's own version of those rules has
// nothing left to act on. The engine's version looks for the nearest text
// past expression tags: in `{% for %}{{ x }}\n{% endfor %}` it strips the
// newline after {{ x }} that Jinja2 keeps, and in `{{ a }} {{ b }}{# c #}` the
// space between the expressions. What remains of each text has no leading
// or trailing whitespace for those rules to strip: such whitespace is moved
// into an expression ({{ "\n" }}). Comments are dropped. Newlines are
// normalized as Jinja2's lexer does. A source with a
// {% raw %} block, or one that does not scan, only gets the rename.
func rewriteTemplate(src string) string {
	// Jinja2's lexer first turns \r\n and \r into \n and, without
	// keep_trailing_newline, drops one newline at the end of the source.
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	segs, ok := scanSegments(src)
	if !ok {
		return renameAll(src)
	}
	var b strings.Builder
	b.Grow(len(src) + len(src)/8)
	for i, sg := range segs {
		switch sg.kind {
		case segExpr:
			b.WriteString("{{")
			b.WriteString(renameTojson(src[sg.start:sg.end]))
			b.WriteString("}}")
		case segStmt:
			b.WriteString("{%")
			b.WriteString(renameTojson(src[sg.start:sg.end]))
			b.WriteString("%}")
		case segComment:
		case segText:
			writeText(&b, jinja2Text(src, segs, i))
		}
	}
	return b.String()
}

func renameAll(src string) string {
	tags := scanTags(src)
	var b strings.Builder
	last := 0
	for _, t := range tags {
		b.WriteString(src[last:t.start])
		b.WriteString(renameTojson(src[t.start:t.end]))
		last = t.end
	}
	b.WriteString(src[last:])
	return b.String()
}

type segKind int

const (
	segText segKind = iota
	segExpr
	segStmt
	segComment
)

// segment is a run of text or one tag. For tags, start:end is the inside
// without the delimiters and markers; left and right are the markers ('-',
// '+' or 0).
type segment struct {
	kind        segKind
	start, end  int
	left, right byte
}

// scanSegments splits src into text and tags. ok is false for a source
// with {% raw %} or an unclosed tag.
func scanSegments(src string) (segs []segment, ok bool) {
	i, textStart := 0, 0
	for i < len(src)-1 {
		if src[i] != '{' || (src[i+1] != '{' && src[i+1] != '%' && src[i+1] != '#') {
			i++
			continue
		}
		if i > textStart {
			segs = append(segs, segment{kind: segText, start: textStart, end: i})
		}
		sg := segment{}
		closer := "}}"
		switch src[i+1] {
		case '{':
			sg.kind = segExpr
		case '%':
			sg.kind, closer = segStmt, "%}"
		case '#':
			sg.kind, closer = segComment, "#}"
		}
		sg.start = i + 2
		if sg.start < len(src) && (src[sg.start] == '-' || src[sg.start] == '+') {
			sg.left = src[sg.start]
			sg.start++
		}
		var end int
		if sg.kind == segComment {
			k := strings.Index(src[sg.start:], closer)
			if k < 0 {
				return nil, false
			}
			end = sg.start + k
		} else {
			var found bool
			if end, found = tagEnd(src, sg.start, closer); !found {
				return nil, false
			}
		}
		sg.end = end
		if sg.end > sg.start && (src[sg.end-1] == '-' || src[sg.end-1] == '+') {
			sg.right = src[sg.end-1]
			sg.end--
		}
		if sg.kind == segStmt {
			if f := strings.Fields(src[sg.start:sg.end]); len(f) > 0 && f[0] == "raw" {
				return nil, false
			}
		}
		segs = append(segs, sg)
		i = end + 2
		textStart = i
	}
	if textStart < len(src) {
		segs = append(segs, segment{kind: segText, start: textStart, end: len(src)})
	}
	return segs, true
}

// jinja2Text is what Jinja2 (trim_blocks, lstrip_blocks) keeps of the text
// segs[i], given the tags around it.
func jinja2Text(src string, segs []segment, i int) string {
	t := src[segs[i].start:segs[i].end]
	lo, hi := 0, len(t)
	if i > 0 {
		prev := segs[i-1]
		switch {
		case prev.right == '-':
			lo = len(t) - len(strings.TrimLeft(t, " \t\n\r\f\v"))
		case prev.right == '+' || prev.kind == segExpr:
		case strings.HasPrefix(t, "\n"):
			lo = 1 // trim_blocks
		}
	}
	if i+1 < len(segs) {
		next := segs[i+1]
		switch {
		case next.left == '-':
			hi = len(strings.TrimRight(t, " \t\n\r\f\v"))
		case next.left == '+' || next.kind == segExpr:
		default: // lstrip_blocks: only blanks between the line start and the tag
			k := len(strings.TrimRight(t, " \t"))
			if k > 0 && t[k-1] == '\n' || k == 0 && i == 0 {
				hi = k
			}
		}
	}
	if lo >= hi {
		return ""
	}
	return t[lo:hi]
}

// writeText writes text t so that the engine's whitespace rules cannot
// change it: leading and trailing whitespace goes into {{ "..." }}.
func writeText(b *strings.Builder, t string) {
	const ws = " \t\n"
	core := strings.TrimLeft(t, ws)
	lead := t[:len(t)-len(core)]
	core = strings.TrimRight(core, ws)
	trail := t[len(lead)+len(core):]
	writeWS(b, lead)
	if strings.HasSuffix(core, "{") {
		// Followed by a tag or, once comments are dropped, by text that
		// starts with { or %: "{" + "{%" would open an expression.
		b.WriteString(core[:len(core)-1])
		b.WriteString(`{{ "{" }}`)
	} else {
		b.WriteString(core)
	}
	writeWS(b, trail)
}

func writeWS(b *strings.Builder, ws string) {
	if ws == "" {
		return
	}
	b.WriteString(`{{ "`)
	for _, c := range []byte(ws) {
		switch c {
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteString(`" }}`)
}

var (
	// {% for x in message.content %} / message['content'] / a variable.
	forInRE = regexp.MustCompile(`^\s*for\s+[\w\s,()]+?\s+in\s+(.+?)\s*(?:\bif\b.*|recursive\s*)?$`)
	// {% set name = ... %}
	setRE = regexp.MustCompile(`^\s*set\s+(\w+)\s*=\s*(.+?)\s*$`)
	// A content access: X.content or X['content'] / X["content"].
	contentRE = regexp.MustCompile(`^\(?\s*\w+(?:\.content|\[\s*['"]content['"]\s*\])\s*\)?(?:\s*\|\s*\w+(?:\(.*\))?)*$`)
)

// DetectContentFormat is vLLM's _detect_content_format on a template
// source: ContentParts when the template loops over a message's content
// ({% for part in message['content'] %}, or over a variable set from it),
// else ContentString.
func DetectContentFormat(src string) ContentFormat {
	fromContent := map[string]bool{}
	tags := scanTags(src)
	for _, t := range tags {
		if !t.stmt {
			continue
		}
		code := src[t.start:t.end] // key names are string literals: keep them
		if m := setRE.FindStringSubmatch(code); m != nil && contentRE.MatchString(m[2]) {
			fromContent[m[1]] = true
		}
	}
	for _, t := range tags {
		if !t.stmt {
			continue
		}
		code := src[t.start:t.end]
		m := forInRE.FindStringSubmatch(code)
		if m == nil {
			continue
		}
		iter := strings.TrimSpace(m[1])
		if contentRE.MatchString(iter) || fromContent[iter] {
			return ContentParts
		}
	}
	return ContentString
}

// argumentsRE is an access of the OpenAI shape's function arguments:
// x.function.arguments, x['function']['arguments'] (and mixes).
var argumentsRE = regexp.MustCompile(`function(?:\s*\[\s*['"]|\.)?['"]?\s*\]?\s*(?:\.arguments\b|\[\s*['"]arguments['"]\s*\])`)

// DetectStringArguments reports whether the template concatenates tool-call
// arguments with + as they are (tool_call.arguments + "..." or "..." +
// tool_call.function.arguments at the end of an expression), which only works when
// they are strings: Jinja2 fails on str + dict. Such templates (DeepSeek-R1
// distills, functionary v3.2) were written for the JSON text of the OpenAI
// wire format, so they get it. Arguments passed through a filter
// (| tojson) or tested (is string) are not concatenation.
func DetectStringArguments(src string) bool {
	for _, t := range scanTags(src) {
		code := src[t.start:t.end] // key names are string literals: keep them
		for _, loc := range argumentsRE.FindAllStringIndex(code, -1) {
			after := strings.TrimSpace(code[loc[1]:])
			before := strings.TrimSpace(code[:loc[0]])
			// Walk back over the object the access is on (tool['function']).
			before = strings.TrimRightFunc(before, func(r rune) bool {
				return r == '_' || r == '.' || r == '[' || r == ']' || r == '\'' || r == '"' || r == ' ' ||
					r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
			})
			switch {
			case strings.HasPrefix(after, "+"):
				return true
			case strings.HasSuffix(before, "+") && (after == "" || strings.HasPrefix(after, ")")):
				return true
			}
		}
	}
	return false
}

// Strftime formats t as Python's time.strftime does in the C locale, for
// the directives chat templates use (%Y %y %m %d %-d %e %b %B %a %A %H %I
// %p %M %S %j %%). Other directives are kept as written.
func Strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		d := format[i]
		if d == '-' && i+1 < len(format) && format[i+1] == 'd' {
			i++
			fmt.Fprintf(&b, "%d", t.Day())
			continue
		}
		switch d {
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'b':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(d)
		}
	}
	return b.String()
}
