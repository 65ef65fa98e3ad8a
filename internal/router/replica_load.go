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
// it runs or queues, whoever sent it) and the least-loaded pick (the fallback of every
// policy). The bounded-load cap (capacity) and ConcurrencyThreshold stay on this router's own
// count: a report lags its replica by up to its load interval, and a session's next turn
// arriving through another router right after its last turn finished would find its replica
// at the cap of a near-idle fleet and spill off its cache (TestFleetRouterRestartAndTwoRouters
// caught exactly that). The report's queued prefill tokens and KV usage are shown (GET
// /backends) but not scored, for the same lag: a backlog or a pool held by a request that
// has just finished would cost its replica the next request, which its cache may hold.
//
// GET /backends shows each replica's report (replica_load) and the load the policies read.

// loadReport is one load line as the router received it.
type loadReport struct {
	kvevents.Load
	own int       // this router's requests in flight on the backend when it arrived
	at  time.Time // when it arrived
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
	s.b.replica.Store(&loadReport{Load: l, own: s.b.Load(), at: time.Now()})
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

// replicaStatus is the ReplicaLoad of GET /backends (staleness as the default policy config's).
func (b *Backend) replicaStatus() *ReplicaLoad {
	now := time.Now()
	rep := b.liveReport(loadStaleAfter, now)
	if rep == nil {
		return nil
	}
	return &ReplicaLoad{Running: rep.Running, Waiting: rep.Waiting, QueuedPrefillTokens: rep.QueuedPrefillTokens,
		KVUsage: rep.KVUsage, AgeMS: float64(now.Sub(rep.at)) / 1e6, Others: othersOf(rep), Load: b.Load() + othersOf(rep)}
}

// loadStaleAfter is how long a replica's stream may stay silent (no event, heartbeat or load
// line) before its load report stops counting: PolicyConfig.StaleAfter's default (a live
// stream sends a heartbeat every second).
const loadStaleAfter = 5 * time.Second

// policyLoad is loadSignal now, as the policies read it.
func (b *Backend) policyLoad() int { return b.loadSignal(loadStaleAfter, time.Now()) }
