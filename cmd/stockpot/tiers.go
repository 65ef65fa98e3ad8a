package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/kvcache"
	"stockpot/internal/kvtier"
	"stockpot/internal/offload"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/disk"
	"stockpot/internal/tier/hostmem"
	"stockpot/internal/tier/redis"
)

// tierOptions are the lower-tier flags of `stockpot serve`.
type tierOptions struct {
	hostBytes       int64  // --host-cache; 0 = off
	diskDir         string // --disk-cache; "" = off
	diskBytes       int64  // --disk-cache-size
	remoteURL       string // --remote-cache; "" = off
	minHits         int    // --offload-min-hits
	minPrefix       int    // --offload-min-prefix-tokens
	prefetch        engine.PrefetchPolicy
	prefetchTimeout time.Duration
}

// tierSet is the wired lower tiers: write-back on eviction, prefetch on enqueue.
type tierSet struct {
	metrics *offload.Metrics
	tiers   []offload.Tier
	writer  *offload.Writer
	fetcher *offload.Fetcher
	closers []func() error
	block   int
}

func (o tierOptions) enabled() bool { return o.hostBytes > 0 || o.diskDir != "" || o.remoteURL != "" }

// openTiers opens the configured stores, fastest first.
func openTiers(o tierOptions, id [32]byte, layout kvcache.Layout, reg prometheus.Registerer) (*tierSet, error) {
	ts := &tierSet{block: layout.BlockSize}
	fail := func(err error) (*tierSet, error) {
		ts.close()
		return nil, err
	}
	if o.hostBytes > 0 {
		s, err := hostmem.New(hostmem.Config{CapacityBytes: o.hostBytes})
		if err != nil {
			return fail(fmt.Errorf("--host-cache: %w", err))
		}
		ts.tiers = append(ts.tiers, offload.Tier{Tier: kvtier.Host, Store: s})
	}
	if o.diskDir != "" {
		s, err := disk.Open(disk.Config{Dir: o.diskDir, CapacityBytes: o.diskBytes, IdentityDigest: id})
		if err != nil {
			return fail(fmt.Errorf("--disk-cache: %w", err))
		}
		ts.tiers = append(ts.tiers, offload.Tier{Tier: kvtier.Disk, Store: s})
		ts.closers = append(ts.closers, s.Close)
	}
	if o.remoteURL != "" {
		cfg := redis.DefaultConfig()
		cfg.IdentityDigest = id
		s, err := redis.Open(o.remoteURL, cfg)
		if err != nil {
			return fail(fmt.Errorf("--remote-cache: %w", err))
		}
		ts.tiers = append(ts.tiers, offload.Tier{Tier: kvtier.Remote, Store: s})
		ts.closers = append(ts.closers, s.Close)
	}
	m, err := offload.NewMetrics(reg)
	if err != nil {
		return fail(err)
	}
	ts.metrics = m
	wcfg := offload.DefaultWriterConfig()
	wcfg.Identity, wcfg.Layout = id, layout
	wcfg.Admission = offload.Admission{MinHits: o.minHits, MinPrefixTokens: o.minPrefix}
	if ts.writer, err = offload.NewWriter(wcfg, ts.tiers, m); err != nil {
		return fail(err)
	}
	fcfg := offload.DefaultFetcherConfig()
	fcfg.Identity, fcfg.Layout = id, layout
	if ts.fetcher, err = offload.NewFetcher(fcfg, ts.tiers, m); err != nil {
		return fail(err)
	}
	return ts, nil
}

// onEvents writes evicted blocks down the tiers (kv[i], the block's K/V, is still intact).
func (ts *tierSet) onEvents(evs []prefix.Event, kv [][]byte) {
	for i, ev := range evs {
		if ev.Kind == prefix.Evicted {
			ts.enqueue(ev, kv[i], false)
		}
	}
}

// enqueue writes one block back; at shutdown (wait) it waits for queue space rather than
// dropping, since nothing else is waiting then.
func (ts *tierSet) enqueue(ev prefix.Event, kv []byte, wait bool) {
	e := offload.Evicted{
		Root: ev.Root, Hash: ev.Hash, Parent: ev.Parent, Tokens: ev.Tokens,
		Hits: int(ev.Hits), PrefixTokens: int(ev.Depth+1) * ts.block, StateComplete: true,
	}
	if wait {
		ts.writer.EnqueueWait(e, kv)
		return
	}
	ts.writer.Enqueue(e, kv)
}

// stats is the server's view of the lower tiers for the kv_cache metrics.
func (ts *tierSet) stats() []kvtier.Stat { return offload.TierStats(ts.tiers) }

// close flushes queued writes and closes the stores.
func (ts *tierSet) close() {
	if ts.writer != nil {
		ts.writer.Close()
	}
	for _, c := range ts.closers {
		_ = c()
	}
}

// Prefetch implements engine.Restorer over the fetcher: longest verified prefix across tiers,
// cut by the cost model where restoring would be slower than recomputing.
func (ts *tierSet) Prefetch(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, done func(engine.Prefetched)) {
	go func() {
		start := time.Now()
		parent := root
		if first > 0 {
			parent = hashes[first-1]
		}
		B := ts.block
		req := offload.Request{Root: root, Parent: parent, Hashes: hashes[first:], Tokens: tokens[first*B : len(hashes)*B]}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := ts.fetcher.Fetch(ctx, req).Wait(ctx)
		p := engine.Prefetched{First: first, Discarded: map[string]int{}}
		if err == nil {
			for i, b := range res.Blocks {
				if i < res.Usable && b.Record != nil {
					p.Blocks = append(p.Blocks, engine.RestoredBlock{Tier: b.Tier, Data: b.Record.KV})
					continue
				}
				if b.Reason != "" {
					p.Discarded[b.Reason]++
				}
			}
		}
		p.Elapsed = time.Since(start)
		done(p)
	}()
}

var _ tier.Store = (*hostmem.Store)(nil)
