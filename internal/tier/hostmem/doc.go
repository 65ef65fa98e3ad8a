// Package hostmem is the host-RAM tier: a tier.Store with a byte budget
// (--host-cache) and least-recently-used eviction.
//
// # One mutex, not shards
//
// Every operation is a map probe and a few pointer moves per key, done for a
// whole batch under one lock acquisition; its callers are the offload writer
// and the fetcher, a handful of goroutines, not every request. One mutex
// keeps the LRU order and the byte budget exact (shards would each get a
// slice of the budget and evict by a local order, so a hot shard would evict
// while others have room). Shard when a profile shows the lock, not before.
//
// # Zero copy
//
// Put keeps the caller's value slice (tier.Store's ownership rule: the caller
// never writes to it again), and Get returns the stored slice itself. That is
// safe because the store never writes into a value: an overwrite or an
// eviction only drops the store's reference, and a reader still holding the
// old slice keeps it alive. So a block costs one copy out of the arena (at
// eviction) and one copy back in (at restore), nothing in between.
//
// # Spill
//
// The host tier is the top of the lower tiers, so what it evicts may be the last copy above
// the disk. SpillTo (tier.Spiller) hands every evicted item to the offload writer, which
// tells the disk its copy is now the only one (see package tier, "Sole copies"). Get touches
// a batch's keys last to first, so a restored prefix's head is the most recent and eviction
// takes chains from their tails.
//
// # Pins
//
// The store is a tier.Pinner. A pinned entry leaves the LRU list for a heap by expiry
// (lru.Pins), so eviction never sees it; a Get refreshes its expiry to now + TTL; a Put
// without PinTTL over a pinned entry keeps the pin (refreshed). Every operation sweeps
// first: expired pins become the least recent unpinned entries (one comparison when none
// has expired, and no clock read while nothing is pinned). A Put that could make room only
// by evicting a pin is declined (Stats.Declined; an overwrite so declined keeps the old
// value): the pins stay, and a pin budget above (the engine's --pin-budget) keeps them
// from filling the tier. Config.Now is the clock, for tests.
//
// Accounting: UsedBytes counts value bytes plus a fixed per-entry overhead
// (entryOverhead), so a budget of tiny values still bounds memory.
package hostmem
