// Package runner runs one generation on the engine and turns its token stream into what a
// client is shown: detokenized text deltas, cut at stop strings, with the usage that
// describes exactly what was sent. It owns the interface to the engine (engine.Generator)
// for serving requests; internal/pipeline builds the pipeline.Spec it runs, and
// internal/server writes its deltas in each dialect's shape.
//
// Why a package of its own: the loop holds the invariants every dialect relies on, and
// the fleet work (prefill/decode roles, handoffs) changes how a generation runs, not how a
// request is parsed or answered.
//
// What it owns:
//   - Generate: the engine request's context derives from the caller's, so a client that
//     goes away cancels its engine request; the engine's channel is always drained to its
//     end, so the final usage is known and no engine goroutine blocks on a send. Stop
//     strings are matched on detokenized text (stopFilter): text that could be the start of
//     one is held back until it is known not to be, and on a match the output is cut before
//     it and the engine request cancelled. The engine handles stop tokens and max_tokens.
//   - The TTFT floor (floor.go): a request whose prompt holds blocks its principal
//     (WithPrincipal) did not send gets its first token no sooner than max(floor, this
//     server's p95 miss TTFT for what it would compute), every later output shifted alike,
//     and a miss's usage; decided from a ledger of who sent which block, never from the
//     cache's state, so the treatment itself tells nothing.
//   - Miss explanations (miss.go): the cause of a prompt's miss named from the engine's
//     evidence and the prompt's segments, counted in stockpot_prefix_miss_total{cause}.
//
// Errors: ErrClientGone when the client left (not an API error: nobody to answer), else an
// *api.Error (EngineError maps the engine's).
package runner
