package runner

import (
	"strings"
	"testing"
)

// TestDeltaText: deltaText is strings.Builder's concatenation, with one piece uncopied.
func TestDeltaText(t *testing.T) {
	for _, parts := range [][]string{{}, {""}, {"a"}, {"", "a", ""}, {"a", "b"}, {"a", "", "b", "c"}} {
		var d deltaText
		var want strings.Builder
		d.WriteString("stale")
		d.Reset()
		for _, p := range parts {
			d.WriteString(p)
			want.WriteString(p)
		}
		if d.String() != want.String() || d.Len() != want.Len() {
			t.Errorf("%q: have %q (len %d), want %q", parts, d.String(), d.Len(), want.String())
		}
	}
}
