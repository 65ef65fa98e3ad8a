package tokenizer

import "sync"

// tokenBytesBound caches MaxTokenBytes (a pass over the vocabulary and the merges).
type tokenBytesBound struct {
	once sync.Once
	n    int
	ok   bool
}

// MaxTokenBytes returns the most bytes of input text that one token of Encode's output stands
// for, and whether that bound holds for this vocabulary. When it holds, Encode(text) has at
// least ⌈len(text)/MaxTokenBytes⌉ tokens (special tokens added by addSpecial not counted), so
// a caller can refuse a text that is sure to be too long without tokenizing it.
//
// Why it holds: every token Encode emits is a special token matching its own text, a token
// whose text is the (normalized) text it covers, or one token per byte (byte fallback, UNK).
// Normalization only lengthens the text (a space becomes the 3-byte ▁, byte-level BPE maps a
// byte to a 1- or 2-byte character, an invalid byte to the 3-byte U+FFFD), so a token covers
// at most as many input bytes as its own text has. It fails only for a vocabulary that drops
// bytes it has no token for (SPM without byte tokens and without UNK; byte-level BPE missing a
// byte's character or a merge result), which llama.cpp refuses or tokenizes lossily too.
func (t *Tokenizer) MaxTokenBytes() (int, bool) {
	b := &t.tokenBytes
	b.once.Do(func() { b.n, b.ok = t.maxTokenBytes() })
	return b.n, b.ok
}

func (t *Tokenizer) maxTokenBytes() (int, bool) {
	n := 1
	for _, s := range t.tokens {
		n = max(n, len(s))
	}
	switch t.kind {
	case KindSPM:
		if t.unk != NoToken {
			return n, true
		}
		for b := 0; b < 256; b++ {
			if t.appendByteToken(byte(b), nil) == nil {
				return n, false
			}
		}
	case KindBPE:
		for b := 0; b < 256; b++ {
			if _, ok := t.toID[string(byteToRune[b])]; !ok {
				return n, false
			}
		}
		for p := range t.ranks {
			if _, ok := t.toID[p.left+p.right]; !ok {
				return n, false
			}
		}
	}
	return n, true
}

// EncodeLimit is Encode for a caller with a budget: it returns Encode's tokens and true when
// there are at most limit of them, else nil and false, and stops early on the way. A text
// sure to be too long by MaxTokenBytes is refused before any tokenizing; otherwise the
// special-token partition stops past limit special tokens, SPM refuses a fragment and
// byte-level BPE a word that the same bound says cannot fit before merging it, and BPE
// stops at the first word past the limit (the pre-tokenizer streams: no word after it is
// even found). The work is then in proportion to limit, not to the text.
func (t *Tokenizer) EncodeLimit(text string, addSpecial, parseSpecial bool, limit int) ([]int32, bool) {
	return t.encode(text, addSpecial, parseSpecial, limit, nil)
}

// EncodeBytesPerByte is what Encode and EncodeLimit may allocate per byte of text, garbage
// included, beyond a fixed 256 KiB, for a caller budgeting the memory of a request. The
// merge buffers take 28 bytes a character of the longest word (byte-level BPE) or raw
// fragment (SPM); a character is an input byte of ASCII, and an invalid byte is three (a
// U+FFFD in byte-level form), the worst case. TestEncodeLinear holds every pre-tokenizer
// to it on every adversarial shape (one word of a single class, alternating classes,
// invalid UTF-8): valid text measures about 30, invalid UTF-8 about 111.
const EncodeBytesPerByte = 128
