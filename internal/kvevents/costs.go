package kvevents

import (
	"fmt"
	"math"
	"strconv"

	"stockpot/internal/kvtier"
)

// Costs is a replica's current restore-cost figures (its offload cost model's estimates):
// what a router needs to weigh a block by the tier it sits in. A block from tier t saves
// about 1 − (BlockBytes / ReadBandwidth[t]) / (BlockSize / PrefillTokensPerSecond) of its
// prefill. ReadBandwidth is 0 for a tier the replica does not have; a replica with the
// remote tier (ReadBandwidth[kvtier.Remote] > 0) can restore what any replica stored there.
type Costs struct {
	PrefillTokensPerSecond float64
	BlockSize              int                   // tokens per block
	BlockBytes             int64                 // bytes of one block's K/V as the tiers store it
	ReadBandwidth          [kvtier.Count]float64 // bytes/s per tier; the device's is unused
}

// CostSink is a Sink that also takes the replica's cost figures: a "costs" line of the
// stream, or the costs of a snapshot. A Subscriber calls it when its Sink has the method.
type CostSink interface {
	Costs(c Costs)
}

// wireCosts is the "costs" object: in a {"type":"costs"} line and a snapshot.
type wireCosts struct {
	PrefillTPS float64            `json:"prefill_tps"`
	BlockSize  int                `json:"block_size"`
	BlockBytes int64              `json:"block_bytes"`
	ReadBPS    map[string]float64 `json:"read_bps"`
}

func (c *Costs) wire() *wireCosts {
	w := &wireCosts{PrefillTPS: c.PrefillTokensPerSecond, BlockSize: c.BlockSize, BlockBytes: c.BlockBytes,
		ReadBPS: map[string]float64{}}
	for _, t := range kvtier.Below {
		if bw := c.ReadBandwidth[t]; bw > 0 {
			w.ReadBPS[t.String()] = bw
		}
	}
	return w
}

// decodeCosts checks a costs object from the wire: finite, non-negative figures and known
// tiers only.
func decodeCosts(w *wireCosts) (Costs, error) {
	bad := func(v float64) bool { return !(v >= 0) || math.IsInf(v, 0) }
	if bad(w.PrefillTPS) || w.BlockSize < 0 || w.BlockBytes < 0 {
		return Costs{}, fmt.Errorf("kvevents: costs: prefill_tps %v, block_size %d, block_bytes %d", w.PrefillTPS, w.BlockSize, w.BlockBytes)
	}
	c := Costs{PrefillTokensPerSecond: w.PrefillTPS, BlockSize: w.BlockSize, BlockBytes: w.BlockBytes}
	for name, bw := range w.ReadBPS {
		t, err := parseTier(name)
		if err != nil {
			return Costs{}, err
		}
		if t == kvtier.Device || bad(bw) {
			return Costs{}, fmt.Errorf("kvevents: costs: read_bps %q = %v", name, bw)
		}
		c.ReadBandwidth[t] = bw
	}
	return c, nil
}

// appendCostsJSON appends c as one stream line (with the newline).
func appendCostsJSON(b []byte, seq uint64, c *Costs) []byte {
	b = append(b, `{"type":"costs","seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"costs":{"prefill_tps":`...)
	b = strconv.AppendFloat(b, c.PrefillTokensPerSecond, 'g', -1, 64)
	b = append(b, `,"block_size":`...)
	b = strconv.AppendInt(b, int64(c.BlockSize), 10)
	b = append(b, `,"block_bytes":`...)
	b = strconv.AppendInt(b, c.BlockBytes, 10)
	b = append(b, `,"read_bps":{`...)
	first := true
	for _, t := range kvtier.Below {
		if bw := c.ReadBandwidth[t]; bw > 0 {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = append(b, '"')
			b = append(b, t.String()...)
			b = append(b, `":`...)
			b = strconv.AppendFloat(b, bw, 'g', -1, 64)
		}
	}
	b = append(b, "}}}\n"...)
	return b
}

// SetCosts registers where the publisher reads the replica's cost figures: fn is called (from
// stream handlers, so it must be safe for concurrent use and cheap) when a stream opens, at
// each heartbeat, and for a snapshot. A stream sends a costs line when the figures changed
// since the last it sent. nil: no figures (routers use their default tier weights).
func (p *Publisher) SetCosts(fn func() Costs) {
	p.mu.Lock()
	p.mu.costs = fn
	p.mu.Unlock()
}

func (p *Publisher) costs() (Costs, bool) {
	p.mu.Lock()
	fn := p.mu.costs
	p.mu.Unlock()
	if fn == nil {
		return Costs{}, false
	}
	return fn(), true
}
