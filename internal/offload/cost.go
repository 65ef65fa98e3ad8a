package offload

import (
	"fmt"
	"math"
	"time"

	"stockpot/internal/kvtier"
)

// CostConfig configures a CostModel. Bandwidths are bytes per second.
type CostConfig struct {
	// Alpha is the EWMA weight of a new observation, in (0, 1]. Default 0.2:
	// about the last ten reads matter, so one slow read does not switch
	// restores off, and a tier that stays slow does within a few.
	Alpha float64
	// ReadBandwidth is the prior per tier, used until a read is observed.
	ReadBandwidth map[kvtier.Tier]float64
	// PrefillTokensPerSecond is the prior prefill rate.
	PrefillTokensPerSecond float64
	// Overhead is the fixed cost of one batched read from a tier (a call,
	// a round trip, the wake-up of the waiting request).
	Overhead map[kvtier.Tier]time.Duration
	// AttendCost is the work of attending one earlier position, as a fraction
	// of a token's position-independent work (model.Config.AttendCost): a
	// token at position p costs 1 + AttendCost·p token-equivalents to
	// recompute. 0 treats every position alike. With it the model prices a
	// block deep in a long prompt above one at its start, as prefill does
	// (its attention grows with the context), so a slow tier is still worth
	// reading at 128K tokens where it is not at 1K.
	AttendCost float64
}

// DefaultCostConfig returns priors for a CPU engine with local tiers:
// host RAM copies at ~10 GB/s, a local SSD through the page cache at
// ~1 GB/s, Redis on a LAN at ~100 MB/s; a small model prefills ~1000
// tokens/s. The EWMAs replace them after the first measurements.
func DefaultCostConfig() CostConfig {
	return CostConfig{
		Alpha:                  0.2,
		ReadBandwidth:          map[kvtier.Tier]float64{kvtier.Host: 10e9, kvtier.Disk: 1e9, kvtier.Remote: 100e6, kvtier.Transfer: 10e9},
		PrefillTokensPerSecond: 1000,
		Overhead:               map[kvtier.Tier]time.Duration{kvtier.Host: 5 * time.Microsecond, kvtier.Disk: 200 * time.Microsecond, kvtier.Remote: time.Millisecond, kvtier.Transfer: 5 * time.Microsecond},
	}
}

func (c CostConfig) validate() (CostConfig, error) {
	d := DefaultCostConfig()
	if c.Alpha == 0 {
		c.Alpha = d.Alpha
	}
	if c.Alpha < 0 || c.Alpha > 1 {
		return c, fmt.Errorf("offload: cost alpha %v outside (0, 1]", c.Alpha)
	}
	if c.PrefillTokensPerSecond == 0 {
		c.PrefillTokensPerSecond = d.PrefillTokensPerSecond
	}
	if c.PrefillTokensPerSecond < 0 {
		return c, fmt.Errorf("offload: prefill rate %v < 0", c.PrefillTokensPerSecond)
	}
	if c.AttendCost < 0 || c.AttendCost > 1e6 {
		return c, fmt.Errorf("offload: attend cost %v outside [0, 1e6]", c.AttendCost)
	}
	bw := make(map[kvtier.Tier]float64)
	for k, v := range d.ReadBandwidth {
		bw[k] = v
	}
	for k, v := range c.ReadBandwidth {
		if v <= 0 {
			return c, fmt.Errorf("offload: read bandwidth of %q is %v, must be > 0", k.String(), v)
		}
		bw[k] = v
	}
	c.ReadBandwidth = bw
	ov := make(map[kvtier.Tier]time.Duration)
	for k, v := range d.Overhead {
		ov[k] = v
	}
	for k, v := range c.Overhead {
		ov[k] = v
	}
	c.Overhead = ov
	return c, nil
}

// CostModel decides restore versus recompute. Pure: not safe for concurrent
// use; the Fetcher guards its own with a mutex.
type CostModel struct {
	cfg     CostConfig
	bw      map[kvtier.Tier]float64 // bytes/s per tier, EWMA
	prefill float64                 // token-equivalents/s (see CostConfig.AttendCost), EWMA
}

// NewCostModel returns a model at its priors.
func NewCostModel(cfg CostConfig) (*CostModel, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	m := &CostModel{cfg: cfg, bw: make(map[kvtier.Tier]float64), prefill: cfg.PrefillTokensPerSecond}
	for k, v := range cfg.ReadBandwidth {
		m.bw[k] = v
	}
	return m, nil
}

func (m *CostModel) ewma(old, sample float64) float64 {
	return old + m.cfg.Alpha*(sample-old)
}

// ObserveRead feeds one measured read of bytes from tier taking d.
func (m *CostModel) ObserveRead(tier kvtier.Tier, bytes int64, d time.Duration) {
	if bytes <= 0 || d <= 0 {
		return
	}
	sample := float64(bytes) / d.Seconds()
	if old, ok := m.bw[tier]; ok {
		m.bw[tier] = m.ewma(old, sample)
	} else {
		m.bw[tier] = sample
	}
}

// ObservePrefill feeds one measured prefill of tokens taking d, whose tokens attended over
// attended earlier positions in all (Σ of their positions).
func (m *CostModel) ObservePrefill(tokens int, attended int64, d time.Duration) {
	if tokens <= 0 || d <= 0 || attended < 0 {
		return
	}
	work := float64(tokens) + m.cfg.AttendCost*float64(attended)
	m.prefill = m.ewma(m.prefill, work/d.Seconds())
}

// recompute is the time recomputing span b would take at the current rate.
func (m *CostModel) recompute(b Span) float64 {
	k, p := float64(b.Tokens), float64(b.Pos)
	return (k + m.cfg.AttendCost*(k*p+k*(k-1)/2)) / m.prefill
}

// ReadBandwidth returns the current estimate for tier in bytes/s (0 if
// unknown: such a tier is never worth reading).
func (m *CostModel) ReadBandwidth(tier kvtier.Tier) float64 { return m.bw[tier] }

// PrefillRate returns the current estimate in token-equivalents/s: tokens/s at position 0.
func (m *CostModel) PrefillRate() float64 { return m.prefill }

// Span is one block a restore could read.
type Span struct {
	Tier   kvtier.Tier
	Bytes  int64 // bytes to read
	Tokens int   // tokens it saves from recompute
	Pos    int   // position of its first token (deeper blocks cost more to recompute)
}

// Plan returns how many leading blocks to restore (0..len(blocks)) and the
// time that saves over recomputing them. See the package doc for the rule.
func (m *CostModel) Plan(blocks []Span) (n int, saved time.Duration) {
	if m.prefill <= 0 {
		return 0, 0
	}
	var best, cur float64
	used := make(map[kvtier.Tier]bool, 3)
	for i, b := range blocks {
		bw := m.bw[b.Tier]
		if bw <= 0 {
			break // an unknown tier: nothing past it can be restored
		}
		if !used[b.Tier] {
			used[b.Tier] = true
			cur -= m.cfg.Overhead[b.Tier].Seconds()
		}
		cur += m.recompute(b) - float64(b.Bytes)/bw
		if cur > best {
			best, n = cur, i+1
		}
	}
	return n, time.Duration(best * float64(time.Second))
}

// Estimate returns the time reading blocks would take (each tier's overhead once, then its
// bytes at its bandwidth) and the time recomputing them would (their token-equivalents at the
// prefill rate): what Plan weighs, for the engine's prefetch wait (engine.PrefetchCost). An
// unknown tier or no prefill rate makes the read unbounded (math.MaxInt64).
func (m *CostModel) Estimate(blocks []Span) (restore, recompute time.Duration) {
	var read, comp float64
	used := make(map[kvtier.Tier]bool, 3)
	for _, b := range blocks {
		bw := m.bw[b.Tier]
		if bw <= 0 {
			return math.MaxInt64, seconds(comp)
		}
		if !used[b.Tier] {
			used[b.Tier] = true
			read += m.cfg.Overhead[b.Tier].Seconds()
		}
		read += float64(b.Bytes) / bw
		if m.prefill > 0 {
			comp += m.recompute(b)
		}
	}
	if m.prefill <= 0 {
		return math.MaxInt64, 0
	}
	return seconds(read), seconds(comp)
}

// seconds converts s seconds to a Duration, saturating.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}
