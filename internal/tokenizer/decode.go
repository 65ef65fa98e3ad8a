package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// renderPiece is llama.cpp's token_to_piece(id, special=true) without
// lstrip: the bytes a token stands for.
//   - control, unknown, user-defined: the token text as is
//   - normal: SPM turns ▁ into spaces; byte-level BPE maps each codepoint
//     back to its byte
//   - byte: the byte named by "<0xXX>"
//   - undefined or unused: nothing
func (t *Tokenizer) renderPiece(id int32) []byte {
	text := t.tokens[id]
	a := t.attrs[id]
	switch {
	case a&(attrControl|attrUnknown|attrUserDefined) != 0:
		return []byte(text)
	case a&attrNormal != 0:
		if t.kind == KindSPM {
			return []byte(strings.ReplaceAll(text, "\u2581", " "))
		}
		return bpeDecodeText(text)
	case a&attrByte != 0:
		return []byte{byteTokenValue(text)}
	}
	return nil
}

// byteTokenValue parses "<0xXX>" the way llama.cpp does (strtol over the
// two characters after "<0x", stopping at the first non-hex one).
func byteTokenValue(text string) byte {
	if len(text) < 4 {
		return 0
	}
	digits := text[3:min(5, len(text))]
	v := 0
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			return byte(v)
		}
		v = v*16 + d
	}
	return byte(v)
}

// bpeDecodeText maps a byte-level BPE token back to bytes. A codepoint that
// is not in the byte map renders as llama.cpp's "[UNK_BYTE_0x..<text>]".
func bpeDecodeText(text string) []byte {
	var out []byte
	for _, r := range decodeCodepoints(text) {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
			continue
		}
		out = append(out, "[UNK_BYTE_0x"...)
		for _, c := range appendCodepoint(nil, r) {
			out = append(out, hexLower[c>>4], hexLower[c&15])
		}
		out = append(out, text...)
		out = append(out, ']')
	}
	return out
}

const hexLower = "0123456789abcdef"

// Piece returns the raw bytes of one token (control tokens as their text),
// or nil for an out-of-range id. The slice is shared: do not modify it.
func (t *Tokenizer) Piece(id int32) []byte {
	if !t.valid(id) {
		return nil
	}
	return t.pieces[id]
}

// appendDecoded appends what id contributes to generated text: its piece,
// or nothing for control and unknown tokens.
func (t *Tokenizer) appendDecoded(dst []byte, id int32) []byte {
	if t.attrs[id]&(attrControl|attrUnknown) != 0 {
		return dst
	}
	return append(dst, t.pieces[id]...)
}

// ErrTokenRange is wrapped by DecodeChecked for an id outside the vocabulary.
var ErrTokenRange = fmt.Errorf("tokenizer: token id out of range")

// Decode renders ids as llama.cpp's server renders completions: the
// concatenation of token_to_piece(id, special=false) — control and unknown
// tokens (BOS, EOS, <|im_end|> ...) render as nothing, no leading space is
// stripped and no clean-up pass runs. Out-of-range ids are skipped. The
// result may hold invalid UTF-8 if the ids split a character; use a
// StreamDecoder to emit text incrementally.
func (t *Tokenizer) Decode(ids []int32) string {
	if len(ids) == 1 { // one token's text (logprobs list every token and alternative): no copy
		if id := ids[0]; t.valid(id) && t.attrs[id]&(attrControl|attrUnknown) == 0 {
			return pieceString(t.pieces[id])
		}
		return ""
	}
	var out []byte
	for _, id := range ids {
		if t.valid(id) {
			out = t.appendDecoded(out, id)
		}
	}
	return string(out)
}

// DecodeChecked is Decode that rejects out-of-range ids with an error
// wrapping ErrTokenRange (for the API to answer 400).
func (t *Tokenizer) DecodeChecked(ids []int32) (string, error) {
	for i, id := range ids {
		if !t.valid(id) {
			return "", fmt.Errorf("%w: ids[%d] = %d, vocabulary has %d tokens", ErrTokenRange, i, id, len(t.tokens))
		}
	}
	return t.Decode(ids), nil
}

// StreamDecoder turns generated ids into text one id at a time, holding
// back a partial UTF-8 character until it completes. Bytes that can never
// complete a character are emitted as U+FFFD, so nothing is held forever.
// Not safe for concurrent use.
type StreamDecoder struct {
	t   *Tokenizer
	buf []byte // pending bytes: a proper prefix of one UTF-8 character
}

// NewStreamDecoder starts an empty stream.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder { return &StreamDecoder{t: t} }

// Add appends id's text (as Decode renders it) and returns whatever is now
// complete. Out-of-range ids add nothing.
//
// Per token it allocates nothing in the common case, a token of whole
// characters with nothing held: the result is the token's piece itself, as a
// string over the tokenizer's piece bytes (never modified after New). Only
// text that joins held bytes to the next token's is copied.
func (d *StreamDecoder) Add(id int32) string {
	t := d.t
	if !t.valid(id) || t.attrs[id]&(attrControl|attrUnknown) != 0 {
		return "" // adds nothing; what is held stays held (it may still complete)
	}
	p := t.pieces[id]
	if len(d.buf) == 0 {
		if k, clean := settled(p, false); clean {
			d.buf = append(d.buf, p[k:]...)
			return pieceString(p[:k])
		}
	}
	d.buf = append(d.buf, p...)
	return d.drain(false)
}

// Flush returns everything still held, with incomplete characters as
// U+FFFD, and resets the stream.
func (d *StreamDecoder) Flush() string { return d.drain(true) }

// pieceString views piece bytes as a string without copying. REQUIRES: b is
// (part of) a piece, which nothing writes after New.
func pieceString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// settled returns how much of b drain would emit (all of it when final; else
// up to a trailing incomplete but still possible character) and whether that
// much is valid UTF-8 as it is (no byte to replace by U+FFFD).
func settled(b []byte, final bool) (n int, clean bool) {
	clean = true
	for n < len(b) {
		if b[n] < utf8.RuneSelf {
			n++
			continue
		}
		r, size := utf8.DecodeRune(b[n:])
		if r == utf8.RuneError && size <= 1 {
			if !final && !utf8.FullRune(b[n:]) {
				break // may still complete
			}
			clean = false
		}
		n += size
	}
	return n, clean
}

// drain emits the longest prefix of buf that is settled: valid characters
// pass through, invalid bytes become U+FFFD, and a trailing incomplete but
// still possible character stays unless final.
func (d *StreamDecoder) drain(final bool) string {
	n, clean := settled(d.buf, final)
	var out string
	if clean {
		out = string(d.buf[:n])
	} else {
		o := make([]byte, 0, n+8)
		for i := 0; i < n; {
			r, size := utf8.DecodeRune(d.buf[i:n])
			if r == utf8.RuneError && size <= 1 {
				o = utf8.AppendRune(o, utf8.RuneError)
				i++
				continue
			}
			o = append(o, d.buf[i:i+size]...)
			i += size
		}
		out = string(o)
	}
	d.buf = append(d.buf[:0], d.buf[n:]...)
	return out
}
