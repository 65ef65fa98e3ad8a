package router

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
)

// Backend is one replica behind the router.
type Backend struct {
	// ID is a stable name derived from the URL (first 8 hex digits of its
	// SHA-256): the same URL gets the same ID after a re-add, so rendezvous
	// hashing sends it the same sessions.
	ID  string
	URL *url.URL

	idHash uint64 // rendezvous seed

	inflight atomic.Int64
	healthy  atomic.Bool
	// failures counts consecutive failed health checks.
	failures atomic.Int32
	requests atomic.Uint64
	errors   atomic.Uint64
	lastErr  atomic.Pointer[string]

	// fixedRole is the role the operator gave (--prefill-backend, --decode-backend, POST
	// /backends with "role"); reportedRole is what the replica's /health last said. Role()
	// reads them (pd.go).
	fixedRole, reportedRole atomic.Pointer[Role]

	index *replicaIndex
	// replica is the replica's own load from its event stream (replica_load.go); nil before
	// a load line, after a resync, and for a replica that sends none.
	replica atomic.Pointer[loadReport]
	// events reports the replica's event stream (a *kvevents.Subscriber);
	// nil when the policy needs no events.
	events eventSource
	cancel context.CancelFunc
	done   chan struct{}
}

func newBackend(raw string) (*Backend, error) {
	raw = strings.TrimRight(strings.TrimSpace(raw), "/")
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("router: backend %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("router: backend %q: want http(s)://host:port", raw)
	}
	sum := sha256.Sum256([]byte(u.String()))
	b := &Backend{ID: hex.EncodeToString(sum[:4]), URL: u, idHash: binary.LittleEndian.Uint64(sum[8:16]), index: newReplicaIndex()}
	b.healthy.Store(true) // optimistic until the first check says otherwise
	return b, nil
}

// eventSource is what the router reads of a Subscriber (tests fake it).
type eventSource interface {
	Stats() kvevents.SubscriberStats
}

// Load returns the number of requests the router has in flight on b.
func (b *Backend) Load() int { return int(b.inflight.Load()) }

// Healthy reports whether b takes requests.
func (b *Backend) Healthy() bool { return b.healthy.Load() }

// BackendStatus is one row of GET /backends.
type BackendStatus struct {
	ID          string `json:"id"`
	URL         string `json:"url"`
	State       string `json:"state"`   // healthy | down
	Passive     string `json:"passive"` // passive health (outlier.go): in-service | ejected | half-open | probing
	Load        int    `json:"load"`    // requests in flight through this router
	Requests    uint64 `json:"requests"`
	Errors      uint64 `json:"errors"`
	LastError   string `json:"last_error,omitempty"`
	IndexBlocks int    `json:"index_blocks"`
	// Role is the backend's part in prefill/decode disaggregation (both, prefill, decode);
	// RoleFrom says where it came from: "flag" (--prefill-backend, --decode-backend or POST
	// /backends with a role), "health" (the replica's /health) or "default" (nothing said:
	// both). ReportedRole is what /health says when it differs from a role given by flag.
	Role         Role   `json:"role"`
	RoleFrom     string `json:"role_from"`
	ReportedRole Role   `json:"reported_role,omitempty"`
	// Pool is the pool the backend serves now while the router disaggregates (pd.go):
	// prefill, decode, "prefill,decode" or "standby" (a both backend while dedicated ones of
	// each pool are healthy); absent when no backend has a dedicated role.
	Pool string `json:"pool,omitempty"`
	// TierWeights is what kv-aware weighs a block by in each tier the replica has, derived
	// from its published cost figures; absent before any (the defaults apply).
	TierWeights map[string]float64 `json:"tier_weights,omitempty"`
	// ReuseBlocks is the replica's reuse unit from its event snapshot: kv-aware counts a
	// match only in whole runs of this many blocks (a hybrid model's state checkpoint
	// interval; 1 for others and for replicas that do not publish it). MinReusableTokens is
	// the same in tokens (× block size). Both absent before a snapshot loaded.
	ReuseBlocks       int     `json:"reuse_blocks,omitempty"`
	MinReusableTokens int     `json:"min_reusable_tokens,omitempty"`
	Events            *Events `json:"events,omitempty"`
	// Replica is the replica's own load from its event stream, every router's requests in it
	// (replica_load.go); absent before a load line or while the stream is not live.
	Replica *ReplicaLoad `json:"replica_load,omitempty"`
}

// Events is the event-stream part of a BackendStatus.
type Events struct {
	Synced      bool    `json:"synced"`
	Unsupported bool    `json:"unsupported"`
	Epoch       string  `json:"epoch"`
	Seq         uint64  `json:"seq"`
	Events      uint64  `json:"events"`
	Resyncs     uint64  `json:"resyncs"`
	Gaps        uint64  `json:"gaps"`
	Restarts    uint64  `json:"restarts"`
	Garbage     uint64  `json:"garbage"`
	LagMS       float64 `json:"lag_ms"`
	LastEventMS float64 `json:"last_event_age_ms"`
	LastError   string  `json:"last_error,omitempty"`
}

func (b *Backend) status() BackendStatus {
	st := BackendStatus{ID: b.ID, URL: b.URL.String(), State: "healthy", Load: b.Load(),
		Requests: b.requests.Load(), Errors: b.errors.Load(), IndexBlocks: b.index.Len()}
	if !b.Healthy() {
		st.State = "down"
	}
	st.Role, st.RoleFrom = b.roleFrom()
	if rep := b.reportedRole.Load(); st.RoleFrom == "flag" && rep != nil && *rep != st.Role {
		st.ReportedRole = *rep
	}
	if w, ok := b.index.publishedWeights(); ok {
		st.TierWeights = map[string]float64{}
		for t, v := range w {
			if t == int(kvtier.Device) || v > 0 {
				st.TierWeights[kvtier.Tier(t).String()] = v
			}
		}
	}
	if _, bs, ok := b.index.chain(); ok {
		st.ReuseBlocks = b.index.reuseUnit()
		st.MinReusableTokens = st.ReuseBlocks * bs
	}
	if e := b.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	st.Replica = b.replicaStatus()
	if b.events != nil {
		s := b.events.Stats()
		ev := &Events{Synced: s.Synced, Unsupported: s.Unsupported, Epoch: fmt.Sprintf("%x", s.Epoch), Seq: s.Seq,
			Events: s.Events, Resyncs: s.Resyncs, Gaps: s.Gaps, Restarts: s.Restarts, Garbage: s.Garbage,
			LagMS: float64(s.Lag) / 1e6, LastError: s.LastError}
		if !s.LastEvent.IsZero() {
			ev.LastEventMS = float64(time.Since(s.LastEvent)) / 1e6
		}
		st.Events = ev
	}
	return st
}

// liveIndex reports whether b's index can be trusted: the stream is in sync
// and a line (event or heartbeat) came within staleAfter.
func (b *Backend) liveIndex(staleAfter time.Duration) bool {
	return b.liveIndexAt(staleAfter, time.Now())
}

// liveIndexAt is liveIndex on a clock (PolicyConfig.Now).
func (b *Backend) liveIndexAt(staleAfter time.Duration, now time.Time) bool {
	if b.events == nil {
		return false
	}
	s := b.events.Stats()
	return s.Synced && !s.Unsupported && now.Sub(s.LastEvent) < staleAfter
}
