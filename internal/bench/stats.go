package bench

import (
	"math"
	"sort"
)

// Percentiles holds latency percentiles in milliseconds. A nil *Percentiles (JSON null) means
// there were no samples.
type Percentiles struct {
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P95   float64 `json:"p95"`
	P99   float64 `json:"p99"`
	Mean  float64 `json:"mean"`
	Count int     `json:"count"`
}

// percentile returns the q-quantile (0 ≤ q ≤ 1) of sorted xs by linear interpolation between
// closest ranks (the "R-7" definition numpy and spreadsheets use). xs must be sorted and
// non-empty.
func percentile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 1 {
		return sorted[0]
	}
	h := q * float64(n-1)
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// summarize returns p50/p90/p95/p99/mean of xs, or nil when xs is empty. xs is not modified.
func summarize(xs []float64) *Percentiles {
	if len(xs) == 0 {
		return nil
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	sum := 0.0
	for _, x := range s {
		sum += x
	}
	return &Percentiles{
		P50: percentile(s, 0.50), P90: percentile(s, 0.90), P95: percentile(s, 0.95), P99: percentile(s, 0.99),
		Mean: sum / float64(len(s)), Count: len(s),
	}
}
