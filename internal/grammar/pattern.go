package grammar

import (
	"fmt"
	"regexp/syntax"
	"unicode"
)

// JSON schema "pattern": a regular expression the string's value must contain (it is not
// anchored unless it says ^ or $). The expression is parsed with Go's regexp/syntax (the
// dialect Go validators use) and turned into a grammar over the string's JSON text: a
// character the pattern allows is written unescaped where JSON allows it, and as its one
// escape otherwise (\" \\ \n \u001f ...).
//
// Supported: literals, classes, ., concatenation, alternation, groups, * + ? {m,n}, (?i), and
// ^ $ \A \z at the very start and end. Unsupported (an *UnsupportedError): anchors elsewhere,
// \b \B, multi-line anchors, and repeating a group that can match the empty string. Pattern
// together with minLength/maxLength is unsupported (the counts would have to cross the
// pattern).

// maxPatternRepeat bounds {m,n} counts (regexp/syntax already refuses more than 1000).
const maxPatternRepeat = 1000

type patternError string

func (e patternError) Error() string { return string(e) }

// patternNode returns the grammar of a JSON string's contents (quotes excluded) whose value
// matches pattern.
func patternNode(pattern string) (Node, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return Node{}, patternError(fmt.Sprintf("pattern %q does not parse: %v", pattern, err))
	}
	return patternTop(re)
}

// anyText is any string contents.
func anyText() Node { return Repeat(jsonChar(), 0, -1) }

func patternTop(re *syntax.Regexp) (Node, error) {
	if re.Op == syntax.OpAlternate {
		var alts []Node
		for _, s := range re.Sub {
			n, err := patternTop(s)
			if err != nil {
				return Node{}, err
			}
			alts = append(alts, n)
		}
		return Alt(alts...), nil
	}
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	start, end := false, false
	if len(subs) > 0 && subs[0].Op == syntax.OpBeginText {
		start, subs = true, subs[1:]
	}
	if len(subs) > 0 && subs[len(subs)-1].Op == syntax.OpEndText {
		end, subs = true, subs[:len(subs)-1]
	}
	var seq []Node
	if !start {
		seq = append(seq, anyText())
	}
	for _, s := range subs {
		n, err := patternNodeOf(s)
		if err != nil {
			return Node{}, err
		}
		seq = append(seq, n)
	}
	if !end {
		seq = append(seq, anyText())
	}
	return Seq(seq...), nil
}

func patternNodeOf(re *syntax.Regexp) (Node, error) {
	switch re.Op {
	case syntax.OpEmptyMatch:
		return Seq(), nil
	case syntax.OpNoMatch:
		return Node{}, nil
	case syntax.OpLiteral:
		var seq []Node
		for _, r := range re.Rune {
			rs := []runeRange{{r, r}}
			if re.Flags&syntax.FoldCase != 0 {
				for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
					rs = append(rs, runeRange{f, f})
				}
			}
			seq = append(seq, jsonCharIn(rs))
		}
		return Seq(seq...), nil
	case syntax.OpCharClass:
		var rs []runeRange
		for i := 0; i+1 < len(re.Rune); i += 2 {
			rs = append(rs, runeRange{re.Rune[i], re.Rune[i+1]})
		}
		return jsonCharIn(rs), nil
	case syntax.OpAnyCharNotNL:
		return jsonCharIn(complement([]runeRange{{'\n', '\n'}})), nil
	case syntax.OpAnyChar:
		return jsonCharIn(complement(nil)), nil
	case syntax.OpCapture:
		return patternNodeOf(re.Sub[0])
	case syntax.OpConcat, syntax.OpAlternate:
		var ns []Node
		for _, s := range re.Sub {
			n, err := patternNodeOf(s)
			if err != nil {
				return Node{}, err
			}
			ns = append(ns, n)
		}
		if re.Op == syntax.OpConcat {
			return Seq(ns...), nil
		}
		return Alt(ns...), nil
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		item, err := patternNodeOf(re.Sub[0])
		if err != nil {
			return Node{}, err
		}
		lo, hi := 0, -1
		switch re.Op {
		case syntax.OpPlus:
			lo = 1
		case syntax.OpQuest:
			return Optional(item), nil
		case syntax.OpRepeat:
			lo, hi = re.Min, re.Max
			if lo > maxPatternRepeat || hi > maxPatternRepeat {
				return Node{}, patternError("a pattern repeat count above 1000")
			}
		}
		if regexNullable(re.Sub[0]) {
			return Node{}, patternError("a pattern that repeats a group which can match the empty string")
		}
		return Repeat(item, lo, hi), nil
	}
	return Node{}, patternError(fmt.Sprintf("pattern operator %s (anchors inside the pattern, \\b, multi-line)", opName(re)))
}

func opName(re *syntax.Regexp) string {
	switch re.Op {
	case syntax.OpBeginLine, syntax.OpEndLine:
		return "multi-line ^/$"
	case syntax.OpBeginText, syntax.OpEndText:
		return "^/$ not at the ends"
	case syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return `\b`
	}
	return re.String()
}

func regexNullable(re *syntax.Regexp) bool {
	switch re.Op {
	case syntax.OpEmptyMatch, syntax.OpStar, syntax.OpQuest, syntax.OpBeginText, syntax.OpEndText,
		syntax.OpBeginLine, syntax.OpEndLine, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return true
	case syntax.OpCapture:
		return regexNullable(re.Sub[0])
	case syntax.OpRepeat:
		return re.Min == 0 || regexNullable(re.Sub[0])
	case syntax.OpPlus:
		return regexNullable(re.Sub[0])
	case syntax.OpConcat:
		for _, s := range re.Sub {
			if !regexNullable(s) {
				return false
			}
		}
		return true
	case syntax.OpAlternate:
		for _, s := range re.Sub {
			if regexNullable(s) {
				return true
			}
		}
		return false
	}
	return false
}

// jsonCharIn is one character of a JSON string's text whose value is in rs: unescaped where
// JSON allows, else its escape.
func jsonCharIn(rs []runeRange) Node {
	rs = normalize(rs)
	special := []runeRange{{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}
	plain := intersect(rs, complement(special))
	var alts []Node
	if len(plain) > 0 {
		alts = append(alts, charIn(plain))
	}
	for _, r := range rs {
		for c := r.lo; c <= r.hi && c <= '\\'; c++ {
			if c < 0x20 || c == '"' || c == '\\' {
				alts = append(alts, Literal(jsonEscape(c)))
			}
		}
	}
	return Alt(alts...)
}

func jsonEscape(c rune) string {
	switch c {
	case '"':
		return `\"`
	case '\\':
		return `\\`
	case '\n':
		return `\n`
	case '\t':
		return `\t`
	case '\r':
		return `\r`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	}
	return fmt.Sprintf(`\u%04x`, c)
}

// intersect returns the scalar values in both normalized range lists.
func intersect(a, b []runeRange) []runeRange {
	var out []runeRange
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if lo <= hi {
			out = append(out, runeRange{lo, hi})
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}
