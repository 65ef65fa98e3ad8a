// Package tiertest is the conformance suite of tier.Store: Run checks the
// contract every store (memstore, hostmem, disk, redis) must keep, so a new
// tier is tested by one line. It also builds test records (Chain).
//
// A store that is a tier.Pinner must also pass the pin cases (Options.Pins makes its stores
// with a byte budget and a test Clock): Pin reports what it held, Put with PinTTL pins, a
// Get refreshes, ttl <= 0 unpins, pins expire by the clock and then behave as unpinned, and,
// for a store with a budget, pins survive a flood of unpinned Puts that evicts everything
// else while a Put that would need a pin's room is declined. RunOptions fails for a Pinner
// without Options.Pins, so no store skips them.
//
// The suite assumes a store with room for a few hundred small records
// (SmallLayout) and no eviction in that range; a store with a byte budget is
// given one large enough by its newStore function.
package tiertest
