package vocab

// byteToRune is the GPT-2 byte-level alphabet: every byte maps to a printable
// rune so that token texts never contain spaces or control characters.
// Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves;
// the other 68 bytes map, in increasing byte order, to U+0100, U+0101, ...
var byteToRune [256]rune

// byteOrder lists the bytes in GPT-2's base-vocabulary order: the printable
// bytes first (in byte order) then the remapped ones. Base token i of a BPE
// vocabulary is byteToRune[byteOrder[i]].
var byteOrder [256]byte

func init() {
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n, next := 0, rune(256)
	for b := 0; b < 256; b++ {
		if printable(b) {
			byteToRune[b] = rune(b)
			byteOrder[n] = byte(b)
			n++
		}
	}
	for b := 0; b < 256; b++ {
		if !printable(b) {
			byteToRune[b] = next
			next++
			byteOrder[n] = byte(b)
			n++
		}
	}
}

// ByteLevel returns s spelled in the GPT-2 byte-level alphabet.
func ByteLevel(s string) string {
	r := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		r[i] = byteToRune[s[i]]
	}
	return string(r)
}
