package toolcall

import (
	"strings"
	"testing"
)

// A long call (a file written through a tool) fed in token-sized pieces is the worst case
// of the scanner: the call is held until it is whole, and re-parsed as it grows. The
// benchmarks compare it with the same amount of plain content.
func benchText(f Family) string {
	body := strings.Repeat("fmt.Println(\"hello, world\") // 日本語 {x}\n", 500) // ~20 KB
	switch f {
	case None:
		return body
	case Qwen3Coder:
		return "<tool_call>\n<function=write_file>\n<parameter=path>\na.go\n</parameter>\n<parameter=content>\n" +
			body + "\n</parameter>\n</function>\n</tool_call>"
	}
	return Format(f, []Call{{Name: "write_file", Arguments: `{"path":"a.go","content":` + jsonString(body) + `}`}})
}

func benchFeed(b *testing.B, f Family) {
	text := benchText(f)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		p := NewParser(f, Options{})
		for i := 0; i < len(text); i += 4 {
			p.Feed(text[i:min(i+4, len(text))])
		}
		p.Finish()
	}
}

func BenchmarkFeedContent(b *testing.B)        { benchFeed(b, None) }
func BenchmarkFeedQwen3CoderCall(b *testing.B) { benchFeed(b, Qwen3Coder) }
func BenchmarkFeedHermesCall(b *testing.B)     { benchFeed(b, Hermes) }
func BenchmarkFeedKimiCall(b *testing.B)       { benchFeed(b, Kimi) }

func BenchmarkParseHermesCall(b *testing.B) {
	text := benchText(Hermes)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		Parse(Hermes, text, Options{})
	}
}
