// Package server is Stockpot's HTTP front: the four API dialects (OpenAI chat completions
// and completions, OpenAI Responses, Anthropic Messages) on top of an engine.Generator, plus
// /tokenize, /detokenize, /health, /metrics, the cache admin API and the dashboard.
//
// It is the thin layer of the request path. Each generation handler reads and parses its
// body (internal/api), builds what the engine runs with internal/pipeline (template, tools,
// grammar, pins: s.pipe), runs it with internal/runner (engine stream, stop strings, TTFT
// floor, miss explanation: s.run), and writes the deltas in its dialect's shape.
//
// It owns:
//   - Server: routing (JSON 404/405), panic recovery, graceful drain (Serve stops accepting
//     on ctx cancel and lets running requests finish for up to Config.DrainTimeout, then
//     cancels them so the engine frees their blocks).
//   - Auth (endpoint_auth.go): API keys as "Authorization: Bearer KEY" or "x-api-key: KEY"
//     (internal/apikey); the operator endpoints (admin API, block events, dashboard,
//     /metrics) each take their own keys, an admin key granting them all, and once any key
//     is configured none of them is open. 401 for a missing or unknown key, 403 for a known
//     key without the right. With Config.TLS, Serve speaks HTTPS (mutual TLS with a CA).
//   - Tenants (tenants.go, package tenant): a request's key names its tenant; behind a
//     router the tenant comes in tenant.Header, trusted only when signed with
//     Config.BackendKey. The tenant rides on the request context; generate derives the cache
//     salt from its namespace, and the generation routes take a slot of its quotas (429 with
//     Retry-After, in the route's dialect). The TTFT floor's principal (principal.go) and
//     --cache-isolation key's salt are named here, from the key and the tenant.
//   - Limits: the request memory budget (reqmem.go, package membudget), connection limits
//     applied by Serve (package connlimit), request bodies bounded in size and in read time
//     (a slow body gets a 408), net/http's plain-text errors rewritten into the API's shape.
//   - The dialect writers: chat.go, completions.go, responses.go (previous_response_id reads
//     a store bounded by count and bytes), messages.go (Anthropic's shapes, events and error
//     bodies, 529 for unavailable); SSE in sse.go with a fast path for text chunks.
//   - Metrics: counters fed from the very usage objects written to clients, so the sum of the
//     responses' usage equals the counters exactly; engine gauges and the engine's own
//     evidence (stockpot_engine_*, metrics_evidence.go) read from Generator.Stats() at scrape
//     time, so the two accounts check each other. Nothing is global: everything registers
//     on the prometheus.Registerer given to New.
//   - The dashboard (dashboard.go), the cache admin API (cache_admin.go, cache_pins.go) and
//     the recent request bodies for `stockpot lint --target` (recent.go).
//
// Invariants:
//   - Token counters are incremented once per finished generation, with the same numbers as
//     the usage object the client received (or would have received, for a stream without
//     include_usage). Requests whose client went away before the end are not counted.
//   - Every error is the dialect's own error shape with its status, auth and routing errors
//     on the Anthropic routes included.
package server
