// Package tiertest is the conformance suite of tier.Store: Run checks the
// contract every store (memstore, hostmem, disk, redis) must keep, so a new
// tier is tested by one line. It also builds test records (Chain).
//
// The suite assumes a store with room for a few hundred small records
// (SmallLayout) and no eviction in that range; a store with a byte budget is
// given one large enough by its newStore function.
package tiertest
