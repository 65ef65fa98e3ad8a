package bench

import (
	"strings"
	"testing"
)

// FuzzParseCounters: any bytes from a target's /metrics give a snapshot or an error, never a
// panic, and a snapshot with counters never has more hits than it reports as present.
func FuzzParseCounters(f *testing.F) {
	f.Add(stockpotMetrics)
	f.Add("vllm:prefix_cache_queries_total 4\nvllm:prefix_cache_hits_total 1\n")
	f.Add("# TYPE x counter\nx{a=\"b\\\"\"} NaN 123\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		s, err := parseCounters(strings.NewReader(text))
		if err == nil && !s.Present && (s.Queries != 0 || s.Hits != 0) {
			t.Fatalf("absent counters with values: %+v", s)
		}
	})
}
