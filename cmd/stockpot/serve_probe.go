package main

import (
	"context"
	"encoding/hex"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/server"
)

// cacheProber answers POST /v1/cache/probe for in (server.SetCacheProber; `stockpot check`
// reads it): the engine's configuration as newInstance resolved it, the identity digest the
// blocks are keyed by, the cost model's figures, and a round trip through every lower tier
// (offload.Tiers.Probe).
func (in *instance) cacheProber(ecfg engine.Config, identity [32]byte) server.CacheProber {
	maxWait := ecfg.PrefetchMaxWait
	if maxWait == 0 { // the engine's validate fills it so
		maxWait = engine.DefaultConfig().PrefetchMaxWait
	}
	return func(ctx context.Context, readBytes int64) server.CacheProbe {
		st := in.engine.Stats()
		p := server.CacheProbe{Identity: hex.EncodeToString(identity[:]), BlockBytes: st.KVBlockBytes,
			PoolBytes: int64(st.KVBlocksTotal) * st.KVBlockBytes, PrefixCache: ecfg.PrefixCache,
			Prefetch: ecfg.Prefetch.String(), PrefetchMaxWaitMS: float64(maxWait.Microseconds()) / 1e3,
			Cost: server.CacheProbeCost{AttendCost: in.file.cfg.AttendCost(), ReadBandwidth: map[string]float64{}}}
		if in.tiers == nil {
			return p
		}
		c := in.tiers.Costs()
		p.Cost.PrefillTokensPerSecond = c.PrefillTokensPerSecond
		for t := range kvtier.Tier(kvtier.Count) {
			if bw := c.ReadBandwidth[t]; bw > 0 && t != kvtier.Device {
				p.Cost.ReadBandwidth[t.String()] = bw
			}
		}
		for _, tp := range in.tiers.Probe(ctx, readBytes) {
			row := server.CacheProbeTier{Tier: tp.Tier.String(), CapacityBytes: tp.CapacityBytes, Evictions: tp.Evictions,
				PinnedItems: tp.PinnedItems, Records: tp.Records, ReadBytes: tp.ReadBytes, ReadSeconds: tp.ReadTime.Seconds()}
			if tp.Err != nil {
				row.Error = tp.Err.Error()
			}
			for _, r := range tp.Redis {
				rr := server.CacheProbeRedis{Addr: r.Addr, MaxMemoryPolicy: r.Policy, MaxMemory: r.MaxMemory}
				if r.Err != nil {
					rr.Error = r.Err.Error()
				}
				row.Redis = append(row.Redis, rr)
			}
			p.Tiers = append(p.Tiers, row)
		}
		return p
	}
}
