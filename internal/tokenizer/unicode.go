package tokenizer

import "unicode"

// Codepoint flags, with the same meaning as llama.cpp's unicode_cpt_flags.
// The category bits are exclusive; flagWhitespace is an extra property.
// A codepoint always has at least one bit set (unassigned ones carry
// flagUndefined); only "outside the current word" reads as zero, which the
// pre-tokenizers rely on (see pretokenize.go).
const (
	flagUndefined   uint16 = 0x0001
	flagNumber      uint16 = 0x0002 // \p{N}
	flagLetter      uint16 = 0x0004 // \p{L}
	flagSeparator   uint16 = 0x0008 // \p{Z}
	flagMark        uint16 = 0x0010 // \p{M}
	flagPunctuation uint16 = 0x0020 // \p{P}
	flagSymbol      uint16 = 0x0040 // \p{S}
	flagControl     uint16 = 0x0080 // \p{C}
	flagCategories  uint16 = 0x00FF
	flagWhitespace  uint16 = 0x0100 // \s as llama.cpp defines it
)

// maxCodepoint is one past the last Unicode codepoint. Decoding llama.cpp's
// way can produce larger values from F5..F7 lead bytes; those are undefined.
const maxCodepoint = 0x110000

// newerUnicode lists the codepoints assigned after the Unicode version in Go's
// tables (15.0) but present in llama.cpp's unicode-data (15.1). Found by
// comparing the two tables codepoint by codepoint; they agree everywhere else.
var newerUnicode = []struct {
	lo, hi rune
	flags  uint16
}{
	{0x2FFC, 0x2FFF, flagSymbol},   // ideographic description characters
	{0x31EF, 0x31EF, flagSymbol},   // CJK stroke
	{0x2EBF0, 0x2EE5D, flagLetter}, // CJK Unified Ideographs Extension I
}

// isWhitespace is llama.cpp's whitespace set: Python's str.isspace minus
// U+001C..U+001F.
func isWhitespace(r rune) bool {
	switch r {
	case 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680,
		0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

// cptFlags returns the flags of codepoint r. Categories come from Go's
// unicode tables in llama.cpp's precedence (N, L, Z, M, P, S, C), patched by
// newerUnicode.
func cptFlags(r rune) uint16 {
	if r < 0 || r >= maxCodepoint {
		return flagUndefined
	}
	var f uint16
	if r < 0x80 {
		f = asciiFlags[r]
	} else {
		f = categoryFlags(r)
	}
	if isWhitespace(r) {
		f |= flagWhitespace
	}
	return f
}

var asciiFlags = func() (t [128]uint16) {
	for r := range t {
		t[r] = categoryFlags(rune(r))
	}
	return t
}()

func categoryFlags(r rune) uint16 {
	switch {
	case unicode.IsNumber(r):
		return flagNumber
	case unicode.IsLetter(r):
		return flagLetter
	case unicode.In(r, unicode.Z):
		return flagSeparator
	case unicode.IsMark(r):
		return flagMark
	case unicode.IsPunct(r):
		return flagPunctuation
	case unicode.IsSymbol(r):
		return flagSymbol
	case unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs):
		return flagControl
	}
	for _, n := range newerUnicode {
		if r >= n.lo && r <= n.hi {
			return n.flags
		}
	}
	return flagUndefined
}

// utf8Len is llama.cpp's unicode_len_utf8: the sequence length implied by a
// lead byte, looking only at its top four bits (continuation bytes count 1).
func utf8Len(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// decodeCodepoints decodes s the way llama.cpp's unicode_cpts_from_utf8 does,
// which differs from Go's decoder: overlong forms and surrogates are
// accepted as whatever value the bits give, and an invalid or truncated
// sequence becomes one U+FFFD that consumes one byte.
func decodeCodepoints(s string) []rune {
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); {
		r, n := decodeOne(s, i)
		out = append(out, r)
		i += n
	}
	return out
}

func decodeOne(s string, i int) (rune, int) {
	b := s[i]
	cont := func(k int) bool { return i+k < len(s) && s[i+k]&0xC0 == 0x80 }
	switch {
	case b&0x80 == 0:
		return rune(b), 1
	case b&0x40 == 0:
		return 0xFFFD, 1
	case b&0x20 == 0:
		if !cont(1) {
			return 0xFFFD, 1
		}
		return rune(b&0x1F)<<6 | rune(s[i+1]&0x3F), 2
	case b&0x10 == 0:
		if !cont(1) || !cont(2) {
			return 0xFFFD, 1
		}
		return rune(b&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
	case b&0x08 == 0:
		if !cont(1) || !cont(2) || !cont(3) {
			return 0xFFFD, 1
		}
		return rune(b&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F), 4
	}
	return 0xFFFD, 1
}

// appendCodepoint encodes r as llama.cpp's unicode_cpt_to_utf8 does (which,
// unlike Go, also encodes surrogates). Values past U+10FFFF, which llama.cpp
// would throw on, become U+FFFD.
func appendCodepoint(dst []byte, r rune) []byte {
	switch {
	case r < 0:
		return appendCodepoint(dst, 0xFFFD)
	case r <= 0x7F:
		return append(dst, byte(r))
	case r <= 0x7FF:
		return append(dst, 0xC0|byte(r>>6), 0x80|byte(r&0x3F))
	case r <= 0xFFFF:
		return append(dst, 0xE0|byte(r>>12), 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F))
	case r <= 0x10FFFF:
		return append(dst, 0xF0|byte(r>>18), 0x80|byte(r>>12&0x3F), 0x80|byte(r>>6&0x3F), 0x80|byte(r&0x3F))
	}
	return appendCodepoint(dst, 0xFFFD)
}

// Byte-level BPE stores every byte as a printable codepoint (GPT-2's
// bytes_to_unicode): the 188 printable Latin-1 bytes map to themselves and
// the other 68 to U+0100.. in byte order.
var byteToRune, runeToByte = func() (b2r [256]rune, r2b map[rune]byte) {
	r2b = make(map[rune]byte, 256)
	printable := func(b int) bool {
		return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if printable(b) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()
