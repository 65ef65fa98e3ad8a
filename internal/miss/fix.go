package miss

import (
	"regexp"
	"strings"
)

// Normalisers undo a cause in a text, the way a client would fix its prompts: stockpot lint
// applies them to logged requests to estimate the hit rate each fix would bring.

// ReplaceTimestamps replaces every date, time and epoch in s with "<timestamp>".
func ReplaceTimestamps(s string) string {
	return timestampRE.ReplaceAllString(s, "<timestamp>")
}

// ReplaceIDs replaces every UUID, nonce and id-like run holding a digit with "<id>".
func ReplaceIDs(s string) string {
	return nonceRE.ReplaceAllStringFunc(s, func(m string) string {
		if looksLikeID(m) {
			return "<id>"
		}
		return m
	})
}

var spaceRunRE = regexp.MustCompile(`\s+`)

// NormalizeWhitespace trims s and collapses every run of whitespace (newlines included) to
// one space: the strictest normal form, so texts that differ only in whitespace become one.
func NormalizeWhitespace(s string) string {
	return strings.TrimSpace(spaceRunRE.ReplaceAllString(s, " "))
}
