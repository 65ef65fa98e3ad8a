package offload

import (
	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
)

// Promotion: a block restored from disk or remote is also put in host, so the next request
// that needs it after the working pool lets it go again reads it from RAM, not from the disk
// or the network a second time (the hot set climbs to the fastest tier that has room).
//
// How: the fetch hands the record's bytes as read (the tier's value, verified; no copy, no
// re-encoding) to Writer.Promote, which queues them on the host tier's write queue, off the
// request's path: never blocking, a full queue drops the promotion (counted as a host
// queue_full write failure). Host's own admission applies: its budget, its LRU eviction (what
// it evicts spills back down as any host eviction does, and the disk already holds it). The
// write admission (MinHits, MinPrefixTokens) is not applied again: the block passed it when
// it was written to the tier it came from. Values the disk's Recycler would reuse are not
// recycled when promoted: host keeps them.

// SetPromote makes every fetch hand the records it restored from a tier other than host to fn
// (as Items to put in host). fn must not block. nil turns promotion off. Call it before the
// first Fetch.
func (f *Fetcher) SetPromote(fn func([]tier.Item)) { f.promote = fn }

// promotes reports whether blocks read from tier t are promoted (so their values are kept).
func (f *Fetcher) promotes(t kvtier.Tier) bool {
	return f.promote != nil && t != kvtier.Host && t != kvtier.Transfer
}

// promoteUsable hands the usable blocks of res that came from below host to f.promote.
// REQUIRES: vals[i] is block i's value as read, for i < res.Usable.
func (f *Fetcher) promoteUsable(req Request, res *Result, vals [][]byte) {
	if f.promote == nil {
		return
	}
	var items []tier.Item
	for i := range res.Usable {
		if b := res.Blocks[i]; b.Record != nil && f.promotes(b.Tier) && vals[i] != nil {
			items = append(items, tier.Item{Key: tier.Key{Root: req.Root, Hash: req.Hashes[i]}, Value: vals[i]})
		}
	}
	if len(items) > 0 {
		f.promote(items)
	}
}

// Promote queues items (encoded records restored from a lower tier) on the host tier's
// queue. Never blocks: what a full queue refuses is dropped and counted.
func (w *Writer) Promote(items []tier.Item) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return
	}
	for _, q := range w.queues {
		if q.t.Tier != kvtier.Host {
			continue
		}
		for _, it := range items {
			select {
			case q.ch <- queued{item: it}:
				w.promoted.Add(1)
			default:
				w.drop(q)
			}
		}
	}
}

// SetRestored makes every fetch hand the keys of the verified blocks it restored from the
// remote tier to fn (adoption: tierEvents.adopt). fn must not block for long. Call it before
// the first Fetch.
func (f *Fetcher) SetRestored(fn func([]tier.Key)) { f.restored = fn }

// reportRemote hands the usable blocks of res that came from the remote tier to f.restored.
func (f *Fetcher) reportRemote(req Request, res *Result) {
	if f.restored == nil {
		return
	}
	var keys []tier.Key
	for i := range res.Usable {
		if b := res.Blocks[i]; b.Record != nil && b.Tier == kvtier.Remote {
			keys = append(keys, tier.Key{Root: req.Root, Hash: req.Hashes[i]})
		}
	}
	if len(keys) > 0 {
		f.restored(keys)
	}
}
