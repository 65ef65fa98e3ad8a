// Package soak runs one seeded, randomized mixture of requests against a Stockpot fleet with
// every kind of fault injected during the same run (one at a time, in a seeded order, beside
// the traffic), and judges every completed greedy answer against a cache-off oracle server.
//
// Why: the separate fault tests (a corrupted tier file, a kill -9, a full disk, Redis going
// away) each show one path recovering. Production meets them together, under load, while
// other requests share the blocks being restored, evicted or rewritten. The claim "the cache
// never changes an answer and never loses a request" only means something when it survives
// all of them in one run, checked by something that does not share the cache: a server with
// the prefix cache off, on the same weights. Greedy decoding is deterministic (a row's value
// does not depend on batch mix, chunking or where its K/V came from), so any difference is a
// defect, not noise.
//
// The parts:
//   - mix.go (pure): the seeded mixture. Shared prompts (system prompts reused across
//     requests, so the cache matters), unshared prompts, multi-turn chats, streams, tool calls
//     with tool_choice forcing a call, client cancels and disconnects. Each op knows its
//     oracle key: the request as the oracle sees it (never streamed).
//   - faults.go (pure): the seeded fault schedule, spread through the run: kill -9 and
//     restart of a replica, a graceful restart, corrupted disk tier files (while running and
//     while down), a full disk, Redis stopped and started, a slow Redis, dropped event
//     streams between router and replicas, a router restart; in a prefill/decode run, the
//     handoff faults too (a prefill killed after it answered, a decode killed mid-pull, an
//     expired lease, a flipped byte in a transfer stream).
//   - judge.go (pure): outcomes to a report. wrong: a completed answer that differs from the
//     oracle's. lost: a request that neither answered nor failed cleanly within the client's
//     retry budget (a truncated stream or a malformed body is not clean). Budgets: the tiers
//     never over their capacity, no block referenced after the drain, goroutines back to
//     their baseline.
//   - proxy.go, cluster.go, client.go, run.go (I/O at the edge): the processes (the real
//     binary, redis-server), a TCP proxy that can slow Redis, an HTTP proxy per replica that
//     can drop the router's event streams, the retrying client and the scraper.
//   - pd.go (I/O at the edge): the prefill/decode run (Config.PD, `stockpot soak --pd`): the
//     replicas split into prefill and decode pools, a TransferProxy in front of each prefill
//     (the decodes' --prefill-peer; it can kill the pulling decode or flip a byte of a pull),
//     handed-off requests sent as vLLM's proxy sends them (the prefill request, then the
//     request with its kv_transfer_params to a decode) and judged like every other answer;
//     the handoff faults are carried out by the handed-off request that takes them, at their
//     moment between the two steps.
//
// `stockpot soak` is the command; cmd/stockpot's TestSoak runs a short seeded run in CI.
//
// hostile.go is the other soak (`stockpot soak --hostile`): not faults but clients, every
// hostile shape of the 2026-12-07 probe sent at once to one serve with no key, judged by the
// kernel's high-water mark of the server's memory (VmHWM) against the bound README states (the
// sum of the server's configured budgets and a fixed base), by /health answering throughout,
// and by the server serving afterwards. TestSoakHostile runs a tenth of it in CI.
package soak
