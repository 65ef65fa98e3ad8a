package api

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// QuotePrefixBytes is how much of a client's string an error quotes. Errors name what was
// wrong, and 64 bytes tell a model name, a role or a tool name apart; the rest of a long value
// only makes the answer as large as the request (a 1 MB model name was echoed whole), which a
// client can use to amplify, and which fills logs.
const QuotePrefixBytes = 64

// Error bodies are cut to these as a backstop, for any message or param built without Quote
// (a 1 MiB value in a param path, say); the messages Stockpot writes are far shorter.
const (
	maxErrorMessageBytes = 2048
	maxErrorParamBytes   = 256
)

// Quote returns a client's string quoted for an error message: as %q does when it is at most
// QuotePrefixBytes long, or else its first QuotePrefixBytes (cut back to a UTF-8 boundary)
// quoted, then "…" and its whole length: "aaaa…" (1048576 bytes).
func Quote(s string) string {
	if len(s) <= QuotePrefixBytes {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(cutUTF8(s, QuotePrefixBytes)), len(s))
}

// cutUTF8 returns s's longest prefix of at most n bytes that does not split a UTF-8
// sequence (a byte that is not UTF-8 at all counts as one character).
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	// Back up over continuation bytes (at most 3) to the start of the character at n; keep it
	// out unless it is whole within n.
	for j := 0; j < utf8.UTFMax-1 && i > 0 && !utf8.RuneStart(s[i]); j++ {
		i--
	}
	if r, size := utf8.DecodeRuneInString(s[i:]); r == utf8.RuneError && size <= 1 {
		return s[:n] // invalid bytes: no character boundary to keep
	}
	return s[:i]
}

// cutLong cuts s to at most n bytes on a UTF-8 boundary, marking a cut with "…".
func cutLong(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutUTF8(s, n-len("…")) + "…"
}
