// Package lru is the recency list the byte-budget stores (hostmem, disk)
// share: an intrusive doubly linked list, so touching an entry on a hit is
// two pointer swaps and no allocation, which container/list's boxed values
// and per-element allocations would not give.
//
// A store embeds a Node in its entry, keeps one List per eviction class
// (disk has two: shadowed and sole copies), and guards both with its own
// mutex: the list is not safe for concurrent use. Front is the most
// recently used, Back the least.
//
// # Pins
//
// A pinned entry (tier.Pinner: prompt-cache retention) leaves its List for Pins, a min-heap by
// expiry, so eviction, which takes a List's Back, never sees it: nothing is scanned or
// skipped. A use refreshes the expiry (Touch: now + TTL). Expiry is found lazily: the top of
// the heap is the pin expiring first, so a store's sweep (Expire, done at the start of every
// operation and by its Sweep method) costs one comparison when nothing has expired. An
// expired entry goes back to the Back of its List, the earliest expired last: its last use is
// a TTL ago, so it is the first to go under pressure, as an unpinned entry that old would be. The time is
// always the caller's argument (a store's injectable clock): this package reads no clock.
//
// It imports time and package tier (for the tier.PinInfo that Pins.Infos lists); tier does not
// import it.
package lru
