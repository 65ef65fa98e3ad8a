package tokenizer

// Pre-tokenizers split text into words before byte-level BPE merges run
// inside each word. llama.cpp expresses them as regexes but runs the common
// ones as hand-written scanners (unicode.cpp), because std::regex has no
// Unicode classes and no lookahead; the rest run through std::regex over a
// "collapsed" text where each non-ASCII codepoint becomes a byte naming its
// category. We write every supported split as a scanner over codepoints
// with the same results, which Go's regexp could not give either (it lacks
// `\s+(?!\S)`).
//
// A splitter refines a list of segments; segments never merge, so each
// regex in a chain only sees the pieces the previous one produced.

// preType names a pre-tokenizer family; see preTypeFor.
type preType int

const (
	preDefault preType = iota // llama.cpp's LLAMA_VOCAB_PRE_TYPE_DEFAULT
	preGPT2
	preLlama3
	preQwen2
	preQwen35 // preQwen2 with combining marks (\p{M}) inside letter runs
	preSmolLM
	preKimiK2 // Kimi K2 / Kimi-Linear: Han runs apart, letter words with a trailing contraction
)

// splitter refines segments of cpts. Segments are half-open [lo, hi) ranges.
type splitter func(cpts []rune, segs []span) []span

type span struct{ lo, hi int }

// preTypeFor maps tokenizer.ggml.pre to a family and the vocabulary flags
// llama.cpp sets with it. ok is false for a pre-tokenizer we do not support.
func preTypeFor(pre string) (pt preType, ignoreMerges, addBOS, cleanSpaces, ok bool) {
	switch pre {
	case "", "default":
		return preDefault, false, false, true, true
	case "llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral":
		return preLlama3, true, true, true, true
	case "gpt-2", "phi-2", "mpt", "olmo":
		return preGPT2, false, false, true, true
	case "qwen2", "deepseek-r1-qwen":
		return preQwen2, false, false, false, true
	case "qwen35":
		return preQwen35, false, false, false, true
	case "smollm":
		return preSmolLM, false, false, false, true
	case "kimi-k2":
		return preKimiK2, false, false, false, true
	case "starcoder", "refact", "command-r", "codeshell", "exaone":
		// Same regexes as smollm; llama.cpp keeps clean_spaces on for
		// starcoder, refact and codeshell only.
		clean := pre == "starcoder" || pre == "refact" || pre == "codeshell"
		return preSmolLM, false, false, clean, true
	}
	return 0, false, false, false, false
}

func (p preType) splitters() []splitter {
	switch p {
	case preGPT2:
		return []splitter{splitGPT2}
	case preLlama3:
		return []splitter{splitLlama3}
	case preQwen2:
		return []splitter{splitQwen2}
	case preQwen35:
		return []splitter{splitQwen35}
	case preSmolLM:
		return []splitter{splitEach(isNumberCollapsed), splitGPT2}
	case preKimiK2:
		return []splitter{splitKimiK2}
	}
	// "[\p{P}\$\+<=>\^~\|]+", the GPT-2 regex, "\p{N}+", "[0-9][0-9][0-9]".
	return []splitter{splitRuns(isDefaultPunct), splitGPT2, splitRuns(isNumberCollapsed), splitASCIIDigitTriples}
}

// preSplit applies the family's splitters to cpts and returns the words.
func (p preType) preSplit(cpts []rune) []span {
	segs := []span{{0, len(cpts)}}
	if len(cpts) == 0 {
		return nil
	}
	for _, s := range p.splitters() {
		segs = s(cpts, segs)
	}
	return segs
}

// isNumberCollapsed is \p{N} as llama.cpp's collapsed std::regex sees it:
// ASCII digits, or a non-ASCII non-whitespace codepoint of category N.
func isNumberCollapsed(r rune) bool {
	if r < 0x80 {
		return r >= '0' && r <= '9'
	}
	f := cptFlags(r)
	return f&flagWhitespace == 0 && f&flagCategories == flagNumber
}

// isDefaultPunct is [\p{P}\$\+<=>\^~\|] over the collapsed text.
func isDefaultPunct(r rune) bool {
	if r < 0x80 {
		switch r {
		case '$', '+', '<', '=', '>', '^', '~', '|':
			return true
		}
		return asciiFlags[r] == flagPunctuation
	}
	f := cptFlags(r)
	return f&flagWhitespace == 0 && f&flagCategories == flagPunctuation
}

// splitRuns is the std::regex split for "[class]+": maximal runs of class
// members and the stretches between them all become segments.
func splitRuns(in func(rune) bool) splitter {
	return func(cpts []rune, segs []span) []span {
		var out []span
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
					out = append(out, span{start, i})
				}
				out = append(out, span{i, j})
				start, i = j, j
			}
			if start < s.hi {
				out = append(out, span{start, s.hi})
			}
		}
		return out
	}
}

// splitEach is the std::regex split for a single-codepoint class.
func splitEach(in func(rune) bool) splitter {
	return func(cpts []rune, segs []span) []span {
		var out []span
		for _, s := range segs {
			start := s.lo
			for i := s.lo; i < s.hi; i++ {
				if in(cpts[i]) {
					if i > start {
						out = append(out, span{start, i})
					}
					out = append(out, span{i, i + 1})
					start = i + 1
				}
			}
			if start < s.hi {
				out = append(out, span{start, s.hi})
			}
		}
		return out
	}
}

// splitASCIIDigitTriples is the std::regex split for "[0-9][0-9][0-9]".
func splitASCIIDigitTriples(cpts []rune, segs []span) []span {
	digit := func(r rune) bool { return r >= '0' && r <= '9' }
	var out []span
	for _, s := range segs {
		start := s.lo
		for i := s.lo; i+3 <= s.hi; {
			if digit(cpts[i]) && digit(cpts[i+1]) && digit(cpts[i+2]) {
				if i > start {
					out = append(out, span{start, i})
				}
				out = append(out, span{i, i + 3})
				i += 3
				start = i
				continue
			}
			i++
		}
		if start < s.hi {
			out = append(out, span{start, s.hi})
		}
	}
	return out
}

// scanner holds one segment being split. flags and cpt read as zero and
// outOfRange past the segment's end, which is how the regex alternatives
// below see the segment boundary.
type scanner struct {
	cpts   []rune
	lo, hi int
	prev   int
	out    []span
}

const outOfRange rune = -1

func (s *scanner) cpt(i int) rune {
	if i >= s.lo && i < s.hi {
		return s.cpts[i]
	}
	return outOfRange
}

func (s *scanner) flags(i int) uint16 {
	if i >= s.lo && i < s.hi {
		return cptFlags(s.cpts[i])
	}
	return 0
}

// emit ends the current word at end and returns its length.
func (s *scanner) emit(end int) int {
	n := end - s.prev
	if n > 0 {
		s.out = append(s.out, span{s.prev, end})
	}
	s.prev = end
	return n
}

const lnw = flagLetter | flagNumber | flagWhitespace

func asciiLower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// contraction returns the length (2 or 3) of a 's 't 're 've 'm 'll 'd at
// pos, or 0. fold makes it case-insensitive (llama3 and qwen2).
func (s *scanner) contraction(pos int, fold bool) int {
	if s.cpt(pos) != '\'' || pos+1 >= s.hi {
		return 0
	}
	low := func(r rune) rune {
		if fold {
			return asciiLower(r)
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

// splitGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(cpts []rune, segs []span) []span {
	var out []span
	for _, seg := range segs {
		s := scanner{cpts: cpts, lo: seg.lo, hi: seg.hi, prev: seg.lo, out: out}
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
			if f2&lnw == 0 && f2 != 0 {
				if c == ' ' {
					pos++
				}
				for g := s.flags(pos); g&lnw == 0 && g != 0; g = s.flags(pos) {
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
func (s *scanner) whitespace(pos int, crlf bool) int {
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
	case n > 1 && s.cpt(pos+n) != outOfRange:
		pos += n - 1
	case n > 0:
		pos += n
	default:
		pos++
	}
	s.emit(pos)
	return pos
}

// splitLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitLlama3(cpts []rune, segs []span) []span { return splitModern(cpts, segs, 3, flagLetter) }

// splitQwen2 is splitLlama3 with \p{N} taken one digit at a time.
func splitQwen2(cpts []rune, segs []span) []span { return splitModern(cpts, segs, 1, flagLetter) }

// splitQwen35: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// that is splitQwen2 where a combining mark counts as a letter, so "é" spelt e + U+0301
// stays one word.
func splitQwen35(cpts []rune, segs []span) []span {
	return splitModern(cpts, segs, 1, flagLetter|flagMark)
}

// splitModern is the llama3 / qwen2 family of scanners: maxDigits digits per number word,
// letters the flags a letter run is made of.
func splitModern(cpts []rune, segs []span, maxDigits int, letters uint16) []span {
	other := letters | flagNumber | flagWhitespace // what ' ?[^\s\p{L}(\p{M})\p{N}]+' stops at
	var out []span
	for _, seg := range segs {
		s := scanner{cpts: cpts, lo: seg.lo, hi: seg.hi, prev: seg.lo, out: out}
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

// isHan is llama.cpp's unicode_cpt_is_han: the CJK Unified Ideographs, their extensions A
// to F, and the compatibility ideographs (the blocks it lists, not Unicode's Han script).
func isHan(r rune) bool {
	switch {
	case r >= 0x4E00 && r <= 0x9FFF, r >= 0x3400 && r <= 0x4DBF,
		r >= 0x20000 && r <= 0x2A6DF, r >= 0x2A700 && r <= 0x2B73F, r >= 0x2B740 && r <= 0x2B81F,
		r >= 0x2B820 && r <= 0x2CEAF, r >= 0x2CEB0 && r <= 0x2EBEF,
		r >= 0xF900 && r <= 0xFAFF, r >= 0x2F800 && r <= 0x2FA1F:
		return true
	}
	return false
}

// splitKimiK2 is the Kimi K2 tokenizer's split (tokenization_kimi.py):
//
//	[\p{Han}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// as llama.cpp runs it (its custom kimi_k2 scanner, which the regex "\p{Han}+" selects):
// a run of Han ideographs is a word; otherwise a word is an optional leading character
// (not CR, LF, a letter or a number) and a run of non-Han letters (the case classes are
// not told apart), then an optional case-insensitive contraction; the number, punctuation
// and whitespace alternatives are llama3's. Marks (\p{M}) end a letter run, as in
// llama.cpp's scanner. There is no contraction alternative of its own: "'s" after a
// non-letter falls to the punctuation alternative.
func splitKimiK2(cpts []rune, segs []span) []span {
	var out []span
	letter := func(s *scanner, i int) bool { return s.flags(i)&flagLetter != 0 && !isHan(s.cpt(i)) }
	for _, seg := range segs {
		s := scanner{cpts: cpts, lo: seg.lo, hi: seg.hi, prev: seg.lo, out: out}
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
			if f2&lnw == 0 && f2 != 0 {
				if c == ' ' {
					pos++
				}
				for g := s.flags(pos); g&lnw == 0 && g != 0; g = s.flags(pos) {
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
