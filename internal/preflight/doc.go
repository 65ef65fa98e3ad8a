// Package preflight decides `stockpot check`: it walks the go-live checklist of the seeds'
// article on KV offloading (seed 004, "上线检查清单") over what a running serve, or each
// replica behind a route, reports, and says pass, warn or fail for each item with the numbers
// behind it.
//
// # Why a package of its own, and why pure
//
// The checklist is judgement: when is a Redis policy a failure rather than a risk, when is a
// measured read rate too slow, when is a host tier too small. Those rules are what an operator
// argues with, so they live in one place, as functions from plain inputs (Input: one Replica
// per server, each with its probe, tiers, counters and recent requests) to Lines, tested by
// scripts (testdata/*.txt, datadriven) that state a situation and the lines it gives. The I/O
// that gathers the inputs (HTTP to the server's /v1/models, /v1/cache/probe, /metrics and
// /v1/requests/recent, rendering the recent requests for the unstable-prefix replay) is at the
// edge, in cmd/stockpot/check.go; the server's side of the probe (a write and read of probe
// records through every tier, Redis's CONFIG GET) is internal/offload's Tiers.Probe.
//
// # The checks (Evaluate), in the order printed
//
//   - reach: the replica answered the probe (its admin key, a server new enough to have it).
//   - prefix-cache: --prefix-cache is on. Off is a fail: nothing else on the list matters.
//   - tier-host, tier-disk, tier-remote: a round trip of probe records (written, read back,
//     matched byte for byte, deleted) through each configured tier. A failed one is a fail.
//   - host-size: the host tier holds the reusable working set, the blocks that two or more of
//     the recent requests share (ReusedBlocks) times the block size; and, from the counters,
//     the host tier is not evicting while hits come from disk or Redis. Short is a warn:
//     sizing costs latency, not correctness.
//   - read-host, read-disk, read-remote: the probe's measured read rate, and whether the
//     server's own cost model (offload.CostModel.Plan, fed that rate, the server's measured
//     prefill rate and the model's attention cost) would restore a typical prompt from the
//     tier rather than recompute it. Slower than recompute is a warn: the tier costs memory
//     and I/O and returns nothing.
//   - redis-policy: the remote tier's maxmemory-policy. Every block key is written with a TTL
//     and a pin is a longer TTL (internal/tier/redis), so the volatile-* policies evict blocks
//     and volatile-ttl evicts pinned ones last. noeviction with maxmemory is a fail (a full
//     Redis refuses every write with OOM and the tier stops taking blocks); allkeys-* with
//     pins in use is a warn (a pinned prefix can be evicted); no maxmemory is a warn (the
//     policy never applies and Redis grows until the TTLs expire blocks).
//   - prefetch: with --prefetch timeout, a max wait shorter than the measured restore of a
//     typical prompt from the slowest tier is a warn (queued requests compute what has not
//     arrived, so that tier never pays off).
//   - unstable-prefix: the recent requests replayed by `stockpot lint` (internal/lint) leave
//     the cached prefix at a timestamp, an id, reordered tools, whitespace or a salt: a warn,
//     with the hit rate the fixes would give.
//   - identity: every replica behind a router keys its blocks by the same cache identity
//     (internal/identity's digest: model, tokenizer, K/V type, block size, state format). A
//     difference is a fail: the replicas never reuse each other's blocks in a shared tier, and
//     the router's index hashes each replica's prompts apart.
//
// A typical prompt is the median prompt of the recent requests, or TypicalPromptTokens when
// there are none. Warn never fails the run unless the caller is strict (Failed).
package preflight
