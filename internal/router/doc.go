// Package router is Stockpot's cache-aware gateway: it spreads OpenAI
// requests over replicas so that each lands where its prompt prefix is
// already cached, without hot spots, and hides replica failures.
//
// It never imports the engine. It shares with the replicas only the hash
// chain (package prefix: the router hashes a prompt's tokens exactly as a
// replica does, rooted at the identity the replica announces) and the event
// stream (package kvevents).
//
// # Parts
//
//   - Backend: one replica; in-flight count, health, and its block index.
//   - replicaIndex: one replica's block set (hash → tiers), a kvevents.Sink
//     fed by a Subscriber on the replica's /v1/kv-events. The global index
//     is the set of them; a resync swaps one replica's map alone.
//   - Policy (Pick(req, candidates) Decision): random, round-robin,
//     least-loaded, prefix (rendezvous hashing with bounded loads on
//     X-Session-ID or the first PrefixTokens tokens; a spilled key sticks
//     to where it last went while that backend has room) and kv-aware (matched
//     prompt blocks weighted by tier, minus a load penalty; falls back to
//     prefix affinity when no replica holds any of the prompt or none
//     offers events).
//   - Router: membership (add/remove at run time), health checks, the
//     reverse proxy with retries, and metrics.
//
// # Anti-hot-spot rules
//
// Ties are broken uniformly at random (reservoir sampling), never by list
// order. Affinity and cache scores both respect a load cap of
// ceil(LoadBound · (in flight + 1) / backends) and the concurrency
// threshold; past them the request goes to the next candidate.
//
// # Staleness
//
// A replica's index is used only while its stream is in sync and spoke
// (event or heartbeat) within StaleAfter; an entry not re-stored within
// EntryTTL is ignored. Gaps, restarts (epoch changes) and reconnects past
// the replica's ring trigger a resync from its snapshot (package kvevents).
//
// # Retries
//
// A request is retried on another backend (up to MaxAttempts) when it fails
// before any byte reached the client: connection refused or reset, a 5xx
// status, a non-streamed body cut short (non-streamed answers are buffered
// whole), or a stream that ends before its first byte. A connection error
// takes the backend out at once; the health checker brings it back.
//
// # Metrics (router's own registry)
//
//	stockpot_router_requests_total{backend,code}          proxied requests by final status
//	stockpot_router_decisions_total{policy,backend,reason} decisions (reason: affinity, spill,
//	                                                        cache, fallback-*, least-loaded, ...)
//	stockpot_router_decision_backend_load                 histogram: chosen backend's in-flight count
//	stockpot_router_predicted_tokens_total{backend}       predicted matched prompt tokens (kv-aware)
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
//	stockpot_router_event_lag_seconds{backend,url}        age of the last event when applied
//	stockpot_router_resyncs_total{backend,url}            snapshots loaded
//	stockpot_router_event_gaps_total{backend,url}         sequence gaps seen
//	stockpot_router_replica_restarts_total{backend,url}   epoch changes seen
//	stockpot_router_events_total{backend,url}             events applied
//
// Hit rate as the router saw it is cached_tokens_total / prompt_tokens_total;
// prediction quality is predicted_tokens_total against cached_tokens_total.
// Every proxied answer carries X-Stockpot-Backend: the chosen backend's ID.
package router
