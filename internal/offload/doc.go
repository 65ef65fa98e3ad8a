// Package offload moves K/V blocks between the device pool and the tiers
// below it (package tier): write-back of evicted blocks (Writer), restore of
// a queued request's prefix (Fetcher), the restore-or-recompute decision
// (CostModel), and their metrics (Metrics, TierStats).
//
// # Wiring: Tiers
//
// Open(Config) is the one constructor serve calls: it opens the stores the
// Config turns on (host, disk, remote, fastest first; a tier is a
// kvtier.Tier), the Writer, the Fetcher and the metrics, and Tiers.Hook
// plugs them into an engine.Config. Tiers is the engine.Hooks (one small
// interface, set once: no callback fields to chain in the right order) and
// the engine.Restorer: Prefetch
// hands the request to a fixed set of fetcher goroutines (Config.Fetchers)
// through a bounded queue (Config.FetchQueue; past it the answer is an empty
// result at once, and the request computes), each fetch under a context that
// Config.FetchTimeout bounds and Close cancels. Tiers.BlockEvents is the sink
// of the engine's block events: it turns each Evicted event, whose K/V the
// engine passes beside it, into an Evicted write-back; FlushBlock does the
// same for the pool's write-back at shutdown (engine.FlushCached). Close
// stops the fetchers, drains the writer and closes the stores, in that
// order, and is safe on a partly opened Tiers.
//
// Config.Events, when set, gets Stored and Removed kv-events for the blocks
// the tiers hold (events.go: Stored after each confirmed Put and, in the
// shared remote tier, for each block a fetch restored from it (adoption),
// Removed by a reconciler that asks the tiers about what was announced), and Tiers.Costs
// gives the cost model's figures to the kv-events publisher, so a router
// weighs every tier by measured restore cost.
//
// Imports: engine (the Restorer and Hooks interfaces it implements), kvtier,
// kvevents (the event type), prefix, kvcache, tier and its stores,
// prometheus. Nothing below engine
// imports offload.
//
// # Write-back: per-tier queues
//
// Writer.Enqueue runs on the engine's goroutine right after the prefix cache
// reports an eviction: it applies the admission policy, then encodes the
// record, which is the one synchronous copy out of the arena (the block is
// reused as soon as Enqueue returns). The encoded bytes are immutable from
// then on and shared by every tier's queue: each tier (host, disk, remote)
// has its own bounded queue and worker, and a full queue drops the write,
// counted, instead of blocking the engine.
//
// Why per-tier queues rather than one chain that writes host, then disk,
// then remote: the tiers differ by orders of magnitude in speed, and a chain
// runs at the pace of its slowest link. A Redis that slows down would fill
// the one queue and the host tier, the fastest and most useful, would lose
// writes with it. With a queue each, a slow tier drops only its own writes.
// Tiers are inclusive: a block evicted from the device goes to every tier
// (host first in the worker order); each tier evicts on its own budget.
//
// Sole copies (package tier): below a tier that reports its evictions (a
// tier.Spiller: the host tier), write-backs are Shadowed, so a disk with a
// budget stores them only in room it can make by evicting other shadowed
// blocks, never the only copy of a block (what survived a restart, above all).
// What the host tier evicts is spilled through the same per-tier queue: the
// disk's copy becomes a sole copy (tier.Unshadower, no second write), or the
// block is written there as one. The flush at shutdown is never shadowed (RAM
// does not outlive the process). Close closes the queues in tier order, each
// after the worker above has finished, since its last Puts may still spill.
//
// Failures: a write that does not reach a tier is counted in
// stockpot_kv_tier_write_failures_total{tier,reason}: queue_full (dropped
// without a try), no_space (ENOSPC, after the disk's own evict-and-retry),
// too_large, timeout, unavailable (a remote tier's open breaker), io_error.
// A store joins one error per failed item; any other error fails the batch.
// Nothing is retried by the writer: the block is recomputed if ever needed.
//
// Admission (WriterConfig.Admission): a block is written only if it was
// reused at least MinHits times on the device and its prefix (tokens up to
// and including the block) is at least MinPrefixTokens long; zero turns a
// condition off. Tiers.BlockEvents fills Evicted.Hits and Evicted.PrefixTokens
// from the engine's block event.
//
// # Write-through: the shared tier (writethrough.go)
//
// Config.RemoteWrite (`--remote-write`) says when the remote tier, the one every replica
// restores from, is written; host and disk are always written back. WriteThrough writes every
// committed full block (the engine's Stored event, whose K/V comes beside it) to the remote
// queue at once; WriteSelective (the default) writes the blocks that pass Admission, at their
// commit when MinHits is 0, otherwise at the reuse that brings their hits to MinHits (the
// engine's Reused events, asked for with engine.Config.ReuseEvents only then); WriteBack is
// the old behaviour, the remote tier written like host and disk. Under through and selective
// the remote tier gets no write-back (eviction, shutdown): it has the blocks since their
// commit, or they did not pass the same admission. Writer.Through shares the per-tier queues
// and their drop-and-count rule, so a slow Redis still costs only its own writes.
//
// Offload caps: a block that ends past Config.MaxOffloadTokens (`--max-offload-tokens`) tokens
// from the prompt's start, or whose event says NoOffload (past its request's
// max_offload_tokens), is never written down, through or back; at shutdown only a pinned one
// is, since a pin asks for the block to be kept.
//
// Reuse counts: a block's hits are the distinct requests that reused it (prefix.Cache.Reused,
// once per request at its first admission), not the matches of peeks or retried admissions.
//
// # Restore: Fetcher
//
// Fetch takes the block hashes of a prefix (from the first block the device
// lacks) and, on its own goroutine, in parallel with the request's queue
// wait: probes the tiers in order (host, disk, remote) with batched Contains
// to find the longest prefix available anywhere; asks the CostModel how many
// leading blocks are worth restoring; fetches them with one batched Get per
// tier, deduplicating keys other fetches are already reading (singleflight);
// and decodes and verifies every record (checksum, identity, parent, tokens,
// shape). The usable prefix stops at the first block that fails (counted under
// its cause; the sound blocks after it as after_break), and, for a
// model with recurrent state (FetcherConfig.NeedState), at the last block
// whose record carries a complete checkpoint of the model's size (HasState):
// blocks found past it are discarded as incomplete_state. The Result says, per
// block, the tier and the verified record or the discard reason.
//
// Hybrid models (Config.StateBytes > 0): a block's recurrent-state checkpoint,
// which the engine hands over beside its K/V (block events, the shutdown
// flush, pin events), is the record's one Aux entry, under the record's
// checksum; the record is StateComplete only with it. The state's format is
// part of the identity, so a record of another layout never verifies. A
// restored block's checkpoint goes back to the engine in RestoredBlock.State,
// which decodes and checks it before using it.
//
// Near the hardware: with Request.Into (the engine's reserved pool blocks,
// Tiers.PrefetchInto) each record is checked and copied into its block in one
// pass (tier.DecodeVerifyInto: crc32c.UpdateCopy stores each vector the
// checksum loads), on all cores, so a host-tier restore reads the bytes once where it
// used to verify them and then copy them on the engine's goroutine. The disk
// tier is read one key per Get, 8 Gets in flight (readChunk), each block
// verified on the goroutine that read it as soon as it arrives, while the
// other reads keep the device busy; the disk store reads with O_DIRECT the
// files the page cache lacks, and runs that verification as its own check of
// the file (tier.CheckedGetter), so a block read from disk is checksummed
// once, not by the store and again by the fetch. What
// a fetch alone read and decoded into the pool goes back to a tier.Recycler
// (the disk's aligned read buffers), so a restore does not allocate and zero
// its reads afresh. The benchmarks (bench_test.go) state each path as a ratio
// to copy() (host), to os.ReadFile (a warm page cache) and to O_DIRECT reads
// of the same files (a cold one).
//
// Promotion (promote.go): the verified blocks a fetch restored from disk or remote are also
// queued, as read (no copy), on the host tier's write queue, off the request's path, so the
// next request that needs them after the pool lets them go reads RAM. Host's own budget and
// eviction apply; the write admission is not applied again.
//
// # Cost model
//
// CostModel is pure (no clock, no locks): the caller feeds it measured reads
// (ObserveRead) and prefill rates (ObservePrefill), kept as EWMAs, and Plan
// picks the restore length n maximising
//
//	sum over blocks i < n of (work_i / prefill rate − bytes_i / read bandwidth of tier_i)
//	  − sum over tiers used by the first n blocks of the tier's per-call overhead
//
// and restores nothing unless that saving is > 0: restore only where
// recompute − restore − overhead > 0. Blocks beyond n are recomputed and
// counted as slower_than_recompute. A block's work is its tokens priced by depth:
// a token at position p is 1 + AttendCost·p token-equivalents (CostConfig.AttendCost,
// the model's attention work per earlier position over its other per-token work,
// model.Config.AttendCost), and the prefill rate is measured in the same units (the
// engine reports each step's attended positions with its tokens). Recomputing a
// block at 128K tokens costs what attention makes it cost, so a tier that does not
// pay for a short prompt's blocks can pay for a long prompt's deep ones.
//
// # Pins
//
// Pins (prompt-cache retention) reach the tiers through the engine's pin events
// (Tiers.PinEvents, engine.Hooks): a pin created in the working pool is pinned in
// each tier.Pinner store that holds the block and written, pinned, to those that do not; a
// refresh pins again; an unpin unpins; one worker and a bounded queue, off the request path
// (pins.go). At a restart the persistent stores' pins become the engine's KnownPins, so the
// prefix is pinned again, with its remaining time, when a request brings it back; the
// shutdown write-back writes pinned blocks pinned (Evicted.PinTTL).
//
// # Metrics
//
// Metrics registers the offload histograms and counters with a
// prometheus.Registerer. The per-tier gauges stockpot_kv_cache_usage_bytes,
// _capacity_bytes and _evictions_total are NOT registered here: the server
// already owns those names (tier="device"), and its collector calls
// TierStats(tiers) to add the host, disk and remote rows. One owner per
// metric name, no duplicate registration.
package offload
