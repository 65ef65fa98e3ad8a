// Package engine runs a model over a paged K/V pool with continuous batching, prefix reuse
// and restores from lower tiers.
//
// # Shape
//
// It is split the way etcd's raft is, so the scheduling rules can be tested step by step:
//
//   - Core (core.go) is the pure scheduler. It has no goroutines, no I/O and no clock: the
//     caller feeds it requests (Add), cancellations (Cancel), prefetch results (Prefetched)
//     and the time, asks what to run next (Schedule returns a Plan), runs it and hands back
//     the logits (Advance), then collects the outputs (Ready). It reaches the prefix cache only
//     through the small blockCache interface (cache.go adapts *prefix.Cache to it), and
//     reports its counters through Stats. Its Evidence counters (prompt tokens by source,
//     requests by HitClass, cancellations, late and dropped prefetches) are counted where
//     admission and finish decide, apart from the Usage it reports, so that the server can
//     export both and a test can hold them equal (evidence_test.go).
//   - Engine (engine.go) is the thin wrapper: one runner goroutine owns the model, the arena,
//     the prefix cache and the Core; it turns channels into Core calls, runs each Plan's
//     forward pass, copies restored bytes into blocks (unless they were verified into
//     reserved blocks already), and forwards outputs to per-request
//     streams without ever blocking on a slow caller.
//   - admin.go holds the cache admin operations (Prewarm, Residency, DropCache), each run on
//     the runner goroutine through do or as an ordinary request.
//
// The scripts in testdata/core step a Core with a fake model (core_test.go): admission,
// chunked prefill, preemption, dedup waits, restores arriving before and after admission,
// cancellation and stopping. A new scheduling rule goes in core.go and gets a script there.
//
// # A request's life in the core
//
//	       Add
//	        │
//	        ▼
//	    waiting ◄──────────────────────────────┐
//	   │  ▲   │ Prefetching (a Restorer runs)  │ preempted: blocks released, committed
//	   │  │   ▼                                │ ones stay cached; back to the front
//	   │  └ restoring: held by admission       │ of the queue, recomputed on readmit
//	   │    until Prefetched (or the           │
//	   │    PrefetchTimeout, or while the      │
//	   │    cost model says restoring still    │
//	   │    pays: PrefetchCost; never for      │
//	   │    best-effort)                       │
//	   ▼ admit: device match + restored        │
//	     blocks + fresh blocks allocated       │
//	prefilling ── chunks of the token budget ──┤
//	   │ last prompt token computed            │
//	   ▼                                       │
//	 decoding ── one token per step ───────────┘
//	   │ stop token, max_tokens, context length, sampling error
//	   ▼
//	  done ◄── Cancel, from any state above
//
// Admission (admit, a list of named stages in the order they decide) is FCFS: a request
// that cannot get its blocks holds back everyone behind it, while one held for its prefetch
// or for blocks another request is prefilling (Dedup) is passed over without blocking the
// queue. Decode tokens are planned before prefill chunks, so a long prompt never stalls
// running streams. A decode that finds no free block preempts the
// most recently admitted other request; one that runs alone and still finds none has reached
// the longest generation the pool allows and ends with FinishLength.
//
// Every state change that ends a request queues exactly one final Output (Done, with a
// FinishReason and Usage); Usage keeps Device+Host+Disk+Remote+Transfer+Computed == PromptTokens.
//
// # A decode step allocates nothing
//
// Once its requests run, a decode step makes no heap allocation, from Schedule to the
// caller's receive (TestDecodeStepsAllocateNothing): the core reuses its Plan (valid until
// the next Schedule) and its outbox (Ready's slice is valid until the next Ready); a
// sequence's tokens, blocks and hashes have room for all it may generate from admission
// on; an Output's Tokens (and Top) are cut from per-request chunks (slab.go), never reused
// since the caller may keep them; a stream's queue is two arrays that take turns with its
// forward goroutine; Stats is a value under a lock. What is left is outside the package: a
// block started by decoding comes from prefix.Cache.Allocate, one slice a block.
//
// # Blocks
//
// A sequence's blocks[i] holds positions [i·B, (i+1)·B). Full blocks are committed to the
// prefix cache as they are computed; when another request committed the same block first,
// the sequence switches to that shared block and frees its own copy. Blocks are released
// tail first, so a sequence's leaves are evicted before the prefix they extend.
//
// # Pins
//
// Request.Pins keep prompt prefixes in the working pool for a TTL after their last use
// (prompt-cache retention). The core's pin table (pins.go) owns one reference per pinned
// block, within Config.PinBudget; hits refresh, Schedule and the idle sweep expire, and the
// pin events (Hooks.PinEvents) take pins down to the tiers. Unpinned blocks are untouched by
// any of it. The script testdata/core/pins.txt steps it: survival through a flood, refresh,
// expiry, partial and strict pins, TTL upgrades, unpin, and pins adopted after a restart.
//
// # Waiting for a restore: PrefetchCost
//
// The default policy waits as long as restoring is cheaper than recomputing, by the cost
// model's own estimates, instead of a fixed time: a ProgressRestorer reports its plan (the
// blocks worth restoring, the estimated read and recompute times) and the blocks as they
// arrive (PrefetchProgress, atomics the runner reads at every step into
// Core.PrefetchProgressed). The core holds the request while the restore still to come
// (the estimate while it lasts, then the observed pace) is under the recompute, and gives up
// on a restore with no block for as long as its whole estimate (between PrefetchMaxWait and
// the recompute: the ski-rental bound). Before a plan it waits PrefetchMaxWait, as
// PrefetchTimeout. testdata/core/prefetchcost.txt steps it on the script's clock.
//
// # Reserved blocks: restores in one pass
//
// With an IntoRestorer (offload's tiers are one) the runner reserves, when a request is
// queued, the blocks its prefetch may restore (Core.Reserve), and the Restorer checks each
// record straight into its block: checksum and copy are one pass over the bytes, on the
// fetch goroutines, and admission has nothing left to copy (RestoredBlock.InPlace). The
// reservation is the request's alone and outside the prefix index until admission commits
// it; a block that failed verification holds garbage and is computed into like any fresh
// block. The Restorer may write the blocks until its done call, so they go back to the pool
// only after Prefetched: a request cancelled (or admitted, under PrefetchTimeout or
// best-effort) while its prefetch runs leaves them behind (Core.orphans) until the result
// arrives. Reservations are bounded (half of what running requests do not hold), and they
// yield: the head of the queue that does not fit, or a running request that needs a block
// to decode, reclaims them (reclaim) before waiting or preempting. Where none can be made,
// the prefetch returns bytes and admission copies them in (Plan.Restores), as before.
//
// # Hybrid models: state checkpoints (state.go)
//
// A hybrid model (qwen35: Gated DeltaNet beside attention; kimi-linear and kimi-k3: KDA
// beside MLA) resumes a sequence only with its recurrent state, so K/V blocks alone are not
// a reusable prefix. The scheduler plans a checkpoint at the end of every
// Config.StateCheckpointBlocks-th block (PlanItem.Checkpoints, in prefill chunks and decodes
// alike), Forward fills it, and the block's commit keeps it, keyed by the block's chain hash
// (so it can never go stale, only be dropped). Admission then cuts every reuse, device hits,
// restored blocks and dedup alike, at the deepest block end it has a checkpoint of
// (cutToCheckpoint, Core.resumable), resumes the sequence's state from it, and
// counts what was matched past it as discarded, reason incomplete_state (Usage.DiscardedBy,
// a miss of that cause, Hooks.Discarded). Checkpoints leave with their blocks (the block
// events), go down the tiers beside the K/V (Hooks.BlockEvents' state, FlushCached, pin
// events), and come back in RestoredBlock.State, decoded and checked (decodeCheckpoints)
// on the Restorer's goroutine that delivers the result and helpers beside it, never on the
// runner's, before the core sees them. Their memory is taken from Config.KVMemory
// (kvShare), one checkpoint per N blocks, the oldest dropped past that. Outputs are bitwise
// those with the cache off, in any chunking (state_test.go); testdata/core/hybrid.txt steps
// the rules.
//
// # Imports
//
// engine may import model, kernels, kvcache, prefix and miss (and the leaf packages below them).
// It never imports server, router, offload or the tiers: lower tiers reach it only through
// the Restorer interface (restore.go), and block events leave it through
// Hooks.BlockEvents.
package engine
