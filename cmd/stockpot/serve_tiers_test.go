package main

import (
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/server"
)

// --tier-readers, --tier-prefetch-queue, --tier-writers and --tier-queue-blocks reach the
// tiers' Config, from a flag or its STOCKPOT_ variable; --prefetch defaults to cost.
func TestTierQueueFlags(t *testing.T) {
	parse := func(args ...string) (serveOptions, error) {
		o := serveOptions{engine: engine.DefaultConfig(), server: server.DefaultConfig(), tiers: offload.DefaultConfig()}
		fs := newFlagSet("serve")
		f := addServeFlags(fs, &o)
		err := parseWithEnv(fs, args)
		if err == nil {
			o.engine.Prefetch, err = engine.ParsePrefetchPolicy(*f.prefetch)
		}
		return o, err
	}
	o, err := parse()
	d := offload.DefaultConfig()
	if tc := o.tiers; err != nil || tc.Fetchers != d.Fetchers || tc.FetchQueue != d.FetchQueue || tc.Writers != 1 || tc.WriteQueueBlocks != 256 || o.engine.Prefetch != engine.PrefetchCost {
		t.Fatalf("defaults: %+v, prefetch %v, %v", tc, o.engine.Prefetch, err)
	}
	o, err = parse("--tier-readers", "8", "--tier-prefetch-queue", "100", "--tier-writers", "3", "--tier-queue-blocks", "4096")
	if tc := o.tiers; err != nil || tc.Fetchers != 8 || tc.FetchQueue != 100 || tc.Writers != 3 || tc.WriteQueueBlocks != 4096 {
		t.Fatalf("flags: %+v, %v", tc, err)
	}
	t.Setenv("STOCKPOT_TIER_QUEUE_BLOCKS", "1024")
	if o, err = parse(); err != nil || o.tiers.WriteQueueBlocks != 1024 {
		t.Fatalf("environment: %d, %v", o.tiers.WriteQueueBlocks, err)
	}
}
