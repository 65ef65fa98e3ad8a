package miss

import (
	"strings"
	"testing"
)

// BenchmarkExplain is the text half of one miss: a 3K-token prompt (one byte a token) that
// leaves a cached chain in the middle of a JSON tools list, the costliest case (decoding
// both windows, the regexes, then JSON decoding of the enclosing values).
func BenchmarkExplain(b *testing.B) {
	var tools []string
	for i := range 12 {
		tools = append(tools, `{"type":"function","function":{"name":"tool`+string(rune('a'+i))+`","description":"`+strings.Repeat("does things ", 8)+`"}}`)
	}
	swapped := append([]string(nil), tools...)
	swapped[3], swapped[4] = swapped[4], swapped[3]
	head := strings.Repeat("You are a helpful assistant. ", 30)
	p := testText.encode(head + "[" + strings.Join(swapped, ",") + "]" + strings.Repeat(" more text", 50))
	c := testText.encode(head + "[" + strings.Join(tools, ",") + "]" + strings.Repeat(" more text", 50))
	at := 0
	for p[at] == c[at] {
		at++
	}
	bs := 16
	ev := Evidence{Block: at / bs, Offset: at, Matched: at / bs * bs, Cached: c[at/bs*bs:], BlockSize: bs}
	b.ReportAllocs()
	for b.Loop() {
		if r := Explain(ev, p, nil, testText); r.Cause != Reordered {
			b.Fatalf("%+v", r)
		}
	}
}
