package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// The pre-tokenizers as they were before they streamed over bytes: each splitter refines a
// list of codepoint ranges of the whole decoded text, so every stage holds every segment
// (memory in proportion to the text, and no early stop). Kept unchanged, a line-by-line
// reading of llama.cpp's scanners, as the oracle the streaming scanners of pretokenize.go
// are checked against (TestWordsMatchReference, FuzzWords).

// refSplitter refines segments of cpts. Segments are half-open [lo, hi) ranges.
type refSplitter func(cpts []rune, segs []refSpan) []refSpan

type refSpan struct{ lo, hi int }

func (p preType) refSplitters() []refSplitter {
	switch p {
	case preGPT2:
		return []refSplitter{refSplitGPT2}
	case preLlama3:
		return []refSplitter{refSplitLlama3}
	case preQwen2:
		return []refSplitter{refSplitQwen2}
	case preQwen35:
		return []refSplitter{refSplitQwen35}
	case preSmolLM:
		return []refSplitter{refSplitEach(isNumberCollapsed), refSplitGPT2}
	case preKimiK2:
		return []refSplitter{refSplitKimiK2}
	}
	// "[\p{P}\$\+<=>\^~\|]+", the GPT-2 regex, "\p{N}+", "[0-9][0-9][0-9]".
	return []refSplitter{refSplitRuns(isDefaultPunct), refSplitGPT2, refSplitRuns(isNumberCollapsed), refSplitASCIIDigitTriples}
}

// refPreSplit applies the family's splitters to cpts and returns the words.
func (p preType) refPreSplit(cpts []rune) []refSpan {
	segs := []refSpan{{0, len(cpts)}}
	if len(cpts) == 0 {
		return nil
	}
	for _, s := range p.refSplitters() {
		segs = s(cpts, segs)
	}
	return segs
}

// refSplitRuns is the std::regex split for "[class]+": maximal runs of class
// members and the stretches between them all become segments.
func refSplitRuns(in func(rune) bool) refSplitter {
	return func(cpts []rune, segs []refSpan) []refSpan {
		var out []refSpan
		for _, s := range segs {
			start := s.lo
			for i := s.lo; i < s.hi; {
				if !in(cpts[i]) {
					i++
					continue
				}
				j := i
				for j < s.hi && in(cpts[j]) {
					j++
				}
				if i > start {
					out = append(out, refSpan{start, i})
				}
				out = append(out, refSpan{i, j})
				start, i = j, j
			}
			if start < s.hi {
				out = append(out, refSpan{start, s.hi})
			}
		}
		return out
	}
}

// refSplitEach is the std::regex split for a single-codepoint class.
func refSplitEach(in func(rune) bool) refSplitter {
	return func(cpts []rune, segs []refSpan) []refSpan {
		var out []refSpan
		for _, s := range segs {
			start := s.lo
			for i := s.lo; i < s.hi; i++ {
				if in(cpts[i]) {
					if i > start {
						out = append(out, refSpan{start, i})
					}
					out = append(out, refSpan{i, i + 1})
					start = i + 1
				}
			}
			if start < s.hi {
				out = append(out, refSpan{start, s.hi})
			}
		}
		return out
	}
}

// refSplitASCIIDigitTriples is the std::regex split for "[0-9][0-9][0-9]".
func refSplitASCIIDigitTriples(cpts []rune, segs []refSpan) []refSpan {
	digit := func(r rune) bool { return r >= '0' && r <= '9' }
	var out []refSpan
	for _, s := range segs {
		start := s.lo
		for i := s.lo; i+3 <= s.hi; {
			if digit(cpts[i]) && digit(cpts[i+1]) && digit(cpts[i+2]) {
				if i > start {
					out = append(out, refSpan{start, i})
				}
				out = append(out, refSpan{i, i + 3})
				i += 3
				start = i
				continue
			}
			i++
		}
		if start < s.hi {
			out = append(out, refSpan{start, s.hi})
		}
	}
	return out
}

// refScanner holds one segment being split. flags and cpt read as zero and
// refOutOfRange past the segment's end, which is how the regex alternatives
// below see the segment boundary.
type refScanner struct {
	cpts   []rune
	lo, hi int
	prev   int
	out    []refSpan
}

const refOutOfRange rune = -1

func (s *refScanner) cpt(i int) rune {
	if i >= s.lo && i < s.hi {
		return s.cpts[i]
	}
	return refOutOfRange
}

func (s *refScanner) flags(i int) uint16 {
	if i >= s.lo && i < s.hi {
		return cptFlags(s.cpts[i])
	}
	return 0
}

// emit ends the current word at end and returns its length.
func (s *refScanner) emit(end int) int {
	n := end - s.prev
	if n > 0 {
		s.out = append(s.out, refSpan{s.prev, end})
	}
	s.prev = end
	return n
}

const refLnw = flagLetter | flagNumber | flagWhitespace

func refAsciiLower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// contraction returns the length (2 or 3) of a 's 't 're 've 'm 'll 'd at
// pos, or 0. fold makes it case-insensitive (llama3 and qwen2).
func (s *refScanner) contraction(pos int, fold bool) int {
	if s.cpt(pos) != '\'' || pos+1 >= s.hi {
		return 0
	}
	low := func(r rune) rune {
		if fold {
			return refAsciiLower(r)
		}
		return r
	}
	c1 := low(s.cpt(pos + 1))
	switch c1 {
	case 's', 't', 'm', 'd':
		return 2
	}
	if pos+2 < s.hi {
		c2 := low(s.cpt(pos + 2))
		if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
			return 3
		}
	}
	return 0
}

// refSplitGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func refSplitGPT2(cpts []rune, segs []refSpan) []refSpan {
	var out []refSpan
	for _, seg := range segs {
		s := refScanner{cpts: cpts, lo: seg.lo, hi: seg.hi, prev: seg.lo, out: out}
		for pos := s.lo; pos < s.hi; {
			c := s.cpt(pos)
			f := s.flags(pos)
			if n := s.contraction(pos, false); n > 0 {
				pos += s.emit(pos + n)
				continue
			}
			f2 := f
			if c == ' ' {
				f2 = s.flags(pos + 1)
			}
			if f2&flagLetter != 0 || f2&flagNumber != 0 {
				want := f2 & (flagLetter | flagNumber)
				if c == ' ' {
					pos++
				}
				for s.flags(pos)&want != 0 {
					pos++
				}
				s.emit(pos)
				continue
			}
			if f2&refLnw == 0 && f2 != 0 {
				if c == ' ' {
					pos++
				}
				for g := s.flags(pos); g&refLnw == 0 && g != 0; g = s.flags(pos) {
					pos++
				}
				s.emit(pos)
				continue
			}
			pos = s.whitespace(pos, false)
		}
		out = s.out
	}
	return out
}

// whitespace handles the trailing alternatives shared by all families:
// [\s*[\r\n]+ when crlf,] \s+(?!\S), \s+, and the no-match single step.
func (s *refScanner) whitespace(pos int, crlf bool) int {
	n := 0
	lastCRLF := 0
	for s.flags(pos+n)&flagWhitespace != 0 {
		if c := s.cpt(pos + n); c == '\r' || c == '\n' {
			lastCRLF = pos + n + 1
		}
		n++
	}
	switch {
	case crlf && lastCRLF > 0:
		pos = lastCRLF
	case n > 1 && s.cpt(pos+n) != refOutOfRange:
		pos += n - 1
	case n > 0:
		pos += n
	default:
		pos++
	}
	s.emit(pos)
	return pos
}

// refSplitLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func refSplitLlama3(cpts []rune, segs []refSpan) []refSpan {
	return refSplitModern(cpts, segs, 3, flagLetter)
}

// refSplitQwen2 is refSplitLlama3 with \p{N} taken one digit at a time.
func refSplitQwen2(cpts []rune, segs []refSpan) []refSpan {
	return refSplitModern(cpts, segs, 1, flagLetter)
}

// refSplitQwen35: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// that is refSplitQwen2 where a combining mark counts as a letter, so "é" spelt e + U+0301
// stays one word.
func refSplitQwen35(cpts []rune, segs []refSpan) []refSpan {
	return refSplitModern(cpts, segs, 1, flagLetter|flagMark)
}

// refSplitModern is the llama3 / qwen2 family of scanners: maxDigits digits per number word,
// letters the flags a letter run is made of.
func refSplitModern(cpts []rune, segs []refSpan, maxDigits int, letters uint16) []refSpan {
	other := letters | flagNumber | flagWhitespace // what ' ?[^\s\p{L}(\p{M})\p{N}]+' stops at
	var out []refSpan
	for _, seg := range segs {
		s := refScanner{cpts: cpts, lo: seg.lo, hi: seg.hi, prev: seg.lo, out: out}
		for pos := s.lo; pos < s.hi; {
			c := s.cpt(pos)
			f := s.flags(pos)
			if n := s.contraction(pos, true); n > 0 {
				pos += s.emit(pos + n)
				continue
			}
			// [^\r\n\p{L}\p{N}]?\p{L}+ (qwen35: [\p{L}\p{M}]+)
			if !(c == '\r' || c == '\n' || f&flagNumber != 0) {
				if f&letters != 0 || s.flags(pos+1)&letters != 0 {
					pos++
					for s.flags(pos)&letters != 0 {
						pos++
					}
					s.emit(pos)
					continue
				}
			}
			// \p{N}{1,maxDigits}
			if f&flagNumber != 0 {
				ini := pos
				for s.flags(pos)&flagNumber != 0 {
					pos++
					if pos-ini >= maxDigits {
						s.emit(pos)
						ini = pos
					}
				}
				s.emit(pos)
				continue
			}
			// ' ?[^\s\p{L}\p{N}]+[\r\n]*'. llama.cpp tests the flags of the
			// first codepoint (not of the one after the space) for "is
			// anything"; we keep that.
			f2 := f
			if c == ' ' {
				f2 = s.flags(pos + 1)
			}
			if f2&other == 0 && f != 0 {
				if c == ' ' {
					pos++
				}
				for g := s.flags(pos); g&other == 0 && g != 0; g = s.flags(pos) {
					pos++
				}
				for c2 := s.cpt(pos); c2 == '\r' || c2 == '\n'; c2 = s.cpt(pos) {
					pos++
				}
				s.emit(pos)
				continue
			}
			pos = s.whitespace(pos, true)
		}
		out = s.out
	}
	return out
}

// refSplitKimiK2 is the Kimi K2 tokenizer's split (tokenization_kimi.py):
//
//	[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// as llama.cpp runs it (its custom kimi_k2 refScanner, which the regex "\p{Han}+" selects):
// a run of Han ideographs is a word; otherwise a word is an optional leading character
// (not CR, LF, a letter or a number) and a run of non-Han letters (the case classes are
// not told apart), then an optional case-insensitive contraction; the number, punctuation
// and whitespace alternatives are llama3's. Marks (\p{M}) end a letter run, as in
// llama.cpp's refScanner. There is no contraction alternative of its own: "'s" after a
// non-letter falls to the punctuation alternative.
func refSplitKimiK2(cpts []rune, segs []refSpan) []refSpan {
	var out []refSpan
	letter := func(s *refScanner, i int) bool { return s.flags(i)&flagLetter != 0 && !isHan(s.cpt(i)) }
	for _, seg := range segs {
		s := refScanner{cpts: cpts, lo: seg.lo, hi: seg.hi, prev: seg.lo, out: out}
		for pos := s.lo; pos < s.hi; {
			c := s.cpt(pos)
			f := s.flags(pos)
			if isHan(c) {
				for isHan(s.cpt(pos)) {
					pos++
				}
				s.emit(pos)
				continue
			}
			lead := !(c == '\r' || c == '\n' || f&(flagLetter|flagNumber) != 0)
			if letter(&s, pos) || (lead && letter(&s, pos+1)) {
				if lead {
					pos++
				}
				for letter(&s, pos) {
					pos++
				}
				pos += s.contraction(pos, true)
				s.emit(pos)
				continue
			}
			if f&flagNumber != 0 {
				ini := pos
				for s.flags(pos)&flagNumber != 0 {
					pos++
					if pos-ini >= 3 {
						s.emit(pos)
						ini = pos
					}
				}
				s.emit(pos)
				continue
			}
			f2 := f
			if c == ' ' {
				f2 = s.flags(pos + 1)
			}
			if f2&refLnw == 0 && f2 != 0 {
				if c == ' ' {
					pos++
				}
				for g := s.flags(pos); g&refLnw == 0 && g != 0; g = s.flags(pos) {
					pos++
				}
				for c2 := s.cpt(pos); c2 == '\r' || c2 == '\n'; c2 = s.cpt(pos) {
					pos++
				}
				s.emit(pos)
				continue
			}
			pos = s.whitespace(pos, true)
		}
		out = s.out
	}
	return out
}

// wordTexts returns the words p.words finds in s.
func wordTexts(p preType, s string) []string {
	var out []string
	p.words(s, func(lo, hi int) bool {
		out = append(out, s[lo:hi])
		return true
	})
	return out
}

// refWordTexts returns the words the reference splitters find in s, as byte strings of s.
func refWordTexts(p preType, s string) []string {
	cpts := decodeCodepoints(s)
	offs := make([]int, len(cpts)+1) // byte offset of each codepoint
	for i, off := 0, 0; i < len(cpts); i++ {
		_, n := decodeOne(s, off)
		off += n
		offs[i+1] = off
	}
	var out []string
	for _, w := range p.refPreSplit(cpts) {
		out = append(out, s[offs[w.lo]:offs[w.hi]])
	}
	return out
}

var allPreTypes = []preType{preDefault, preGPT2, preLlama3, preQwen2, preQwen35, preSmolLM, preKimiK2}

// checkWords compares the streaming splitters with the reference on s, and that a caller
// stopping after k words gets exactly the first k.
func checkWords(t *testing.T, s string) {
	t.Helper()
	for _, p := range allPreTypes {
		got, want := wordTexts(p, s), refWordTexts(p, s)
		if !slices.Equal(got, want) {
			t.Fatalf("pre %d, %q:\nhave %q\nwant %q", p, s, got, want)
		}
		if strings.Join(got, "") != s {
			t.Fatalf("pre %d, %q: the words %q do not cover the text", p, s, got)
		}
		for _, k := range []int{1, max(1, len(want)/2)} {
			var first []string
			p.words(s, func(lo, hi int) bool {
				first = append(first, s[lo:hi])
				return len(first) < k
			})
			if len(want) > 0 && !slices.Equal(first, want[:k]) {
				t.Fatalf("pre %d, %q, stop after %d: have %q, want %q", p, s, k, first, want[:k])
			}
		}
	}
}

func TestWordsMatchReference(t *testing.T) {
	texts := append(strings.Split(trainCorpus, "\n"), "", " ", "  ", "a", "\n", "x  ", "  x", " \n ",
		"I'M 12345 ok  \n\n x", "it's  a\tb 42", "'s'S'll'LL're've'd'm't", "'", "'l", "'r", "'\u00e9",
		"a12 日本", "cafe\u0301 x", "\u0301a 12", "x 42", "1234567 12 3", "١٢٣٤ ²³ Ⅻ", "中文abc中文", " 你好world",
		"(中)[abc]{x}", "a\r\nb\n\n c", "   spaces\t\ttabs  ", "#中#a#1", "𝒜𝒷𝒸 🍲中a", "$+<=>^~|!!", "\u00a0\u3000x\u2028",
		"\xff\xfe\xc3 \xed\xa0\x80 \xc0\x80 \xf4\x90\x80\x80 \xf7\xbf\xbf\xbf", "\xe4\xb8", "a\xe4\xb8", "\xe4\xb8 ",
		// Overlong forms decode to ASCII: a two-byte newline, quote, space and digits.
		"\xc0\x8a", "x\xc0\xa7s", "\xc0\xa7\xc0\xecl", "\xc0\xa0x", "\xc0\xa0\xc0\xa0y", "\xc0\xb1\xc0\xb2\xc0\xb3\xc0\xb4", "!\xc0\x8d\xc0\x8a")
	for _, sh := range []string{" ", "a", "7", "\n", "!", "中", "a 1!\n\t中'", "\xff\xc3", "\r\n", " !", "'s"} {
		texts = append(texts, strings.Repeat(sh, 50), strings.Repeat(sh, 51)+"x", "x"+strings.Repeat(sh, 3))
	}
	for _, s := range texts {
		checkWords(t, s)
	}
}

func FuzzWords(f *testing.F) {
	for _, s := range strings.Split(trainCorpus, "\n") {
		f.Add(s)
	}
	f.Add("\xff\xfe\xc3 \xed\xa0\x80 \xc0\x80 \xf4\x90\x80\x80 \xf7\xbf\xbf\xbf")
	f.Add("I'M 12345 ok  \n\n x中文abc\u0301 ١٢٣")
	f.Fuzz(func(t *testing.T, s string) { checkWords(t, s) })
}
