package kvevents

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Load is a replica's load as its engine sees it: every request it holds, whichever router
// (or client) sent it. Routers in front of the same replicas read the same figures, where
// each router's own count of requests in flight sees only its own share.
type Load struct {
	Running int // sequences being generated (admitted)
	Waiting int // sequences queued for admission
	// QueuedPrefillTokens is the prompt tokens the replica has yet to prefill: each waiting
	// request's prompt and each running one's uncomputed part (engine.Stats).
	QueuedPrefillTokens int
	// KVUsage is the share of the working pool's KV blocks held by running requests and pins,
	// 0 to 1 (stockpot_kv_cache_usage_ratio).
	KVUsage float64
}

// LoadSink is a Sink that also takes the replica's load: each "load" line of the stream. A
// Subscriber calls it when its Sink has the method; a Sink without it (an older router)
// never sees the lines.
type LoadSink interface {
	Load(l Load)
}

// DefaultLoadInterval is how often a stream checks the replica's load (Config.LoadInterval),
// sending a load line when it changed.
const DefaultLoadInterval = 10 * time.Millisecond

// wireLoad is the "load" object of a {"type":"load"} line.
type wireLoad struct {
	Running             int     `json:"running"`
	Waiting             int     `json:"waiting"`
	QueuedPrefillTokens int     `json:"queued_prefill_tokens"`
	KVUsage             float64 `json:"kv_usage"`
}

// decodeLoad checks a load object from the wire: non-negative counts, a finite usage in [0, 1].
func decodeLoad(w *wireLoad) (Load, error) {
	if w == nil {
		return Load{}, errors.New("kvevents: load line without load")
	}
	if w.Running < 0 || w.Waiting < 0 || w.QueuedPrefillTokens < 0 || !(w.KVUsage >= 0 && w.KVUsage <= 1) {
		return Load{}, fmt.Errorf("kvevents: load: running %d, waiting %d, queued_prefill_tokens %d, kv_usage %v",
			w.Running, w.Waiting, w.QueuedPrefillTokens, w.KVUsage)
	}
	return Load{Running: w.Running, Waiting: w.Waiting, QueuedPrefillTokens: w.QueuedPrefillTokens, KVUsage: w.KVUsage}, nil
}

// appendLoadJSON appends l as one stream line (with the newline). seq is the latest event's,
// as in a heartbeat.
func appendLoadJSON(b []byte, seq uint64, l *Load) []byte {
	b = append(b, `{"type":"load","seq":`...)
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, `,"load":{"running":`...)
	b = strconv.AppendInt(b, int64(l.Running), 10)
	b = append(b, `,"waiting":`...)
	b = strconv.AppendInt(b, int64(l.Waiting), 10)
	b = append(b, `,"queued_prefill_tokens":`...)
	b = strconv.AppendInt(b, int64(l.QueuedPrefillTokens), 10)
	b = append(b, `,"kv_usage":`...)
	u := l.KVUsage
	if !(u >= 0) || math.IsInf(u, 0) {
		u = 0
	}
	b = strconv.AppendFloat(b, min(u, 1), 'g', -1, 64)
	b = append(b, "}}\n"...)
	return b
}

// LoadSource is where a publisher reads the replica's load: Load is called from stream
// handlers (safe for concurrent use, cheap) when a stream opens, every LoadInterval after, and
// when the source says it changed (LoadNotifier).
type LoadSource interface {
	Load() Load
}

// LoadFunc is a LoadSource read by a function.
type LoadFunc func() Load

// Load calls f.
func (f LoadFunc) Load() Load { return f() }

// LoadNotifier is a LoadSource that says when its load changed: LoadChanged returns a channel
// closed at the next change (a request admitted, queued or finished), so the streams send the
// new load at once rather than at their next LoadInterval tick. The routers read a replica's
// load at the moments a request starts and ends, where a report one tick old would count a
// finished request (replica_load.go in internal/router).
type LoadNotifier interface {
	LoadChanged() <-chan struct{}
}

// SetLoad registers where the publisher reads the replica's load (see LoadSource); a stream
// sends a load line when the load changed since the last it sent. nil: no load lines.
func (p *Publisher) SetLoad(src LoadSource) {
	p.mu.Lock()
	p.mu.load = src
	p.mu.Unlock()
}

func (p *Publisher) load() (Load, bool) {
	p.mu.Lock()
	src := p.mu.load
	p.mu.Unlock()
	if src == nil {
		return Load{}, false
	}
	return src.Load(), true
}

// loadChanged is the source's change channel; nil (never ready) without a LoadNotifier.
func (p *Publisher) loadChanged() <-chan struct{} {
	p.mu.Lock()
	src := p.mu.load
	p.mu.Unlock()
	if n, ok := src.(LoadNotifier); ok {
		return n.LoadChanged()
	}
	return nil
}
