// Package membudget is a byte budget that request-scoped work reserves from before it pays.
//
// Why: every cost a client can cause on a server (a request body read and parsed, the prompt
// rendered and tokenized from it, a grammar compiled from its schema) is bounded per request by
// a size limit, but not across requests: 256 concurrent 16 MiB bodies are 4 GiB of bodies before
// any parse, and a server with a 1 GiB KV pool is then taken to many times that by clients who
// need no key. A per-request limit times a connection limit is no bound anyone can provision
// for. A Budget is the bound across requests: each request reserves what it may cost before it
// pays it, waits (bounded by its own context) while others hold the budget, and gives it back
// when it is done. What a request reserves is an estimate from cheap facts (the body's length
// times a measured expansion), never its exact heap use, so the budget bounds the sum of
// estimates: the stated overhead in README is that sum plus what does not scale with requests.
//
// Key type: Budget (Acquire, TryAcquire, Release, InUse). A reservation larger than the whole
// budget is refused at once (ErrTooLarge): it could never be granted. Waiters are served in
// arrival order, so a large reservation is not starved by a stream of small ones.
//
// Invariants: InUse never exceeds the capacity; every Acquire that returned nil is matched by
// one Release of the same size (Release panics when more is released than held: a programmer
// bug). Pure apart from the lock and the waiters' channels: no goroutine, no I/O.
package membudget
