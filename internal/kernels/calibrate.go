package kernels

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"stockpot/internal/quant"
)

// Start-up calibration of the quantized kernels' prefetch distances.
//
// How far ahead of the weight rows being read the kernels should prefetch depends on the
// machine: its memory latency, its hardware prefetchers, how many loads it keeps in flight.
// 8 KB won on the project's VM (Q8_0 decode rows 28 → 45 GB/s against one row group); another
// host of the same kind ran the same code at 0.66–0.86× llama.cpp's single-stream decode. So
// the distance is measured where the server runs: CalibratePrefetch streams the model's own
// products (those whose kernels read the distance on this CPU, quant.PrefetchKnob) through
// decode-shaped MatMuls (one activation row, the pool's threads) at each candidate distance,
// the candidates alternating round by round so that a burst of load hits them alike, keeps
// each candidate's best pass, and picks the fastest. The default stays unless another beats
// it by more than calibrationMargin: a choice that the machine's noise makes is no choice.
// Values never depend on it (a prefetch moves bytes, not results).

// Candidate distances in bytes for each knob (quant.Prefetch): 0 is one row group ahead for
// the row kernels (the pair kernels under rows; without them, Q4_0/Q5_0/Q8_0 under k-ahead),
// the line being read for the K-quant ones (no lead).
var (
	rowsCandidates   = []int{0, 2048, 4096, 8192, 16384, 32768}
	kAheadCandidates = []int{0, 1024, 2048, 4096, 8192}
)

const (
	calibrationRounds = 3
	calibrationMargin = 0.03 // another distance must be 3% faster than the default
	// calibrationBytes bounds one pass: the largest products first, up to 256 MiB, so that a
	// large model calibrates in about as long as a small one (a pass streams past any cache).
	calibrationBytes = 256 << 20
)

// KnobCalibration is one distance's measurement.
type KnobCalibration struct {
	Knob       string    // quant.KnobRows or quant.KnobKAhead
	Products   int       // matrices streamed per pass
	Bytes      int64     // bytes streamed per pass
	Candidates []int     // distances tried
	GBs        []float64 // each candidate's best pass, GB/s
	Default    int       // the distance in use before (the compiled default in a fresh process)
	Chosen     int
}

// PrefetchCalibration is what CalibratePrefetch measured and set.
type PrefetchCalibration struct {
	Chosen quant.Prefetch
	Knobs  []KnobCalibration // the knobs the model's products read; none: nothing to measure
	Took   time.Duration
}

// String is one log line: "prefetch calibrated in 105ms: rows 8192 (was 8192; GB/s 0:24.3 … 32768:22.0; 211 products, 112 MiB a pass)".
func (c PrefetchCalibration) String() string {
	if len(c.Knobs) == 0 {
		return fmt.Sprintf("prefetch: nothing to calibrate (no product reads a distance on this CPU); rows %d, k-ahead %d",
			c.Chosen.Rows, c.Chosen.KAhead)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "prefetch calibrated in %v:", c.Took.Round(time.Millisecond))
	for _, k := range c.Knobs {
		fmt.Fprintf(&b, " %s %d (was %d; GB/s", k.Knob, k.Chosen, k.Default)
		for i, d := range k.Candidates {
			fmt.Fprintf(&b, " %d:%.1f", d, k.GBs[i])
		}
		fmt.Fprintf(&b, "; %d products, %d MiB a pass)", k.Products, k.Bytes>>20)
	}
	return b.String()
}

// CalibratePrefetch measures and sets the prefetch distances for products (a model's
// weights, model.Model.Products) on p's threads. It runs MatMuls on p: call it before
// serving, while nothing else uses p or the quant kernels (quant.SetPrefetch's rule).
func CalibratePrefetch(p *Pool, products []*Weight) PrefetchCalibration {
	t0 := time.Now()
	cur := quant.CurrentPrefetch()
	out := PrefetchCalibration{Chosen: cur}
	for _, knob := range []string{quant.KnobRows, quant.KnobKAhead} {
		ws := calibrationSet(products, knob)
		if len(ws) == 0 {
			continue
		}
		cands, def := rowsCandidates, cur.Rows
		set := func(d int) { quant.SetPrefetch(quant.Prefetch{Rows: d, KAhead: out.Chosen.KAhead}) }
		if knob == quant.KnobKAhead {
			cands, def = kAheadCandidates, cur.KAhead
			set = func(d int) { quant.SetPrefetch(quant.Prefetch{Rows: out.Chosen.Rows, KAhead: d}) }
		}
		k := measureKnob(p, ws, knob, cands, def, set)
		set(k.Chosen)
		out.Chosen = quant.CurrentPrefetch()
		out.Knobs = append(out.Knobs, k)
	}
	out.Took = time.Since(t0)
	return out
}

// calibrationSet is the products whose kernels read knob, largest first, up to
// calibrationBytes (at least one).
func calibrationSet(products []*Weight, knob string) []*Weight {
	var ws []*Weight
	for _, w := range products {
		if w != nil && quant.PrefetchKnob(w.Type) == knob {
			ws = append(ws, w)
		}
	}
	sortByBytesDesc(ws)
	var n int64
	for i, w := range ws {
		n += int64(len(w.Data))
		if n >= calibrationBytes {
			return ws[:i+1]
		}
	}
	return ws
}

func sortByBytesDesc(ws []*Weight) {
	for i := 1; i < len(ws); i++ { // insertion sort: a model has a few hundred products
		for j := i; j > 0 && len(ws[j].Data) > len(ws[j-1].Data); j-- {
			ws[j], ws[j-1] = ws[j-1], ws[j]
		}
	}
}

// measureKnob times one pass over ws (one decode-shaped MatMul each) at every candidate,
// calibrationRounds rounds with the candidates' order rotated each round, and chooses.
func measureKnob(p *Pool, ws []*Weight, knob string, cands []int, def int, set func(int)) KnobCalibration {
	maxRows, maxCols := 0, 0
	var bytes int64
	for _, w := range ws {
		maxRows, maxCols = max(maxRows, w.Rows), max(maxCols, w.Cols)
		bytes += int64(len(w.Data))
	}
	x, dst := make([]float32, maxCols), make([]float32, maxRows)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	pass := func() time.Duration {
		t0 := time.Now()
		for _, w := range ws {
			MatMul(p, dst[:w.Rows], x[:w.Cols], 1, w)
		}
		return time.Since(t0)
	}
	pass() // page the weights in
	best := make([]time.Duration, len(cands))
	for round := range calibrationRounds {
		for i := range cands {
			c := (i + round) % len(cands)
			set(cands[c])
			if d := pass(); best[c] == 0 || d < best[c] {
				best[c] = d
			}
		}
	}
	k := KnobCalibration{Knob: knob, Products: len(ws), Bytes: bytes, Candidates: cands, Default: def,
		Chosen: choosePrefetch(cands, best, def, calibrationMargin)}
	for _, d := range best {
		k.GBs = append(k.GBs, float64(bytes)/d.Seconds()/1e9)
	}
	return k
}

// choosePrefetch returns the candidate with the shortest time, or def when def was measured
// and no candidate is more than margin faster than it (pure: calibrate_test.go).
func choosePrefetch(cands []int, best []time.Duration, def int, margin float64) int {
	bi := -1
	for i, d := range best {
		if d > 0 && (bi < 0 || d < best[bi]) {
			bi = i
		}
	}
	if bi < 0 {
		return def
	}
	for i, c := range cands {
		if c == def && best[i] > 0 && float64(best[i]) <= float64(best[bi])*(1+margin) {
			return def
		}
	}
	return cands[bi]
}
