// Package connlimit owns the listener serve accepts connections on: how many it holds at
// once, how many one client may hold, how long a connection may take to send a request's
// head, and the few kept for health probes.
//
// Why a package of its own: these are rules about connections, not about requests. They act
// before net/http has parsed anything (Accept, SetReadDeadline, the bytes net/http writes on
// its own), so they are tested without a server or a handler, and the server only wires them:
// it builds a Listener from its Config, installs ConnContext, and refuses on a HealthOnly
// connection whatever is not a probe.
//
// # The rules
//
//   - At most Max+Reserve connections are open at once. Accept takes a slot before accepting,
//     so connections over the cap wait in the kernel's backlog (a slow connect, not a reset).
//   - At most PerClient from one remote IP; one over its share is answered 429 in the API's
//     error shape and closed at once (a TLS connection is closed without an answer).
//   - The connections accepted while Max are open come from the reserve (HealthReserve on
//     serve) and are HealthOnly: they may carry only GET /health and /ready, so probes are
//     answered while clients hold every other slot.
//   - The wait for a request's head (net/http's ReadHeaderTimeout, and IdleTimeout between
//     requests) is all of it while at most half the slots are open, then falls in a straight
//     line to a floor of 1 s when all are (headerBudget): connections held by half-sent heads
//     turn over faster the fuller the listener is. A health-only connection always gets
//     the floor.
//   - net/http's own plain-text answers to requests it cannot parse (400, 431, 501) are
//     rewritten into the API's JSON error shape, with the same status.
//
// Invariants: a Listener's open count equals the slots held, each connection frees its slot
// exactly once (on its first Close), and the per-IP table has no zero entries.
package connlimit
