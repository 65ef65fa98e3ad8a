// Package server is Stockpot's HTTP front: the OpenAI-compatible endpoints on top of an
// engine.Generator, plus /tokenize, /detokenize, /health and /metrics.
//
// It owns:
//   - Server: routing (JSON 404/405), API-key auth, body-size limits, panic recovery, graceful
//     drain (Serve stops accepting on ctx cancel and lets running requests finish for up to
//     Config.DrainTimeout, then cancels them so the engine frees their blocks).
//   - Auth: API keys as "Authorization: Bearer KEY" or "x-api-key: KEY" on the API; the
//     operator endpoints (admin API, block events, dashboard, /metrics) each take their own
//     keys, an admin key granting them all, and once any key is configured none of them is
//     open (endpoint_auth.go has the table and the defaults). 401 for a missing or unknown
//     key, 403 for a known key without the right. Keys are compared as SHA-256 digests in
//     constant time. With Config.TLS, Serve speaks HTTPS (mutual TLS with a client CA).
//   - The TTFT floor (ttft_floor.go, principal.go): with Config.TTFTFloor (or a Principal hook
//     giving per-tenant floors), a request whose prompt holds blocks its principal (by default
//     the key's SHA-256) did not send gets its first token no sooner than max(floor, the
//     server's p95 miss TTFT for what it would compute), every later output shifted alike, and
//     a miss's usage; decided from a ledger of who sent which block, never from the cache's
//     state, so the treatment itself tells nothing.
//   - Tenants (tenants.go, package tenant): with Config.Tenants a request's key names its
//     tenant (Config.APIKeys are the single-tenant shorthand, tenant.Single); behind a router
//     the tenant comes in tenant.Header, trusted only when signed with Config.BackendKey
//     (fresh, never replayed). The tenant rides on the request context (tenant.FromContext);
//     generate derives the cache salt from its namespace, so a client's cache_salt only
//     subdivides it; the generation routes take a slot of its quotas (429 with Retry-After,
//     in the route's dialect). An admin prewarm with "public": true marks its blocks public
//     (tenants with public_reads continue them); "tenant" prewarms in a tenant's namespace.
//     Per-tenant series: stockpot_tenant_requests_total, _prompt_tokens_total,
//     _quota_rejections_total and _cross_reuse_tokens_total (the engine's audit).
//   - Connection limits, applied by Serve: at most MaxConnections open connections (a
//     listener wrapper; more wait in the backlog), 16 more that serve only /health and
//     /ready, at most MaxConnectionsPerClient from one IP (more get a 429), waits for a
//     request's head that shrink to 1 s as the listener fills, keep-alive connections closed after
//     IdleTimeout, request bodies bounded by ReadTimeout (a read deadline armed when the
//     handler starts and cleared at the body's end, so streams have no time limit; a slow body
//     gets a 408 and its connection closed). net/http's own plain-text answers to requests it
//     cannot parse (431, 400, 501) are rewritten on the connection into the API's error shape.
//   - The generation loop: text prompts are tokenized here, chat templates applied here, and
//     stop strings are matched here on detokenized text (stopFilter). Streamed text that could
//     be the start of a stop string is held back until it is known not to be one; on a match the
//     output is cut before the stop string and the engine request is cancelled through its
//     context. The engine handles stop tokens and max_tokens.
//   - /v1/responses (OpenAI's Responses API): converted into the chat request it means and
//     served by the chat path (same rendering, tool-call parsing and constrained decoding);
//     previous_response_id reads an in-memory LRU of recent responses' items, bounded by
//     count and by bytes (Config.ResponsesStoreBytes; strings counted by length), which keeps
//     no response larger than its whole budget; ids the prompt does not hold (call_id, ...)
//     are refused over api.MaxIDBytes.
//   - /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API): converted into
//     the chat request it means and served by the chat path; responses, SSE events (with
//     event: lines) and errors ({"type":"error",...}, 529 for unavailable) in Anthropic's
//     shape, on those routes also for auth and routing errors. Usage reads the engine's cache
//     split: cache_read_input_tokens = cached tokens, input_tokens = the rest.
//   - Metrics: counters fed from the very usage objects written to clients, so the sum of the
//     responses' usage equals the counters exactly; engine gauges read from Generator.Stats()
//     by a collector at scrape time. Nothing is global: everything registers on the
//     prometheus.Registerer given to New. Beside them, the engine's own evidence
//     (Stats().Evidence: prompt tokens by source, requests by hit class, cancellations,
//     restored blocks, dedup waits, preemptions, late and dropped prefetches, pins) is
//     exported as stockpot_engine_* (metrics_evidence.go): counted in the scheduler, not
//     summed from the usage objects, so the two accounts check each other and the engine's
//     includes the requests whose client went away. TTFT and TPOT are also split by hit class
//     (stockpot_time_to_first_token_by_hit_seconds{hit}, ..._per_output_token_by_hit_...).
//   - The dashboard (dashboard.go): GET /dashboard (internal/dashboard's page), its SSE stream
//     /dashboard/events and its state as JSON /dashboard/state, fed by the registry, a ring of
//     the recent requests with their evidence chains, and the working pool's tree of cached
//     prefixes (read through the optional cacheLister interface). It takes the API key, also
//     as ?key= since browsers' EventSource sends no headers.
//   - The cache admin API (cache_admin.go): POST /v1/cache/prewarm, GET /v1/cache and
//     DELETE /v1/cache, guarded by the admin keys alone (403 without any, 401 for a wrong one),
//     served by a CacheAdmin (the engine) and, for the lower tiers, Config.TierStats and
//     Config.TierDrop.
//   - The recent requests (recent.go): GET /v1/requests/recent, the bodies of the last accepted
//     generation requests as JSONL {"path","session_id","at","body"}, oldest first, for
//     `stockpot lint --target`; a ring of at most 256 entries and 8 MiB of bodies (a body over
//     1 MiB is kept as skipped), recorded only when an admin key is configured, and guarded
//     by the admin keys alone as the cache admin API.
//
// Interfaces are consumer-owned and small: Tokenizer and StreamDecoder here describe exactly
// what the server needs from internal/tokenizer, which is wired in by a short adapter.
//
// Invariants:
//   - A request's engine context is derived from the HTTP request context, so a client that
//     disconnects cancels its engine request.
//   - The handler always drains the engine's output channel to its end, so the final usage is
//     known and no engine goroutine blocks on a send.
//   - Token counters are incremented once per finished generation, with the same numbers as
//     the usage object the client received (or would have received, for a stream without
//     include_usage). Requests whose client went away before the end are not counted.
package server
