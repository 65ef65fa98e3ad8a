package router

import (
	"bytes"
	"encoding/json"
)

// The router reads three fields of a generate body and one of a /tokenize answer. Decoding
// them with encoding/json took most of the router's own time on long prompts (it validates
// and walks a 10 KB token array to keep a RawMessage of it), so this file scans the
// top-level object by hand: one pass, no allocation beyond the salt. It agrees with
// encoding/json on every valid body (FuzzScanGenerateBody checks that) and, when in doubt
// (an escaped or non-ASCII key that json would fold onto ours, a salt that needs decoding, a
// wrongly typed field, deep nesting), reports !ok so the caller falls back to encoding/json.

// maxScanDepth bounds nesting before the scanner gives up to encoding/json (which has its own
// limit and error).
const maxScanDepth = 512

// decodeGenerateBody fills gb as json.Unmarshal(body, gb) would (a malformed body leaves it
// empty; the backend answers the 400).
func decodeGenerateBody(body []byte, gb *generateBody) {
	if g, ok := scanGenerateBody(body); ok {
		*gb = g
		return
	}
	*gb = generateBody{}
	_ = json.Unmarshal(body, gb)
}

// decodeGenerateBodyTokens is decodeGenerateBody that also returns the prompt's token ids
// when the prompt is a token array (parseTokenArray's), parsed into dst as the scan walks
// it (scanGenerateBodyTokens); nil otherwise.
func decodeGenerateBodyTokens(body []byte, gb *generateBody, dst []int32) []int32 {
	if g, toks, ok := scanGenerateBodyTokens(body, dst); ok {
		*gb = g
		return toks
	}
	*gb = generateBody{}
	_ = json.Unmarshal(body, gb)
	return nil
}

// scanGenerateBody is the fast path of decodeGenerateBody; ok=false: use encoding/json.
func scanGenerateBody(b []byte) (gb generateBody, ok bool) {
	gb, _, ok = scanGenerateBodyTokens(b, nil)
	return gb, ok
}

// scanGenerateBodyTokens is scanGenerateBody that parses a token-array prompt into dst while
// it walks it, instead of skipping it for a second pass to parse (the array is nearly all of
// a token prompt's body: 10 KB for 2048 tokens). tokens is parseTokenArray(gb.Prompt) when
// that succeeds, else nil.
func scanGenerateBodyTokens(b []byte, dst []int32) (gb generateBody, tokens []int32, ok bool) {
	parsedAt := -1 // where the array tokens holds starts
	value := func(key, b []byte, i int) int {
		if string(key) != "prompt" || b[i] != '[' {
			return -1
		}
		ids, end, ok := parseTokenArrayAt(dst, b, i)
		if !ok {
			return -1 // skipValue decides (a batch of prompts, or not JSON)
		}
		dst, tokens, parsedAt = ids[:0], ids, i
		return end
	}
	ok = scanObjectWith(b, func(key, val []byte, at int) bool {
		switch string(key) {
		case "prompt":
			gb.Prompt = val
			if at != parsedAt { // a later "prompt" replaces the parsed one (json keeps the last)
				tokens = nil
			}
		case "messages":
			gb.Messages = val
		case "cache_salt", "prompt_cache_key":
			dst := &gb.CacheSalt
			if string(key) == "prompt_cache_key" {
				dst = &gb.PromptCacheKey
			}
			switch {
			case val[0] == 'n': // null leaves the field as it was
			case val[0] == '"' && plainString(val):
				*dst = string(val[1 : len(val)-1])
			default:
				return false // escapes to decode, or a type error json reports
			}
		default:
			if foldsOnto(key, "prompt") || foldsOnto(key, "messages") || foldsOnto(key, "cache_salt") || foldsOnto(key, "prompt_cache_key") {
				return false // json matches keys case-insensitively
			}
		}
		return true
	}, value)
	if !ok {
		return generateBody{}, nil, false
	}
	return gb, tokens, true
}

// scanTokens returns the "tokens" array of a /tokenize answer; ok=false: use encoding/json.
func scanTokens(b []byte) (ids []int32, ok bool) {
	var raw []byte
	if !scanObject(b, func(key, val []byte) bool {
		if string(key) == "tokens" {
			raw = val
		} else if foldsOnto(key, "tokens") {
			return false
		}
		return true
	}) || raw == nil {
		return nil, false
	}
	return parseTokenArray(raw)
}

// foldsOnto reports whether key may match field under encoding/json's case-insensitive
// matching without being exactly it. Keys reaching here are plain ASCII.
func foldsOnto(key []byte, field string) bool {
	return len(key) == len(field) && string(key) != field && bytes.EqualFold(key, []byte(field))
}

// plainString reports whether the JSON string s (quotes included) is its own value: no
// escapes and only ASCII (json replaces invalid UTF-8, so non-ASCII needs decoding too).
func plainString(s []byte) bool {
	for _, c := range s[1 : len(s)-1] {
		if c == '\\' || c >= 0x80 {
			return false
		}
	}
	return true
}

// scanObject walks b, which must be exactly one JSON object (surrounding whitespace
// allowed), calling f with each top-level key (raw, between its quotes) and value (raw,
// trimmed). It returns false when b is not valid JSON, when a key is escaped or non-ASCII,
// when nesting is deeper than maxScanDepth, or when f returns false.
func scanObject(b []byte, f func(key, val []byte) bool) bool {
	return scanObjectWith(b, func(key, val []byte, _ int) bool { return f(key, val) }, nil)
}

// scanObjectWith is scanObject where value, when set, may walk a value itself: value(key, b,
// i) returns the end of the valid JSON value starting at b[i], or -1 to leave it to
// skipValue; and f also gets the offset at which each value starts.
func scanObjectWith(b []byte, f func(key, val []byte, at int) bool, value func(key, b []byte, i int) int) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipWS(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		j, plain := skipString(b, i)
		if j < 0 || !plain {
			return false
		}
		key := b[i+1 : j-1]
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipWS(b, i+1)
		j = -1
		if value != nil && i < len(b) {
			j = value(key, b, i)
		}
		if j < 0 {
			j = skipValue(b, i, 0)
		}
		if j < 0 || !f(key, b[i:j], i) {
			return false
		}
		i = skipWS(b, j)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipWS(b, i+1)
		case '}':
			return skipWS(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value starting at b[i], or -1 when there is none.
func skipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		j, _ := skipString(b, i)
		return j
	case c == '{' || c == '[':
		if depth >= maxScanDepth {
			return -1
		}
		if c == '[' {
			if end := skipIntArray(b, i); end >= 0 {
				return end // the common token-id prompt, without a call per element
			}
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == end {
			return i + 1
		}
		for {
			if end == '}' {
				if i >= len(b) || b[i] != '"' {
					return -1
				}
				if i, _ = skipString(b, i); i < 0 {
					return -1
				}
				if i = skipWS(b, i); i >= len(b) || b[i] != ':' {
					return -1
				}
				i = skipWS(b, i+1)
			}
			if i = skipValue(b, i, depth+1); i < 0 {
				return -1
			}
			if i = skipWS(b, i); i >= len(b) {
				return -1
			}
			switch b[i] {
			case ',':
				i = skipWS(b, i+1)
			case end:
				return i + 1
			default:
				return -1
			}
		}
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	default:
		return skipNumber(b, i)
	}
}

func skipLiteral(b []byte, i int, lit string) int {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// skipString returns the end of the string starting at the quote b[i] (-1 when invalid) and
// whether it is plain ASCII without escapes.
func skipString(b []byte, i int) (end int, plain bool) {
	plain = true
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, plain
		case c < 0x20:
			return -1, false
		case c >= 0x80:
			plain = false
		case c == '\\':
			plain = false
			if i++; i >= len(b) {
				return -1, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i <= 4 {
					return -1, false
				}
				for _, h := range b[i+1 : i+5] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return -1, false
					}
				}
				i += 4
			default:
				return -1, false
			}
		}
	}
	return -1, false
}

// skipNumber returns the end of the JSON number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func skipNumber(b []byte, i int) int {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = skipDigits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := skipDigits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := skipDigits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func skipDigits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}

// skipIntArray returns the end of the array at b[i] ('[') when it holds only unsigned
// integers (the token-id prompt), or -1 for anything else (the general walk decides then,
// valid or not).
func skipIntArray(b []byte, i int) int {
	i = skipWS(b, i+1)
	for {
		start := i
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
		if i == start || b[start] == '0' && i-start > 1 {
			return -1
		}
		if i < len(b) && b[i] == ',' { // the common separator; skipWS handles the rest
			if i++; i < len(b) && b[i]-'0' <= 9 {
				continue
			}
			i = skipWS(b, i)
			continue
		}
		if i = skipWS(b, i); i >= len(b) {
			return -1
		}
		switch b[i] {
		case ']':
			return i + 1
		case ',':
			i = skipWS(b, i+1)
		default:
			return -1
		}
	}
}
