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
// A splitter refines one segment into smaller ones; segments never merge, so
// each regex in a chain only sees the pieces the previous one produced.
//
// # Streaming
//
// The splitters scan the text's bytes, decoding one codepoint at a time
// where they stand, and hand each segment on as soon as it ends: the chain
// is a pipeline of callbacks, and words yields one word at a time without
// decoding the whole text or listing its segments first. A caller that stops
// (EncodeLimit past its limit) stops the scan there, so the work is in
// proportion to what was read. Every splitter looks only forward, at most two
// codepoints past the one it stands on, except the whitespace run, which
// scans to the run's end once and steps back one codepoint; each byte is
// therefore read a bounded number of times per stage, and a stage keeps no
// state but its position: time is linear in the text and memory constant,
// whatever the text (one huge run of a class included).
//
// The scanners are checked against the slice-based splitters they replaced
// (pretokenize_ref_test.go), which follow llama.cpp's code line by line.

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

// splitter splits the segment text[lo:hi) and calls yield with each piece, in order,
// as byte ranges of text; it returns false as soon as yield does (the scan then stops).
// REQUIRES: lo and hi fall on codepoint boundaries of text as decodeCodepoints decodes
// it (so decoding at any boundary inside the segment ends at or before hi).
type splitter func(text string, lo, hi int, yield func(lo, hi int) bool) bool

var (
	splitDefaultChain = []splitter{splitRuns(isDefaultPunct), splitGPT2, splitRuns(isNumberCollapsed), splitASCIIDigitTriples}
	splitSmolLMChain  = []splitter{splitEach(isNumberCollapsed), splitGPT2}
)

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
		return splitSmolLMChain
	case preKimiK2:
		return []splitter{splitKimiK2}
	}
	// "[\p{P}\$\+<=>\^~\|]+", the GPT-2 regex, "\p{N}+", "[0-9][0-9][0-9]".
	return splitDefaultChain
}

// words calls yield with each word of text, in order, as byte ranges [lo, hi) of text,
// and stops when yield returns false. The words are the family's chain of splitters
// applied in turn: each segment one stage yields is split by the next before the first
// stage reads on, so nothing but the stages' positions is held.
func (p preType) words(text string, yield func(lo, hi int) bool) {
	if text == "" {
		return
	}
	chain := p.splitters()
	// stage[k] feeds a segment to splitter k; stage[len(chain)] is the caller's yield.
	stage := make([]func(lo, hi int) bool, len(chain)+1)
	stage[len(chain)] = yield
	for k := len(chain) - 1; k >= 0; k-- {
		split, next := chain[k], stage[k+1]
		stage[k] = func(lo, hi int) bool { return split(text, lo, hi, next) }
	}
	stage[0](0, len(text))
}

// appendWordBytes appends the byte-level BPE form of the word text: its codepoints
// (decoded as llama.cpp decodes them, so an invalid byte is U+FFFD) re-encoded as UTF-8,
// each byte mapped through byteToRune and encoded again.
func appendWordBytes(dst []byte, text string) []byte {
	var cp [4]byte
	for i := 0; i < len(text); {
		r, n := decodeOne(text, i)
		i += n
		for _, b := range appendCodepoint(cp[:0], r) {
			dst = appendCodepoint(dst, byteToRune[b])
		}
	}
	return dst
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
	return func(text string, lo, hi int, yield func(lo, hi int) bool) bool {
		start := lo
		for i := lo; i < hi; {
			r, n := decodeOne(text, i)
			if !in(r) {
				i += n
				continue
			}
			j := i + n
			for j < hi {
				r, n := decodeOne(text, j)
				if !in(r) {
					break
				}
				j += n
			}
			if i > start && !yield(start, i) || !yield(i, j) {
				return false
			}
			start, i = j, j
		}
		return start >= hi || yield(start, hi)
	}
}

// splitEach is the std::regex split for a single-codepoint class.
func splitEach(in func(rune) bool) splitter {
	return func(text string, lo, hi int, yield func(lo, hi int) bool) bool {
		start := lo
		for i := lo; i < hi; {
			r, n := decodeOne(text, i)
			if in(r) {
				if i > start && !yield(start, i) || !yield(i, i+n) {
					return false
				}
				start = i + n
			}
			i += n
		}
		return start >= hi || yield(start, hi)
	}
}

// splitASCIIDigitTriples is the std::regex split for "[0-9][0-9][0-9]".
func splitASCIIDigitTriples(text string, lo, hi int, yield func(lo, hi int) bool) bool {
	// digit returns the end of the codepoint at i when it is 0-9 (an overlong form too:
	// it decodes to a digit), else -1.
	digit := func(i int) int {
		if i >= hi {
			return -1
		}
		if r, n := decodeOne(text, i); r >= '0' && r <= '9' {
			return i + n
		}
		return -1
	}
	start := lo
	for i := lo; i < hi; {
		if j := digit(i); j >= 0 {
			if j = digit(j); j >= 0 {
				if j = digit(j); j >= 0 {
					if i > start && !yield(start, i) || !yield(i, j) {
						return false
					}
					i, start = j, j
					continue
				}
			}
		}
		_, n := decodeOne(text, i)
		i += n
	}
	return start >= hi || yield(start, hi)
}

// scanner holds one segment, text[:hi), being split from prev on. Positions are byte
// offsets of codepoint starts; cpt, flags and next read the codepoint at one. flags and
// cpt read as zero and outOfRange at or past hi, which is how the regex alternatives
// below see the segment boundary. A codepoint's successor is always next(i), never i+1:
// an ASCII codepoint may be spelt in two to four bytes (llama.cpp decodes overlong forms).
type scanner struct {
	text  string
	hi    int
	prev  int
	yield func(lo, hi int) bool
	stop  bool // yield returned false: the caller wants no more words
}

const outOfRange rune = -1

// at returns the codepoint at i, its length in bytes and its flags; outOfRange, 0, 0 at or
// past the segment's end.
func (s *scanner) at(i int) (rune, int, uint16) {
	if i >= s.hi {
		return outOfRange, 0, 0
	}
	if b := s.text[i]; b < 0x80 {
		return rune(b), 1, asciiFlagsWS[b]
	}
	r, n := decodeOne(s.text, i)
	return r, n, cptFlags(r)
}

func (s *scanner) cpt(i int) rune {
	r, _, _ := s.at(i)
	return r
}

func (s *scanner) flags(i int) uint16 {
	_, _, f := s.at(i)
	return f
}

// next is the position after the codepoint at i (i+1 at or past the end).
func (s *scanner) next(i int) int {
	if _, n, _ := s.at(i); n > 0 {
		return i + n
	}
	return i + 1
}

// emit ends the current word at end (nothing when it is empty).
func (s *scanner) emit(end int) {
	if end > s.prev && !s.stop && !s.yield(s.prev, end) {
		s.stop = true
	}
	s.prev = end
}

// asciiFlagsWS is cptFlags over ASCII.
var asciiFlagsWS = func() (t [128]uint16) {
	for r := range t {
		t[r] = cptFlags(rune(r))
	}
	return t
}()

const lnw = flagLetter | flagNumber | flagWhitespace

func asciiLower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// contraction returns the end of a 's 't 're 've 'm 'll 'd at pos, or pos
// when there is none. fold makes it case-insensitive (llama3 and qwen2).
func (s *scanner) contraction(pos int, fold bool) int {
	p1 := s.next(pos)
	if s.cpt(pos) != '\'' || p1 >= s.hi {
		return pos
	}
	low := func(r rune) rune {
		if fold {
			return asciiLower(r)
		}
		return r
	}
	c1 := low(s.cpt(p1))
	p2 := s.next(p1)
	switch c1 {
	case 's', 't', 'm', 'd':
		return p2
	}
	if p2 < s.hi {
		c2 := low(s.cpt(p2))
		if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
			return s.next(p2)
		}
	}
	return pos
}

// splitGPT2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func splitGPT2(text string, lo, hi int, yield func(lo, hi int) bool) bool {
	s := scanner{text: text, hi: hi, prev: lo, yield: yield}
	for pos := lo; pos < s.hi && !s.stop; {
		c, _, f := s.at(pos)
		if end := s.contraction(pos, false); end > pos {
			pos = end
			s.emit(pos)
			continue
		}
		f2 := f
		if c == ' ' {
			f2 = s.flags(s.next(pos))
		}
		if f2&flagLetter != 0 || f2&flagNumber != 0 {
			want := f2 & (flagLetter | flagNumber)
			if c == ' ' {
				pos = s.next(pos)
			}
			for s.flags(pos)&want != 0 {
				pos = s.next(pos)
			}
			s.emit(pos)
			continue
		}
		if f2&lnw == 0 && f2 != 0 {
			if c == ' ' {
				pos = s.next(pos)
			}
			for g := s.flags(pos); g&lnw == 0 && g != 0; g = s.flags(pos) {
				pos = s.next(pos)
			}
			s.emit(pos)
			continue
		}
		pos = s.whitespace(pos, false)
	}
	return !s.stop
}

// whitespace handles the trailing alternatives shared by all families:
// [\s*[\r\n]+ when crlf,] \s+(?!\S), \s+, and the no-match single step.
// It reads the run once: \s+(?!\S) is the run but its last codepoint when
// something follows it in the segment, so only the last one's start is kept.
func (s *scanner) whitespace(pos int, crlf bool) int {
	n := 0
	lastCRLF := 0
	last, end := pos, pos // start of the run's last codepoint, end of the run
	for {
		c, size, f := s.at(end)
		if f&flagWhitespace == 0 {
			break
		}
		if c == '\r' || c == '\n' {
			lastCRLF = end + size
		}
		last = end
		end += size
		n++
	}
	switch {
	case crlf && lastCRLF > 0:
		pos = lastCRLF
	case n > 1 && s.cpt(end) != outOfRange:
		pos = last
	case n > 0:
		pos = end
	default:
		pos = s.next(pos)
	}
	s.emit(pos)
	return pos
}

// splitLlama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func splitLlama3(text string, lo, hi int, yield func(lo, hi int) bool) bool {
	return splitModern(text, lo, hi, yield, 3, flagLetter)
}

// splitQwen2 is splitLlama3 with \p{N} taken one digit at a time.
func splitQwen2(text string, lo, hi int, yield func(lo, hi int) bool) bool {
	return splitModern(text, lo, hi, yield, 1, flagLetter)
}

// splitQwen35: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// that is splitQwen2 where a combining mark counts as a letter, so "é" spelt e + U+0301
// stays one word.
func splitQwen35(text string, lo, hi int, yield func(lo, hi int) bool) bool {
	return splitModern(text, lo, hi, yield, 1, flagLetter|flagMark)
}

// digits is the \p{N}{1,maxDigits} alternative of llama3, qwen2 and kimi-k2: a run of
// numbers cut every maxDigits codepoints.
func (s *scanner) digits(pos, maxDigits int) int {
	k := 0
	for s.flags(pos)&flagNumber != 0 {
		pos = s.next(pos)
		if k++; k >= maxDigits {
			s.emit(pos)
			k = 0
		}
	}
	s.emit(pos)
	return pos
}

// punct is ' ?[^\s\p{L}\p{N}]+[\r\n]*' with other the classes that end the run. It starts
// at pos, known to begin the alternative.
func (s *scanner) punct(pos int, c rune, other uint16) int {
	if c == ' ' {
		pos = s.next(pos)
	}
	for g := s.flags(pos); g&other == 0 && g != 0; g = s.flags(pos) {
		pos = s.next(pos)
	}
	for c2 := s.cpt(pos); c2 == '\r' || c2 == '\n'; c2 = s.cpt(pos) {
		pos = s.next(pos)
	}
	s.emit(pos)
	return pos
}

// splitModern is the llama3 / qwen2 family of scanners: maxDigits digits per number word,
// letters the flags a letter run is made of.
func splitModern(text string, lo, hi int, yield func(lo, hi int) bool, maxDigits int, letters uint16) bool {
	other := letters | flagNumber | flagWhitespace // what ' ?[^\s\p{L}(\p{M})\p{N}]+' stops at
	s := scanner{text: text, hi: hi, prev: lo, yield: yield}
	for pos := lo; pos < s.hi && !s.stop; {
		c, _, f := s.at(pos)
		if end := s.contraction(pos, true); end > pos {
			pos = end
			s.emit(pos)
			continue
		}
		// [^\r\n\p{L}\p{N}]?\p{L}+ (qwen35: [\p{L}\p{M}]+)
		if !(c == '\r' || c == '\n' || f&flagNumber != 0) {
			if nx := s.next(pos); f&letters != 0 || s.flags(nx)&letters != 0 {
				pos = nx
				for s.flags(pos)&letters != 0 {
					pos = s.next(pos)
				}
				s.emit(pos)
				continue
			}
		}
		// \p{N}{1,maxDigits}
		if f&flagNumber != 0 {
			pos = s.digits(pos, maxDigits)
			continue
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'. llama.cpp tests the flags of the
		// first codepoint (not of the one after the space) for "is
		// anything"; we keep that.
		f2 := f
		if c == ' ' {
			f2 = s.flags(s.next(pos))
		}
		if f2&other == 0 && f != 0 {
			pos = s.punct(pos, c, other)
			continue
		}
		pos = s.whitespace(pos, true)
	}
	return !s.stop
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
func splitKimiK2(text string, lo, hi int, yield func(lo, hi int) bool) bool {
	s := scanner{text: text, hi: hi, prev: lo, yield: yield}
	letter := func(i int) bool {
		r, _, f := s.at(i)
		return f&flagLetter != 0 && !isHan(r)
	}
	for pos := lo; pos < s.hi && !s.stop; {
		c, _, f := s.at(pos)
		if isHan(c) {
			for isHan(s.cpt(pos)) {
				pos = s.next(pos)
			}
			s.emit(pos)
			continue
		}
		lead := !(c == '\r' || c == '\n' || f&(flagLetter|flagNumber) != 0)
		if letter(pos) || (lead && letter(s.next(pos))) {
			if lead {
				pos = s.next(pos)
			}
			for letter(pos) {
				pos = s.next(pos)
			}
			pos = s.contraction(pos, true)
			s.emit(pos)
			continue
		}
		if f&flagNumber != 0 {
			pos = s.digits(pos, 3)
			continue
		}
		f2 := f
		if c == ' ' {
			f2 = s.flags(s.next(pos))
		}
		if f2&lnw == 0 && f2 != 0 {
			pos = s.punct(pos, c, lnw)
			continue
		}
		pos = s.whitespace(pos, true)
	}
	return !s.stop
}
