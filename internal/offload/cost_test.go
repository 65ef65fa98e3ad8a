package offload

import (
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	const mb = 1 << 20
	cfg := CostConfig{
		ReadBandwidth:          map[string]float64{"host": 1000 * mb, "disk": 100 * mb, "remote": 10 * mb},
		PrefillTokensPerSecond: 1000, // 16 tokens = 16 ms
		Overhead:               map[string]time.Duration{"host": 0, "disk": time.Millisecond, "remote": 20 * time.Millisecond},
	}
	host := Span{"host", mb, 16}     // 1 ms read vs 16 ms recompute
	disk := Span{"disk", mb, 16}     // 10 ms vs 16 ms
	remote := Span{"remote", mb, 16} // 100 ms vs 16 ms: never
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
		{"one disk block does not pay its overhead", []Span{{"disk", 16 * mb / 10, 16}}, 0}, // 16 ms + 1 ms > 16 ms
		{"unknown tier stops", []Span{host, {"tape", 1, 16}, host}, 1},
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
	m, _ := NewCostModel(CostConfig{Alpha: 0.5, ReadBandwidth: map[string]float64{"disk": 100}, PrefillTokensPerSecond: 100})
	m.ObserveRead("disk", 300, time.Second) // sample 300: ewma 200
	if got := m.ReadBandwidth("disk"); got != 200 {
		t.Errorf("bandwidth = %v, want 200", got)
	}
	m.ObservePrefill(50, time.Second) // sample 50: ewma 75
	if got := m.PrefillRate(); got != 75 {
		t.Errorf("prefill = %v, want 75", got)
	}
	m.ObserveRead("new", 10, time.Second)
	if got := m.ReadBandwidth("new"); got != 10 {
		t.Errorf("a new tier starts at its first sample: %v, want 10", got)
	}
	m.ObserveRead("disk", 0, 0) // ignored
	if got := m.ReadBandwidth("disk"); got != 200 {
		t.Errorf("an empty observation moved the estimate to %v", got)
	}
	// A tier that turns slow switches restores off.
	m2, _ := NewCostModel(CostConfig{PrefillTokensPerSecond: 1000, Overhead: map[string]time.Duration{"disk": 0}})
	blk := []Span{{"disk", 1 << 20, 16}}
	if n, _ := m2.Plan(blk); n != 1 {
		t.Fatalf("fast disk: Plan = %d, want 1", n)
	}
	for range 20 {
		m2.ObserveRead("disk", 1<<20, 100*time.Millisecond)
	}
	if n, _ := m2.Plan(blk); n != 0 {
		t.Fatalf("slow disk: Plan = %d, want 0", n)
	}
}

func TestCostConfigValidate(t *testing.T) {
	for name, cfg := range map[string]CostConfig{
		"alpha":     {Alpha: 2},
		"prefill":   {PrefillTokensPerSecond: -1},
		"bandwidth": {ReadBandwidth: map[string]float64{"disk": 0}},
	} {
		if _, err := NewCostModel(cfg); err == nil {
			t.Errorf("%s: accepted %+v", name, cfg)
		}
	}
}
