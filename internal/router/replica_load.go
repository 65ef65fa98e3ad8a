package router

import (
	"time"

	"stockpot/internal/kvevents"
)

// The replicas' load. Each replica publishes its own load on its event stream (a "load" line,
// kvevents.Load): sequences running and waiting, prompt tokens queued for prefill, and the
// share of its KV pool held. Every router in front of it reads the same figures, where a
// router's count of its own requests in flight sees only its share; so two routers agree on
// which replica is busy, and neither piles work on a replica the other keeps full.
//
// The load a policy reads (Backend.loadSignal) is this router's own requests in flight
// (exact and current) plus the other requests the replica reported: its running and waiting
// sequences less this router's in flight when the report arrived, never below 0. A report
// that lags a request this router just finished therefore does not count it twice, and a
// burst this router sends is counted before the next report says so. Without a live report
// (no events, a replica that predates load lines, a stream not in sync) it is the router's own
// count, as before.
//
// Where it is read: kv-aware's load penalty (a replica's score loses LoadPenalty per request
// it runs or queues, whoever sent it), the least-loaded pick (the fallback of every policy),
// and kv-aware's bounded-load cap (capacity over boundLoad, for its cache picks and its
// affinity fallback). The bound is where a stale report hurts: a session's next turn arriving
// through another router right after its last turn finished, with the report that says the
// turn finished still on its way, would find its replica at the cap of a near-idle fleet and
// spill off its cache (TestFleetRouterRestartAndTwoRouters). Two things keep it out:
//
//   - Fresh reports. A replica sends a load line the engine step a request is queued,
//     admitted or finishes (kvevents.LoadNotifier, engine.LoadChanged), not only at its
//     load poll; the line leaves before the answer's last bytes reach the client, as a rule.
//   - A bound robust to one stale report. The others a report adds to the bound are the
//     lesser of its own and those of the report before it that said a different total
//     (boundOthers): a request another router just sent counts in the bound from the next
//     change on, and a report that still shows a finished request is outvoted by the one
//     before it. The router's own requests are always counted exactly, never twice: a report
//     older than this router's last forward counts that forward in own, not in others
//     (others is the report less this router's in flight when it arrived, never below 0).
//
// ConcurrencyThreshold stays on this router's own count (it is a per-router setting), and the
// prefix policy's bound too (placement by key alone, the same on every router).
//
// The report's queued prefill tokens and KV usage are read by kv-aware too:
//
//   - Queued prefill tokens are a cost in the score's own unit. A matched block is a block
//     of prompt the replica need not prefill; a block of prompt queued for prefill ahead of
//     the request is one it waits for. So kv-aware's score loses PrefillPenalty per block
//     (the replica's block size) of queued prefill: a replica holding k more blocks of the
//     prompt than another, but with more than k more blocks of others' prompts to prefill
//     first, answers the first token later, and loses. No prefill rate is needed: both sides
//     are counted in prefill blocks.
//   - KV usage (the share of the pool held by running requests and pins, not by cached
//     prefixes, which are what kv-aware routes to) is the bound's third signal: a replica at
//     KVUsageMax or more is at its bound, as one at capLoad is. Another request there would
//     wait for blocks or preempt a running one; cached blocks it holds are not pressure.
//
// Both read the lesser of the report and the one before it that said a different total
// (boundQueued, boundKVUsage), like the others of the bound: one stale report does not push
// a session off its replica.
//
// GET /backends shows each replica's report (replica_load) and the load the policies read.

// loadReport is one load line as the router received it.
type loadReport struct {
	kvevents.Load
	own int       // this router's requests in flight on the backend when it arrived
	at  time.Time // when it arrived
	// prevOthers is othersOf the last report before it whose running plus waiting differed
	// (a report of the same total, a waiting request admitted, carries it on); -1: none.
	// prevQueued and prevKVUsage are that report's queued prefill tokens and KV usage.
	prevOthers  int
	prevQueued  int
	prevKVUsage float64
}

// ReplicaLoad is the replica part of a BackendStatus.
type ReplicaLoad struct {
	Running             int     `json:"running"`
	Waiting             int     `json:"waiting"`
	QueuedPrefillTokens int     `json:"queued_prefill_tokens"`
	KVUsage             float64 `json:"kv_usage"`
	AgeMS               float64 `json:"age_ms"`
	// Others is the requests in the report that are not this router's; Load is what the
	// policies read (this router's in flight plus Others).
	Others int `json:"others"`
	Load   int `json:"load"`
	// BoundLoad is what kv-aware's load bound reads: this router's in flight plus the others
	// of this report and the one before it, whichever is less (robust to one stale report).
	BoundLoad int `json:"bound_load"`
}

// backendSink is a backend's event Sink: its block index, and its load (kvevents.LoadSink).
type backendSink struct {
	*replicaIndex
	b *Backend
}

// Reset forgets the load with the block set: a resync starts from a new stream, whose first
// lines bring the load again.
func (s backendSink) Reset(snap kvevents.Snapshot) {
	s.b.replica.Store(nil)
	s.replicaIndex.Reset(snap)
}

func (s backendSink) Load(l kvevents.Load) {
	s.b.storeReport(l, time.Now())
}

// storeReport keeps l as the replica's latest report, with the others of the one before it
// (boundOthers). Reports arrive from the backend's one stream goroutine.
func (b *Backend) storeReport(l kvevents.Load, now time.Time) {
	rep := &loadReport{Load: l, own: b.Load(), at: now, prevOthers: -1}
	if old := b.replica.Load(); old != nil {
		if old.Running+old.Waiting != l.Running+l.Waiting {
			rep.prevOthers, rep.prevQueued, rep.prevKVUsage = othersOf(old), old.QueuedPrefillTokens, old.KVUsage
		} else {
			rep.prevOthers, rep.prevQueued, rep.prevKVUsage = old.prevOthers, old.prevQueued, old.prevKVUsage
		}
	}
	b.replica.Store(rep)
}

var _ kvevents.LoadSink = backendSink{}

// liveReport returns the replica's last load report while its stream is live (in sync, a
// line within staleAfter); nil otherwise.
func (b *Backend) liveReport(staleAfter time.Duration, now time.Time) *loadReport {
	rep := b.replica.Load()
	if rep == nil || !b.liveIndexAt(staleAfter, now) {
		return nil
	}
	return rep
}

// othersOf is the requests in rep that are not this router's (rep's running and waiting less
// this router's in flight when it arrived).
func othersOf(rep *loadReport) int { return max(rep.Running+rep.Waiting-rep.own, 0) }

// loadSignal is the load policies read: this router's requests in flight plus the others the
// replica reported (see above).
func (b *Backend) loadSignal(staleAfter time.Duration, now time.Time) int {
	own := b.Load()
	if rep := b.liveReport(staleAfter, now); rep != nil {
		return own + othersOf(rep)
	}
	return own
}

// boundOthers is the others a report adds to the load bound: the lesser of its own and the
// previous different report's (a first report stands alone).
func boundOthers(rep *loadReport) int {
	o := othersOf(rep)
	if rep.prevOthers >= 0 {
		o = min(o, rep.prevOthers)
	}
	return o
}

// boundQueued is the queued prefill tokens kv-aware's score reads: the lesser of the report's
// and the previous different report's (a first report stands alone).
func boundQueued(rep *loadReport) int {
	if rep.prevOthers >= 0 {
		return min(rep.QueuedPrefillTokens, rep.prevQueued)
	}
	return rep.QueuedPrefillTokens
}

// boundKVUsage is the KV usage kv-aware's bound reads, robust to one stale report as above.
func boundKVUsage(rep *loadReport) float64 {
	if rep.prevOthers >= 0 {
		return min(rep.KVUsage, rep.prevKVUsage)
	}
	return rep.KVUsage
}

// replicaPressure is what a live report adds to kv-aware's choice: the queued prefill tokens
// its score reads and the KV usage its bound reads; zeros without a live report.
func (b *Backend) replicaPressure() (queued int, kvUsage float64) {
	if rep := b.liveReport(loadStaleAfter, time.Now()); rep != nil {
		return boundQueued(rep), boundKVUsage(rep)
	}
	return 0, 0
}

// boundLoad is the load kv-aware's bounded-load cap reads: this router's requests in flight
// plus boundOthers of the replica's live report.
func (b *Backend) boundLoad() int {
	own := b.Load()
	if rep := b.liveReport(loadStaleAfter, time.Now()); rep != nil {
		return own + boundOthers(rep)
	}
	return own
}

// replicaStatus is the ReplicaLoad of GET /backends (staleness as the default policy config's).
func (b *Backend) replicaStatus() *ReplicaLoad {
	now := time.Now()
	rep := b.liveReport(loadStaleAfter, now)
	if rep == nil {
		return nil
	}
	return &ReplicaLoad{Running: rep.Running, Waiting: rep.Waiting, QueuedPrefillTokens: rep.QueuedPrefillTokens,
		KVUsage: rep.KVUsage, AgeMS: float64(now.Sub(rep.at)) / 1e6, Others: othersOf(rep), Load: b.Load() + othersOf(rep),
		BoundLoad: b.Load() + boundOthers(rep)}
}

// loadStaleAfter is how long a replica's stream may stay silent (no event, heartbeat or load
// line) before its load report stops counting: PolicyConfig.StaleAfter's default (a live
// stream sends a heartbeat every second).
const loadStaleAfter = 5 * time.Second

// policyLoad is loadSignal now, as the policies read it.
func (b *Backend) policyLoad() int { return b.loadSignal(loadStaleAfter, time.Now()) }
