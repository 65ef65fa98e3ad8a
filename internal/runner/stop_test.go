package runner

import (
	"strings"
	"testing"
)

// stopOracle is the dumb version: concatenate everything, cut at the first stop string.
func stopOracle(pieces []string, stops []string) (string, bool) {
	all := strings.Join(pieces, "")
	cut := -1
	for _, s := range stops {
		if i := strings.Index(all, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut < 0 {
		return all, false
	}
	return all[:cut], true
}

func runStop(pieces, stops []string) (string, bool, []string) {
	f := stopFilter{stops: stops}
	var out strings.Builder
	var emitted []string
	for _, p := range pieces {
		e, hit := f.push(p)
		out.WriteString(e)
		emitted = append(emitted, e)
		if hit {
			return out.String(), true, emitted
		}
	}
	out.WriteString(f.flush())
	return out.String(), false, emitted
}

func TestStopFilter(t *testing.T) {
	for _, tc := range []struct {
		pieces, stops []string
	}{
		{[]string{"hello", " wor", "ld"}, []string{"world"}},
		{[]string{"hel", "lo ", "wo", "r", "ld", "!"}, []string{"wor"}},
		{[]string{"a", "b", "a", "b", "c"}, []string{"abc"}},
		{[]string{"xxab", "ab", "abc", "d"}, []string{"abcd"}},
		{[]string{"the end"}, []string{"zzz"}},
		{[]string{"ca", "fé", " ok"}, []string{"é o"}},
		{[]string{"a\n", "\nb"}, []string{"\n\n", "b"}},
		{[]string{"12", "3", "45"}, []string{"345", "23"}},
		{[]string{"ab"}, []string{"abc"}},
	} {
		want, wantHit := stopOracle(tc.pieces, tc.stops)
		got, hit, _ := runStop(tc.pieces, tc.stops)
		if got != want || hit != wantHit {
			t.Errorf("pieces %q stops %q: have %q,%v want %q,%v", tc.pieces, tc.stops, got, hit, want, wantHit)
		}
	}
}

func TestStopFilterHoldsBack(t *testing.T) {
	_, _, emitted := runStop([]string{"hello wo", "rld"}, []string{"world"})
	if emitted[0] != "hello " {
		t.Errorf("first emit = %q; want the possible stop prefix held back", emitted[0])
	}
}

// TestStopFilterOracle checks random splits of random texts against the oracle.
func TestStopFilterOracle(t *testing.T) {
	seed := uint32(1)
	next := func(n int) int { seed = seed*1664525 + 1013904223; return int(seed>>8) % n }
	alphabet := []string{"a", "b", "c", "é"}
	for iter := 0; iter < 3000; iter++ {
		var pieces []string
		for n := next(6); n >= 0; n-- {
			var p strings.Builder
			for m := next(4); m > 0; m-- {
				p.WriteString(alphabet[next(len(alphabet))])
			}
			pieces = append(pieces, p.String())
		}
		var stops []string
		for n := next(3) + 1; n > 0; n-- {
			var s strings.Builder
			for m := next(3) + 1; m > 0; m-- {
				s.WriteString(alphabet[next(len(alphabet))])
			}
			stops = append(stops, s.String())
		}
		want, wantHit := stopOracle(pieces, stops)
		got, hit, _ := runStop(pieces, stops)
		if got != want || hit != wantHit {
			t.Fatalf("pieces %q stops %q: have %q,%v want %q,%v", pieces, stops, got, hit, want, wantHit)
		}
	}
}
