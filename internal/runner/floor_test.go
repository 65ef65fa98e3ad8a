package runner

import (
	"testing"
	"time"

	"stockpot/internal/engine"
)

// TestLedger: knowledge is per principal and per chain prefix, a block forgets its oldest
// knower past ledgerKnowers, and the ledger forgets its least recent blocks past its capacity.
func TestLedger(t *testing.T) {
	l := newLedger(4)
	toks := make([]int32, 64)
	for i := range toks {
		toks[i] = int32(i)
	}
	keys := floorKeys("", toks, 16, nil)
	if len(keys) != 4 {
		t.Fatalf("%d keys for 4 blocks", len(keys))
	}
	if other := floorKeys("salt", toks, 16, nil); other[0] == keys[0] {
		t.Error("the salt does not change the chain")
	}
	if ext := floorKeys("", toks, 16, keys[:2:2]); ext[3] != keys[3] {
		t.Error("extending a chain differs from computing it whole")
	}
	l.learn(1, keys[:2])
	if got := l.knownPrefix(1, keys); got != 2 {
		t.Errorf("known prefix %d, want 2", got)
	}
	if got := l.knownPrefix(2, keys); got != 0 {
		t.Errorf("another principal knows %d", got)
	}
	for p := uint64(2); p <= 5; p++ {
		l.learn(p, keys[:1])
	}
	if l.knownPrefix(1, keys) != 0 || l.knownPrefix(5, keys) != 1 {
		t.Error("a fifth knower did not replace the oldest")
	}
	l.learn(9, keys)
	more := floorKeys("x", toks, 16, nil)
	l.learn(9, more[:1]) // capacity 4: the least recent block goes
	if n := l.len(); n != 4 {
		t.Errorf("ledger holds %d blocks, want 4", n)
	}
	if got := l.knownPrefix(9, keys); got != 0 {
		t.Errorf("the least recently used block was kept (known prefix %d)", got)
	}
}

// TestMissEstimator: the estimate follows a linear TTFT plus the residuals' high quantile,
// and is 0 until enough samples came.
func TestMissEstimator(t *testing.T) {
	var e missEstimator
	if e.estimate(100) != 0 {
		t.Error("an estimate before any sample")
	}
	// TTFT = 5ms + 0.1ms per token, every tenth sample 2ms slow and every tenth 2ms fast.
	for i := range 400 {
		x := 16 * (1 + i%32)
		y := 5*time.Millisecond + time.Duration(x)*100*time.Microsecond
		if i%10 == 0 {
			y += 2 * time.Millisecond
		} else if i%10 == 5 {
			y -= 2 * time.Millisecond
		}
		e.observe(x, y)
	}
	got := e.estimate(256)
	fit := 5*time.Millisecond + 256*100*time.Microsecond
	if got < fit+time.Millisecond || got > fit+3*time.Millisecond {
		t.Errorf("estimate(256) %v, want about the fit %v + 2ms (the p95 residual)", got, fit)
	}
}

// TestMissEstimatorSeed: seeded with a few misses on a line, the estimator has its
// estimatorMinSamples at once and its estimate is at least the line's.
func TestMissEstimatorSeed(t *testing.T) {
	var e missEstimator
	line := func(x int) time.Duration { return 2*time.Millisecond + time.Duration(x)*500*time.Microsecond }
	e.seed([]floorSample{{17, line(17)}, {256, line(256)}, {0, 0}}) // the timeless one is ignored
	if n := e.samples(); n != estimatorMinSamples {
		t.Fatalf("seeded with %d samples, want %d", n, estimatorMinSamples)
	}
	for _, x := range []int{17, 100, 256, 1000} {
		if got := e.estimate(x); got < line(x) {
			t.Errorf("estimate(%d) %v under the seeded line's %v", x, got, line(x))
		}
	}
	var none missEstimator
	none.seed([]floorSample{{5, 0}})
	if none.samples() != 0 {
		t.Error("a seed without times counted")
	}
}

// TestMaskUsage: reuse past the known tokens becomes computed, in chain order.
func TestMaskUsage(t *testing.T) {
	u := engine.Usage{PromptTokens: 100, DeviceTokens: 48, HostTokens: 32, ComputedTokens: 20, DiscardedTokens: 16,
		DiscardedBy: map[string]int{"checksum": 16}, QueueMs: 1, RestoreMs: 3, PrefillMs: 2, TTFTMs: 6,
		Pins: []engine.PinResult{{Requested: 64, Pinned: 64, Created: 0}}}
	if n := maskUsage(&u, 64, 40*time.Millisecond); n != 16 {
		t.Errorf("masked %d, want 16", n)
	}
	if u.DeviceTokens != 48 || u.HostTokens != 16 || u.ComputedTokens != 36 || u.DiscardedTokens != 0 || u.DiscardedBy != nil {
		t.Errorf("masked usage %+v", u)
	}
	if u.TTFTMs != 40 || u.RestoreMs != 0 || u.PrefillMs != 39 || u.Pins[0].Created != 0 {
		t.Errorf("masked timings or pins %+v", u)
	}
	u2 := engine.Usage{PromptTokens: 100, DeviceTokens: 96, ComputedTokens: 4, Pins: []engine.PinResult{{Requested: 96, Pinned: 96}}}
	maskUsage(&u2, 0, time.Millisecond)
	if u2.DeviceTokens != 0 || u2.ComputedTokens != 100 || u2.Pins[0].Created != 96 {
		t.Errorf("fully masked %+v", u2)
	}
}
