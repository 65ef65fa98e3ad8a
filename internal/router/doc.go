// Package router is Stockpot's cache-aware gateway: it spreads OpenAI
// requests over replicas so that each lands where its prompt prefix is
// already cached, without hot spots, and hides replica failures.
//
// It never imports the engine (nor server, offload or the tier stores). It
// shares with the replicas only the hash chain (package prefix: the router
// hashes a prompt's tokens exactly as a replica does, rooted at the identity
// the replica announces), the event stream (package kvevents) and the wire
// types (package api).
//
// # Parts
//
//   - Backend: one replica; in-flight count, health, and its block index.
//   - replicaIndex: one replica's block set (hash → tiers), a kvevents.Sink
//     fed by a Subscriber on the replica's /v1/kv-events. The global index
//     is the set of them; a resync swaps one replica's map alone.
//   - Policy (Pick(req, candidates) Decision): random, round-robin,
//     least-loaded, prefix (rendezvous hashing with bounded loads on
//     prompt_cache_key, else X-Session-ID, else the first PrefixTokens
//     tokens (cachekey.go says why the key comes first); a spilled key sticks
//     to where it last went while that backend has room) and kv-aware (matched
//     prompt blocks weighted by tier, minus a load penalty; falls back to
//     prefix affinity when no replica holds any of the prompt or none
//     offers events).
//   - Router: membership (add/remove at run time), health checks (which also
//     learn each replica's role), the reverse proxy with retries, and metrics.
//   - pd.go: prefill/decode disaggregation (pools by role, the prefill hop, the
//     handoff to a decode).
//   - outliers: passive health (outlier.go), a pure state machine fed each
//     attempt's outcome: a backend whose requests fail N times in a row
//     (5xx, connection errors, timeouts, broken streams; never 4xx or a client
//     that left) is ejected for a base time × its ejections in a row, capped;
//     ejected, it gets no routed request and no /tokenize (nor prewarm), then
//     one probe request decides its return. At most MaxEjectedPercent of the
//     fleet is out at once. testdata/outlier scripts step it.
//
// A new policy is a type with Name and Pick in policy.go (plus NeedsTokens
// when it wants the prompt's tokens), a case in NewPolicy and its name in
// PolicyNames, and a script in testdata/policy (policy_script_test.go steps
// policies over scripted backends, loads and indexes).
//
// # Hot path
//
// Per request the router reads three fields of the body with a hand scanner
// (scan.go; encoding/json when in doubt, and fuzzed against it), parses a
// token-array prompt in the same pass or asks a replica's /tokenize
// (remembered by request bytes: tokcache.go), and kv-aware hashes the
// prompt's blocks only as far as some replica's index walk gets (chain.go),
// taking known blocks' hashes from a bounded cache of earlier prompts' chains
// (hashcache.go), so an agent's next turn pays SHA-256 only for its new
// blocks. The pick's scratch (token ids, chain hashes, run keys) is pooled
// and handed back once the request is forwarded (Request.release): the
// collector's runs, and with them the request path's tail, do not grow with
// prompt length. BenchmarkPickAdded states the pick's added latency at p50
// and p99 against round-robin and direct requests in the same run.
//
// # Anti-hot-spot rules
//
// Ties are never broken by list order. Equal kv-aware scores go to the higher
// rendezvous score of the request's affinity key, and that key is a fixed
// hash (no per-process seed): placement is a function of the request, the
// membership and the indexes, so two routers in front of the same replicas
// agree, and a restarted router sends each session where the last one did
// once its indexes are rebuilt from the replicas' snapshots. Least-loaded
// ties (no key at all) are broken uniformly at random (reservoir sampling).
// Affinity and cache scores both respect a load cap of
// ceil(LoadBound · (in flight + 1) / backends) and the concurrency
// threshold; past them the request goes to the next candidate. The prefix
// policy counts this router's requests in flight; kv-aware counts every
// router's, as the replicas report them (below).
//
// # Dialects
//
// Chat, /v1/responses and /v1/messages are placed by the prompt exactly as the
// replica renders it (the template with tools and chat_template_kwargs,
// instructions and input items, system blocks and tool definitions): the router
// asks a replica's POST /tokenize/render?endpoint=PATH for the whole body's
// tokens (dialect.go; cached as /tokenize's answers are). Usage is read from
// every dialect, streamed or not; a missing cached count is unknown, never 0.
//
// # Replica load
//
// Each replica publishes its load on its event stream (a load line: running
// and waiting sequences, queued prefill tokens, KV usage), the engine step a
// request is queued, admitted or finishes and at a 10 ms poll. The router keeps
// each replica's last report (replica_load.go): the least-loaded pick and
// kv-aware's penalty read this router's in flight plus the report's other
// requests; kv-aware's load cap reads the lesser of this report's and the
// previous different report's others, so one stale report neither spills a
// session off its cache nor lets another router's burst go uncounted past the
// next change. Two routers in front of the same replicas see the same load.
//
// # Policy at run time
//
// GET and PUT /policy (admin key; policy_admin.go) read and switch the policy
// without a restart. A switch to kv-aware on a router that follows no events
// is refused (409): it would have no index and no replica loads.
//
// # Staleness
//
// A replica's index is used only while its stream is in sync and spoke
// (event or heartbeat) within StaleAfter. An entry is valid while the replica
// holds it: it ends by a Removed event, a Cleared, or a snapshot without it,
// never by age (a cache hit emits no event, so the hottest blocks are those
// stored longest ago). Each replica's index is bounded (IndexMaxBlocks,
// default 1Mi entries, LRU by last Stored) so a replica that never sends
// Removed cannot grow it without limit. Gaps, restarts (epoch changes) and
// reconnects past the replica's ring trigger a resync from its snapshot
// (package kvevents). A stream or snapshot that does not parse isolates the
// replica: its index is emptied (it scores as holding nothing, so it gets
// only what its load earns) until a snapshot parses again.
//
// # Tiers and costs
//
// Replicas publish every tier's blocks (device, host, disk, remote) and their
// cost model's figures (prefill rate, read bandwidth per tier, block bytes: a
// "costs" line and the snapshot's costs). A block weighs the share of its
// prefill its restore saves, 1 − read time / prefill time, by its fastest
// tier; before a replica's first figures, TierWeights. The remote tier is
// shared: a block any replica announced in remote counts, at remote weight,
// for every replica whose figures show a remote tier. Those announcements
// live in one router-wide set (sharedRemote), not only in the writer's index,
// because a block in Redis outlives its writer: killed, removed or restarted,
// the writer's own index forgets it, while any other replica can still
// restore it. An entry there ends by a remote Removed from any replica, a
// remote Cleared, or the IndexMaxBlocks bound, never by a snapshot;
// stockpot_router_remote_index_blocks is its size.
//
// # Reuse units
//
// A replica publishes its reuse unit (kvevents: reuse_blocks, in the hello and the snapshot):
// it reuses a cached prefix only in whole runs of that many blocks. A hybrid model (qwen35)
// resumes only at a recurrent-state checkpoint, one every --state-checkpoint-blocks N blocks,
// so of a matched run of 5 blocks with N=4 it reuses 4, of a run of 3 none. kv-aware rounds
// each replica's match down to its own unit before it scores (the rounded-off blocks weigh
// nothing) and predicts (PredictedTokens, stockpot_router_predicted_tokens_total, the
// dashboard's decisions); a replica that publishes no unit has 1. GET /backends shows
// reuse_blocks and min_reusable_tokens (× block size) once a snapshot loaded.
//
// # Retries and broken streams
//
// A request is retried on another backend (up to MaxAttempts) when it fails
// before any byte reached the client: connection refused or reset, a 5xx
// status, a non-streamed body cut short (non-streamed answers are buffered
// whole), or a stream that ends before its first complete event. A
// connection error takes the backend out at once; the health checker brings
// it back. Every failure also counts toward passive health (outliers), which
// ejects a backend that keeps answering 5xx while its /health passes.
//
// Streams are relayed event by event (up to each blank line), so a client
// never holds half an event. A stream that breaks after its first event
// cannot be resumed elsewhere: the client gets an error event in the OpenAI
// shape and then [DONE] (what serve sends when it fails mid-stream), and
// stockpot_router_stream_failures_total{backend,reason} counts it (cut: the
// connection broke; incomplete: it ended without [DONE]).
//
// # Prefill/decode disaggregation
//
// pd.go makes the router the orchestrator of vLLM's disaggregation protocol. Each backend has a
// Role: given (Config.PrefillBackends, DecodeBackends, POST /backends "role"), else what its
// /health reports, else both. While some backend has a dedicated role, a completion or chat
// request goes to the least-loaded decode straight away when its prompt tokens less those
// predicted cached there are below PDConfig.MinPrefillTokens (short_tail); otherwise the policy
// picks a prefill over the prefill pool, which answers the request as vLLM's proxy sends it
// (do_remote_decode, max_tokens 1, not streamed) with kv_transfer_params, and the original
// request with those params goes to the decode, whose answer is relayed as any other. A both
// backend stands in for a pool only while it has no dedicated member left. A failed prefill
// (connection error, 5xx, timeout, no params) is retried on another, within PrefillTimeout for
// the whole hop; then the decode computes the prompt itself. Other endpoints go to the decode
// pool. GET /backends and the dashboard show each backend's role and pool; the dashboard's
// decisions show both hops ("prefill-<reason>", "decode-<path>", with transfer_tokens).
//
// # Cache admin
//
// POST /v1/cache/prewarm goes to the replica the policy picks for its prompt; GET and DELETE
// /v1/cache go to every replica and come back aggregated per replica (cacheadmin.go). They
// take the admin key and reach replicas with the backend key only.
//
// # Keys
//
// Key sets (rotation: several may be valid at once), compared in constant
// time, read from "Authorization: Bearer K" or "x-api-key: K". A key the
// router holds for something else gets a 403 (permission_error), a missing
// or unknown key a 401. With no key of any kind configured the dashboard and
// /metrics are open; once any key is, they need a key that grants them
// (endpoint_auth.go has the table):
//
//   - client keys (APIKeys, --api-key) guard the OpenAI endpoints. With
//     them the router terminates auth: it strips the client's Authorization
//     and x-api-key and sends the backend key instead (or nothing), so a
//     client's key never leaves the router. Without them the router checks
//     nothing and passes the client's headers through.
//   - admin keys (AdminKeys, --admin-key) guard every method of /backends,
//     the listing included (it names the backend URLs), and the cache admin
//     API. Without one they are off: 403. Every membership call is logged
//     with the caller's address and whether its key matched, never the key.
//     An admin key also opens the dashboard and /metrics.
//   - metrics keys (MetricsKeys, --metrics-key) guard /metrics (its url
//     labels name the backends); PublicMetrics (--public-metrics) opens it on
//     purpose. /health is always open.
//   - dashboard keys (DashboardKeys, --dashboard-key) guard the dashboard
//     (dashboard.go: GET /dashboard, /dashboard/events, /dashboard/state:
//     per-replica load, index size, event lag, decisions by reason, and each
//     recent decision's predicted against delivered cached tokens); the key
//     may also come as ?key=. A client key never opens it.
//
// The backend key (BackendKey, --backend-key) goes on the router's own
// calls to replicas: health checks and /tokenize; the backend events key
// (BackendEventsKey, --backend-events-key, default the backend key) on its
// reads of /v1/kv-events and its snapshot, where replicas take their
// --events-key (or admin key), never an API key.
//
// # TLS
//
// ServerConfig.TLS serves HTTPS (internal/tlsconfig builds it; a client CA
// makes it mutual). Config.BackendTLS is the default transport's client
// side for https:// backends: the CA that signs them and the client
// certificate replicas with --tls-client-ca require. route refuses
// --backend-tls-* with an http:// backend rather than send it in the clear.
//
// # Tenants
//
// With Tenants (--tenants, package tenant; exclusive with APIKeys, and needing
// a BackendKey) a client's key names its tenant (tenants.go). The router
// applies the tenant's requests_per_second and concurrent quotas itself (429
// with Retry-After, in Anthropic's shape on /v1/messages), hashes and keys the
// prompt under the salt the replica will derive from the tenant's namespace
// (so the index, the affinity keys and X-Session-ID affinity are per
// namespace: one tenant's prefix never steers another's traffic), and
// forwards the identity in tenant.Header, HMAC-signed with the backend key,
// fresh per attempt and bound to the upstream request's method, target and
// body (tenant.Binding: the body is buffered, so its SHA-256 is one pass).
// A tenant.Header a client sends is always dropped. An
// admin prewarm with "public": true goes to every replica (each marks its
// own blocks public); one with "tenant" is routed by that tenant's salt. The
// router does not know the replicas' public blocks: a public prefix's
// continuation is routed by the tenant's own affinity. The dashboard needs
// the admin key when tenants are configured.
//
// # Connection limits
//
// HTTPServer bounds what a client can hold: header read time, idle
// keep-alive time, and open connections (a listener that stops accepting at
// MaxConnections). A body must arrive within BodyReadTimeout (then 408); the
// deadline is cleared once it has, because net/http's ReadTimeout would also
// cancel a long stream's context. There is no write timeout, for the same
// reason. net/http's own plain-text refusals (400, 431) are rewritten into
// the API's JSON error shape on the way out, and unknown routes get a JSON
// 404 or 405.
//
// # Metrics (router's own registry)
//
//	stockpot_router_requests_total{backend,code}          proxied requests by final status
//	stockpot_router_decisions_total{policy,backend,reason} decisions (reason: affinity, spill,
//	                                                        cache, fallback-*, least-loaded, ...)
//	stockpot_router_decision_backend_load                 histogram: chosen backend's in-flight count
//	stockpot_router_predicted_tokens_total{backend}       predicted matched prompt tokens (kv-aware; in each
//	                                                        replica's reuse unit)
//	stockpot_router_predicted_matched_tokens              histogram of the same per decision
//	stockpot_router_cached_tokens_total{backend}          actual usage.prompt_tokens_details.cached_tokens
//	stockpot_router_actual_cached_tokens                  histogram of the same per request
//	stockpot_router_prompt_tokens_total{backend}          usage.prompt_tokens
//	stockpot_router_retries_total{reason}                 attempts retried (connect, 5xx)
//	stockpot_router_failed_requests_total                 requests that failed on every backend
//	stockpot_router_overhead_seconds                      body read + tokenize + decision time
//	stockpot_router_tokenize_seconds{outcome}             the /tokenize call the policy needed
//	stockpot_router_backend_up{backend,url}               health
//	stockpot_router_backend_inflight{backend,url}         load
//	stockpot_router_index_blocks{backend,url}             index size
//	stockpot_router_remote_index_blocks                   the shared remote tier's blocks (all replicas)
//	stockpot_router_event_lag_seconds{backend,url}        age of the last event when applied
//	stockpot_router_resyncs_total{backend,url}            snapshots loaded
//	stockpot_router_event_gaps_total{backend,url}         sequence gaps seen
//	stockpot_router_replica_restarts_total{backend,url}   epoch changes seen
//	stockpot_router_events_total{backend,url}             events applied
//	stockpot_router_event_garbage_total{backend,url}      streams/snapshots that did not parse (index dropped)
//	stockpot_router_stream_failures_total{backend,reason} streams broken after their first event
//	stockpot_router_unauthorized_total{scope}             refused keys (client, admin, metrics)
//	stockpot_router_connections                           open client connections
//	stockpot_router_connection_waits_total                accepts that waited for MaxConnections
//	stockpot_router_backend_ejections_total{backend}      passive-health ejections (outlier.go)
//	stockpot_router_backends_ejected                      backends out by passive health now
//	stockpot_router_pd_requests_total{path}               disaggregated requests by path (handoff, short_tail,
//	                                                        prefill_failed, prefill_refused, no_pools, client_params)
//	stockpot_router_pd_prefill_retries_total              prefill attempts after a failed one
//	stockpot_router_pd_prefill_failures_total{reason}     failed prefill attempts (connect, timeout, 5xx, no_params)
//	stockpot_router_pd_prefill_seconds{outcome}           histogram: the prefill hop (ok, failed, refused)
//
// Hit rate as the router saw it is cached_tokens_total / prompt_tokens_total;
// prediction quality is predicted_tokens_total against cached_tokens_total.
// Every proxied answer carries X-Stockpot-Backend: the chosen backend's ID.
package router
