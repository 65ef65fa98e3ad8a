package main

import (
	"flag"

	"stockpot/internal/offload"
)

// tierQueueFlags adds the tiers' reader, writer and queue sizes to serve's flags, into tc
// (offload.Config): --tier-readers (prefetches run at once), --tier-prefetch-queue (those that
// may wait for a reader), --tier-writers (goroutines writing each tier), --tier-queue-blocks
// (each tier's write-back queue). Their depths are stockpot_kv_offload_queue_depth{tier} and
// stockpot_kv_prefetch_queue_depth, beside their capacities (*_capacity).
func tierQueueFlags(fs *flag.FlagSet, tc *offload.Config) {
	wd := offload.DefaultWriterConfig()
	fs.IntVar(&tc.Fetchers, "tier-readers", tc.Fetchers, "prefetches of queued requests' prefixes run at once, each reading its blocks from the tiers")
	fs.IntVar(&tc.FetchQueue, "tier-prefetch-queue", tc.FetchQueue, "prefetches that may wait for a --tier-readers slot; past it a request computes its prefix")
	fs.IntVar(&tc.Writers, "tier-writers", 1, "goroutines writing each tier's write-back queue, one batched write at a time each")
	fs.IntVar(&tc.WriteQueueBlocks, "tier-queue-blocks", wd.QueueLen, "each tier's write-back queue, in blocks; a block evicted while it is full is not written down (counted as queue_full)")
}
