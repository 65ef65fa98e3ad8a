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
// It imports nothing: a leaf under package tier.
package lru
