package offload

import (
	"math"
	"testing"
	"time"

	"stockpot/internal/kvtier"
)

func TestPlan(t *testing.T) {
	const mb = 1 << 20
	cfg := CostConfig{
		ReadBandwidth:          map[kvtier.Tier]float64{kvtier.Host: 1000 * mb, kvtier.Disk: 100 * mb, kvtier.Remote: 10 * mb},
		PrefillTokensPerSecond: 1000, // 16 tokens = 16 ms
		Overhead:               map[kvtier.Tier]time.Duration{kvtier.Host: 0, kvtier.Disk: time.Millisecond, kvtier.Remote: 20 * time.Millisecond},
	}
	host := Span{kvtier.Host, mb, 16, 0}     // 1 ms read vs 16 ms recompute
	disk := Span{kvtier.Disk, mb, 16, 0}     // 10 ms vs 16 ms
	remote := Span{kvtier.Remote, mb, 16, 0} // 100 ms vs 16 ms: never
	tests := []struct {
		name   string
		blocks []Span
		want   int
	}{
		{"empty", nil, 0},
		{"host", []Span{host, host, host}, 3},
		{"host then disk", []Span{host, disk, disk}, 3},
		{"remote never pays", []Span{remote, remote}, 0},
		{"stop before remote", []Span{host, host, remote, remote}, 2},
		{"remote gap then host does not pay", []Span{host, remote, host}, 1},
		{"one disk block does not pay its overhead", []Span{{kvtier.Disk, 16 * mb / 10, 16, 0}}, 0}, // 16 ms + 1 ms > 16 ms
		{"unknown tier stops", []Span{host, {kvtier.Tier(kvtier.Count), 1, 16, 0}, host}, 1},
	}
	for _, tt := range tests {
		m, err := NewCostModel(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got, saved := m.Plan(tt.blocks); got != tt.want {
			t.Errorf("%s: Plan = %d (saves %v), want %d", tt.name, got, saved, tt.want)
		} else if got == 0 && saved != 0 || got > 0 && saved <= 0 {
			t.Errorf("%s: Plan = %d saving %v", tt.name, got, saved)
		}
	}
}

func TestObservationsMove(t *testing.T) {
	m, _ := NewCostModel(CostConfig{Alpha: 0.5, ReadBandwidth: map[kvtier.Tier]float64{kvtier.Disk: 100}, PrefillTokensPerSecond: 100})
	m.ObserveRead(kvtier.Disk, 300, time.Second) // sample 300: ewma 200
	if got := m.ReadBandwidth(kvtier.Disk); got != 200 {
		t.Errorf("bandwidth = %v, want 200", got)
	}
	m.ObservePrefill(50, 0, time.Second) // sample 50: ewma 75
	if got := m.PrefillRate(); got != 75 {
		t.Errorf("prefill = %v, want 75", got)
	}
	m.ObserveRead(kvtier.Tier(kvtier.Count), 10, time.Second)
	if got := m.ReadBandwidth(kvtier.Tier(kvtier.Count)); got != 10 {
		t.Errorf("a new tier starts at its first sample: %v, want 10", got)
	}
	m.ObserveRead(kvtier.Disk, 0, 0) // ignored
	if got := m.ReadBandwidth(kvtier.Disk); got != 200 {
		t.Errorf("an empty observation moved the estimate to %v", got)
	}
	// A tier that turns slow switches restores off.
	m2, _ := NewCostModel(CostConfig{PrefillTokensPerSecond: 1000, Overhead: map[kvtier.Tier]time.Duration{kvtier.Disk: 0}})
	blk := []Span{{kvtier.Disk, 1 << 20, 16, 0}}
	if n, _ := m2.Plan(blk); n != 1 {
		t.Fatalf("fast disk: Plan = %d, want 1", n)
	}
	for range 20 {
		m2.ObserveRead(kvtier.Disk, 1<<20, 100*time.Millisecond)
	}
	if n, _ := m2.Plan(blk); n != 0 {
		t.Fatalf("slow disk: Plan = %d, want 0", n)
	}
}

func TestCostConfigValidate(t *testing.T) {
	for name, cfg := range map[string]CostConfig{
		"alpha":     {Alpha: 2},
		"prefill":   {PrefillTokensPerSecond: -1},
		"bandwidth": {ReadBandwidth: map[kvtier.Tier]float64{kvtier.Disk: 0}},
	} {
		if _, err := NewCostModel(cfg); err == nil {
			t.Errorf("%s: accepted %+v", name, cfg)
		}
	}
}

// TestPlanAtDepth: with AttendCost, recomputing a block costs more the deeper it lies, so a
// read that does not pay at the start of a prompt pays far into a long one, and a prefill
// step's rate is measured in token-equivalents (its attended positions counted).
func TestPlanAtDepth(t *testing.T) {
	const q = 1.0 / 4096 // attending 4096 positions costs as much as a token's other work
	cfg := CostConfig{PrefillTokensPerSecond: 1000, AttendCost: q,
		ReadBandwidth: map[kvtier.Tier]float64{kvtier.Disk: 100e6}, Overhead: map[kvtier.Tier]time.Duration{kvtier.Disk: 0}}
	m, err := NewCostModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 16 tokens at 1000/s: 16 ms to recompute at position 0; reading 2 MB at 100 MB/s: 20 ms.
	blk := func(pos int) []Span { return []Span{{Tier: kvtier.Disk, Bytes: 2e6, Tokens: 16, Pos: pos}} }
	for _, c := range []struct {
		pos  int
		want int
	}{{0, 0}, {512, 0}, {4096, 1}, {131072, 1}} {
		// at pos: 16·(1 + q·(pos + 7.5)) ms against 20 ms
		if n, saved := m.Plan(blk(c.pos)); n != c.want {
			t.Errorf("block at %d: Plan = %d (saves %v), want %d", c.pos, n, saved, c.want)
		}
	}
	// A step of 512 tokens at positions 4096..4607 in 1 s: 512·(1 + q·4351.5) ≈ 1056 equivalents.
	m.ObservePrefill(512, 512*4096+512*511/2, time.Second)
	want := 1000 + 0.2*(512*(1+q*4351.5)-1000)
	if got := m.PrefillRate(); math.Abs(got-want) > 1e-6 {
		t.Errorf("rate %v, want %v", got, want)
	}
	if _, err := NewCostModel(CostConfig{AttendCost: -1}); err == nil {
		t.Error("a negative attend cost was accepted")
	}
}

// TestReadChunk: the disk tier is read a key per Get, host in one Get, and the remote tier in
// calls of about 4 MiB whatever the record size, so that no call of a long prompt's restore
// outlasts the per-call timeout.
func TestReadChunk(t *testing.T) {
	if got := readChunk(kvtier.Disk, 1<<20); got != 1 {
		t.Errorf("disk chunk %d, want 1", got)
	}
	if got := readChunk(kvtier.Host, 1<<20); got != 0 {
		t.Errorf("host chunk %d, want 0 (one Get)", got)
	}
	for _, c := range []struct {
		rec  int64
		want int
	}{{10 << 10, 409}, {1 << 20, 4}, {8 << 20, 1}, {0, 4 << 20}} {
		if got := readChunk(kvtier.Remote, c.rec); got != c.want {
			t.Errorf("remote chunk for %d-byte records: %d keys, want %d", c.rec, got, c.want)
		}
	}
}

// TestEstimate: the read time is each tier's overhead once plus its bytes at its bandwidth,
// the recompute time the blocks' tokens at the prefill rate (deeper ones dearer).
func TestEstimate(t *testing.T) {
	const mb = 1 << 20
	m, err := NewCostModel(CostConfig{
		ReadBandwidth:          map[kvtier.Tier]float64{kvtier.Host: 1000 * mb, kvtier.Disk: 100 * mb},
		PrefillTokensPerSecond: 1000,
		Overhead:               map[kvtier.Tier]time.Duration{kvtier.Host: 0, kvtier.Disk: time.Millisecond, kvtier.Remote: 0},
		AttendCost:             0.001,
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := []Span{{kvtier.Host, mb, 16, 0}, {kvtier.Disk, mb, 16, 16}, {kvtier.Disk, mb, 16, 32}}
	restore, recompute := m.Estimate(spans)
	if want := 22 * time.Millisecond; restore < want-time.Microsecond || restore > want+time.Microsecond {
		t.Errorf("restore %v, want %v (1 ms host + 1 ms disk overhead + 2 × 10 ms disk)", restore, want)
	}
	// 48 tokens, each 1 + 0.001·position: 48 + 0.001·(0+…+47) = 49.128 token-equivalents.
	if want := 49128 * time.Microsecond; recompute < want-time.Microsecond || recompute > want+time.Microsecond {
		t.Errorf("recompute %v, want %v", recompute, want)
	}
	if r, c := m.Estimate(nil); r != 0 || c != 0 {
		t.Errorf("no blocks: %v, %v", r, c)
	}
	if r, _ := m.Estimate([]Span{{kvtier.Tier(kvtier.Count), mb, 16, 0}}); r != math.MaxInt64 {
		t.Errorf("a tier of unknown bandwidth: restore %v, want unbounded", r)
	}
}
