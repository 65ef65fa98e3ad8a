package api

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuote(t *testing.T) {
	a64 := strings.Repeat("a", 64)
	cases := []struct {
		in, want string
	}{
		{"", `""`},
		{"gpt-4o", `"gpt-4o"`},
		{a64, strconv.Quote(a64)},
		{a64 + "b", strconv.Quote(a64) + "… (65 bytes)"},
		{strings.Repeat("m", 1<<20), strconv.Quote(a64[:0]+strings.Repeat("m", 64)) + "… (1048576 bytes)"},
		// 63 ASCII bytes then a 3-byte character across the cut: the character stays out.
		{strings.Repeat("a", 63) + "€€", strconv.Quote(strings.Repeat("a", 63)) + "… (69 bytes)"},
		// 62 then a 2-byte character that ends at the cut: it stays in.
		{strings.Repeat("a", 62) + "éé", strconv.Quote(strings.Repeat("a", 62)+"é") + "… (66 bytes)"},
		// Invalid UTF-8 at the cut: cut at 64 bytes.
		{strings.Repeat("\xff", 70), strconv.Quote(strings.Repeat("\xff", 64)) + "… (70 bytes)"},
		{"line\nbreak\"", `"line\nbreak\""`},
	}
	for _, c := range cases {
		if have := Quote(c.in); have != c.want {
			t.Errorf("Quote(%.20q… %d bytes): have %s, want %s", c.in, len(c.in), have, c.want)
		}
	}
}

// TestErrorBodyBounded: an error built without Quote still answers a few KiB at most, in
// both shapes.
func TestErrorBodyBounded(t *testing.T) {
	huge := strings.Repeat("é", 1<<19) // 1 MiB
	e := Invalid(huge, "bad %s", huge)
	b := e.Body()
	if len(b.Error.Message) > maxErrorMessageBytes || len(*b.Error.Param) > maxErrorParamBytes || !utf8.ValidString(b.Error.Message) || !utf8.ValidString(*b.Error.Param) {
		t.Errorf("message %d bytes, param %d bytes", len(b.Error.Message), len(*b.Error.Param))
	}
	if _, ab := AnthropicError(e); len(ab.Error.Message) > maxErrorMessageBytes || !utf8.ValidString(ab.Error.Message) {
		t.Errorf("Anthropic message %d bytes", len(ab.Error.Message))
	}
	if m := ModelNotFound(huge, "served").Body().Error.Message; len(m) > 200 {
		t.Errorf("model not found: %d bytes", len(m))
	}
}

// FuzzQuote: Quote's answer is short whatever the input, and quotes a prefix of it.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "gpt-4o", strings.Repeat("a", 65), strings.Repeat("a", 63) + "€€", "\xff\xfe\xfd", strings.Repeat("é", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q := Quote(s)
		// At most 64 bytes, each escaped to at most 10 ("\U0010ffff" for one of 4 bytes is
		// less), two quotes, and "… (N bytes)".
		if len(q) > 4*QuotePrefixBytes+2+len("… ( bytes)")+20 {
			t.Fatalf("Quote of %d bytes is %d bytes", len(s), len(q))
		}
		head, _, cut := strings.Cut(q, "… (")
		if cut != (len(s) > QuotePrefixBytes) {
			t.Fatalf("cut %v for %d bytes: %s", cut, len(s), q)
		}
		un, err := strconv.Unquote(head)
		if err != nil || !strings.HasPrefix(s, un) || len(un) > QuotePrefixBytes || (!cut && un != s) {
			t.Fatalf("Quote(%q) = %s", s, q)
		}
	})
}
