package offload

import (
	"fmt"

	"stockpot/internal/kvtier"
)

// WritePolicy says when computed blocks reach the shared (remote) tier (`--remote-write`).
// Host and disk are always written back (on eviction and at shutdown).
//
// Why the remote tier is written through: it is the tier other replicas restore from. A block
// that reaches Redis only when this replica evicts it is invisible to the fleet for as long as
// it is hot here, which is exactly when the others want it (Mooncake's pooling; SGLang
// HiCache's write_through). The write is off the request's path: the engine's block event
// enqueues the encoded block on the remote tier's bounded queue, and a full queue drops it,
// counted (stockpot_kv_offload_dropped_writes_total{tier="remote"} and
// stockpot_kv_tier_write_failures_total{tier="remote",reason="queue_full"}).
type WritePolicy uint8

const (
	// WriteSelective (the default) writes a block to the remote tier as soon as it passes the
	// write admission (Admission): at its commit when MinHits is 0 and its prefix is at least
	// MinPrefixTokens long, otherwise at the reuse that brings its hits (distinct requests
	// that reused it, prefix.Cache.Reused) to MinHits. With the default admission (both 0)
	// it writes what WriteThrough writes.
	WriteSelective WritePolicy = iota
	// WriteThrough writes every computed full block to the remote tier at its commit,
	// whatever the admission (the admission still governs host and disk's write-back).
	WriteThrough
	// WriteBack writes the remote tier as host and disk: evicted blocks that pass admission,
	// and the working pool at shutdown.
	WriteBack
)

var writePolicyNames = [...]string{WriteSelective: "selective", WriteThrough: "through", WriteBack: "back"}

func (p WritePolicy) String() string {
	if int(p) < len(writePolicyNames) {
		return writePolicyNames[p]
	}
	return fmt.Sprintf("WritePolicy(%d)", uint8(p))
}

// ParseWritePolicy parses through, selective or back.
func ParseWritePolicy(s string) (WritePolicy, error) {
	for p, n := range writePolicyNames {
		if s == n {
			return WritePolicy(p), nil
		}
	}
	return 0, fmt.Errorf("offload: remote write policy %q: want through, selective or back", s)
}

// writesThrough reports whether tier is written at commit rather than at eviction under p.
// REQUIRES: p is valid.
func (p WritePolicy) writesThrough(t kvtier.Tier) bool { return t == kvtier.Remote && p != WriteBack }

// Through offers one block that was just computed (committed), or just reused, to the tiers
// written through (WriterConfig.Remote): the remote tier unless the policy is WriteBack. The
// admission is the policy's: every block under WriteThrough, Admission under WriteSelective
// (ev.Hits is the block's reuses so far). kv is read only during the call. It returns whether
// the block was queued. Never blocks: a full queue drops the write, counted.
//
// Those tiers get no write-back (Enqueue, EnqueueWait) of the blocks: they have them since
// the commit, or they did not pass admission, which write-back applies too (hits only grow,
// and a block evicted at its threshold was written through at that reuse). A write-through
// that was dropped is lost until another replica computes the block.
//
// A block restored from the remote tier is committed like a computed one, so it is written
// through again: a second write of the same bytes, which also restarts its TTL in Redis (an
// unpinned block's reads do not), so a prefix the fleet keeps restoring does not expire.
func (w *Writer) Through(ev Evicted, kv []byte) bool {
	if w.cfg.Remote == WriteSelective && !w.cfg.Admission.Admit(ev.Hits, ev.PrefixTokens) {
		w.notAdmitted.Add(1)
		return false
	}
	var qs []*tierQueue
	for _, q := range w.queues {
		if w.cfg.Remote.writesThrough(q.t.Tier) {
			qs = append(qs, q)
		}
	}
	if len(qs) == 0 {
		return false
	}
	b := w.encode(ev, kv)
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return false
	}
	w.through.Add(1)
	sent := false
	for _, q := range qs {
		select {
		case q.ch <- queued{item: b.item(ev)}:
			sent = true
		default:
			w.drop(q)
		}
	}
	return sent
}
