package engine

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
)

// Pins: prompt-cache retention in the working pool.
//
// A pin keeps a prompt prefix's blocks in the pool until TTL after their last use. The pin
// table owns one extra reference on each pinned block (blockCache.ref), so the prefix cache
// never evicts it, nor any block above it (a referenced block pins its ancestors); unpinned
// blocks behave exactly as before. The table is part of the pure core: the time comes in
// with every call, and expiry happens on each Schedule (and so on each step) and on the
// runner's sweep while idle (Engine.run), by dropping the reference.
//
// The table is per block, keyed by chain hash: a request's pins are prefixes of its prompt,
// and a block covered by several pins takes the longest TTL among them. A request that
// reuses pinned blocks (a hit at admission) refreshes their expiry to now + their TTL.
//
// Budget: pins hold at most budget blocks in all. A pin whose blocks do not all fit is
// partial: its leading blocks up to the budget (a prefix, so what is held is reachable),
// reported in Usage.Pins with the limit that stopped it (PinResult.Limit). A strict request
// reserves its new blocks when it is queued (Engine.Generate, on the runner) and is refused
// with ErrPinBudget if they do not fit, so a strict pin is never partial for want of budget.
//
// Owners (CoreConfig.PinOwners: the tenants of a tenants file): each pinned or reserved block
// is charged to the owner of the request that pinned it first (Request.Owner; 0 is the
// operator's: public prefixes, prewarms for no tenant). Owner o >= 1 may hold at most
// limit[o] blocks (its cache_bytes quota), and every owner, 0 included, is guaranteed
// share[o] = min(limit[o], budget / (owners + 1)) blocks that no other owner's pins can take.
// The table keeps
//
//	held = Σ_o max(use[o], share[o]) <= budget      (use: pinned + reserved blocks of o)
//
// and admits one more block of owner o when use[o] < limit[o] and either use[o] < share[o]
// (within its share: held does not grow) or held < budget (borrowing what no share holds).
// So a tenant that pins all it can still leaves every other tenant its share, and what the
// caps leave of the budget is borrowed first come. A share is held, not lent: an idle
// tenant's share stays free (lending it would mean taking pins back from the borrower, which
// a client told "pinned for 24h" would not expect). Without owners there is one share, the
// whole budget: the table behaves as a plain budget.
//
// Events: each pin created, upgraded to a longer TTL, refreshed (at most once per
// pinRefreshEvery of its TTL, so a hot prefix does not flood the tiers) or unpinned is
// queued as a PinEvent for Hooks.PinEvents, which takes pins down to the lower tiers.

// PinEventKind says what happened to a pinned block.
type PinEventKind uint8

const (
	// PinCreated: the block is pinned now (new, or its TTL grew). Its K/V comes with the event.
	PinCreated PinEventKind = iota + 1
	// PinRefreshed: a hit moved the expiry to Expires; the TTL is unchanged.
	PinRefreshed
	// PinRemoved: the pin was dropped before it expired (Unpin). Expiry itself is not an
	// event: every tier expires a pin on its own clock.
	PinRemoved
)

func (k PinEventKind) String() string {
	switch k {
	case PinCreated:
		return "created"
	case PinRefreshed:
		return "refreshed"
	case PinRemoved:
		return "removed"
	}
	return fmt.Sprintf("pin-event(%d)", uint8(k))
}

// PinEvent is one pinned block's change, for Hooks.PinEvents.
type PinEvent struct {
	Kind               PinEventKind
	Root, Hash, Parent prefix.Hash
	Depth              int     // the block's index in its prompt
	Tokens             []int32 // the block's tokens; valid during the call only
	Block              kvcache.BlockID
	TTL                time.Duration
	Expires            time.Time
	// State, for a PinCreated event of a hybrid model, is the block's recurrent-state
	// checkpoint (as Hooks.BlockEvents' state), nil when the pool holds none; valid during the
	// call only.
	State []byte
}

// PinInfo describes one pinned block (Engine.Pins, for the cache admin API).
type PinInfo struct {
	Root, Hash, Parent prefix.Hash
	Depth              int // the block's index in its prompt
	PrefixTokens       int // tokens from the prompt's start through this block: (Depth+1)·BlockSize
	Block              kvcache.BlockID
	TTL                time.Duration
	Expires            time.Time // last use + TTL
	Local              bool      // a lease (PinSpec.Local): held in the pool only
}

// KnownPin is a pin a persistent tier kept across a restart (offload reads it from the
// stores): when a block with this hash enters the pool again, restored or recomputed, it is
// pinned again until Expires (then refreshed with TTL, as any pin), budget permitting.
type KnownPin struct {
	Hash    prefix.Hash
	TTL     time.Duration
	Expires time.Time
}

// pinRefreshEvery: a hit sends a PinRefreshed event for a block only when its expiry moved
// by at least TTL/pinRefreshEvery since the last event. The tiers' copies then expire at most
// that fraction of the TTL early, while a prefix hit many times a second costs the tiers one
// refresh per few seconds of a 5-minute TTL, not one per request.
const pinRefreshEvery = 16

// Why a pin holds less than it asked (PinResult.Limit, usage.cache.pin_limit, the
// stockpot_tenant_pins_limited_total reason label).
const (
	// PinLimitBudget: the pin budget is full (--pin-budget).
	PinLimitBudget = "pin_budget"
	// PinLimitTenantQuota: the request's tenant holds all its cache_bytes quota allows.
	PinLimitTenantQuota = "tenant_quota"
	// PinLimitOtherShares: what the budget has free is other tenants' guaranteed shares.
	PinLimitOtherShares = "other_tenants_shares"
)

// pinEntry is one pinned block. The table holds one reference on block.
type pinEntry struct {
	root, hash, parent prefix.Hash
	owner              uint16 // charged for the block (the request that pinned it first)
	depth              int
	tokens             []int32 // the block's tokens (a view of the pinning request's prompt)
	block              kvcache.BlockID
	ttl                time.Duration
	expires            time.Time
	notified           time.Time // expiry last sent to the tiers
	// local: only Local pins (leases) hold it, so the tiers are never told (no events).
	local bool
}

// pinTable is the pins of the working pool. Pure: the core calls it with the time.
type pinTable struct {
	budget     int // most blocks pinned + reserved
	blockSize  int
	entries    map[prefix.Hash]*pinEntry
	reserved   map[uint64]pinReservation // strict requests' reserved blocks, by seq id
	reservedN  int                       // sum of reserved
	known      map[prefix.Hash]KnownPin
	events     []PinEvent
	nextExpiry time.Time // earliest expiry among entries (zero when none); a lower bound

	// Owners (see the type's doc above): limit and share by owner (index 0 the operator's),
	// use the blocks each holds pinned or reserved, held = Σ max(use, share) <= budget.
	// Owners past len(limit) (none configured, or a number the table does not know) are
	// charged as owner 0.
	limit, share, use []int
	held              int
}

// pinReservation is what a strict request reserved, and for whom.
type pinReservation struct {
	n     int
	owner uint16
}

// newPinTable returns a table of budget blocks shared by len(limits) owners (1..len) and the
// operator (0); limits[i] caps owner i+1's blocks (0: the budget; < 0: no block).
func newPinTable(budget, blockSize int, limits []int) *pinTable {
	p := &pinTable{budget: max(budget, 0), blockSize: blockSize,
		entries: map[prefix.Hash]*pinEntry{}, reserved: map[uint64]pinReservation{}, known: map[prefix.Hash]KnownPin{}}
	n := len(limits) + 1
	p.limit, p.share, p.use = make([]int, n), make([]int, n), make([]int, n)
	for o := range n {
		p.limit[o] = p.budget
		if o > 0 && limits[o-1] != 0 {
			p.limit[o] = min(max(limits[o-1], 0), p.budget)
		}
		p.share[o] = min(p.limit[o], p.budget/n)
		p.held += p.share[o]
	}
	return p
}

// slot is the table's index for owner o.
func (p *pinTable) slot(o uint16) int {
	if int(o) >= len(p.use) {
		return 0
	}
	return int(o)
}

// charge adds d blocks (d < 0: gives them back) to owner o's use, keeping held.
func (p *pinTable) charge(o uint16, d int) {
	i := p.slot(o)
	p.held -= max(p.use[i], p.share[i])
	p.use[i] += d
	p.held += max(p.use[i], p.share[i])
}

// room is why owner o may not take n more blocks now ("" when it may).
func (p *pinTable) room(o uint16, n int) string {
	if n <= 0 {
		return ""
	}
	i := p.slot(o)
	u := p.use[i]
	switch {
	case u+n > p.limit[i] && p.limit[i] < p.budget:
		return PinLimitTenantQuota
	case p.held-max(u, p.share[i])+max(u+n, p.share[i]) <= p.budget:
		return ""
	case len(p.entries)+p.reservedN+n <= p.budget:
		return PinLimitOtherShares // the blocks are free, but held for other owners' shares
	}
	return PinLimitBudget
}

// free is how many more blocks owner o may pin now (for messages).
func (p *pinTable) free(o uint16) int {
	lo, hi := 0, p.budget
	for lo < hi { // the largest n with room(o, n) == ""
		mid := (lo + hi + 1) / 2
		if p.room(o, mid) == "" {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// pinBlocks is how many leading blocks of a prompt of n tokens spec pins.
func pinBlocks(spec PinSpec, n, blockSize int) int {
	return max(min(spec.Tokens, n), 0) / blockSize
}

// reserve checks a strict request's pins against the budget and reserves the blocks it
// would add (those of its longest pin not pinned now). hashes are the prompt's block hashes.
func (p *pinTable) reserve(id uint64, req *Request, hashes []prefix.Hash) error {
	want := 0
	for _, ps := range req.Pins {
		want = max(want, pinBlocks(ps, len(req.Prompt), p.blockSize))
	}
	need := 0
	for _, h := range hashes[:min(want, len(hashes))] {
		if _, ok := p.entries[h]; !ok {
			need++
		}
	}
	old, had := p.reserved[id]
	p.unreserve(id)
	if why := p.room(req.Owner, need); why != "" {
		free := p.free(req.Owner)
		if had {
			p.reserveFor(id, old)
		}
		return fmt.Errorf("%w: %d new blocks (%d tokens) to pin, %d free to this request of the pin budget's %d blocks (%s)",
			ErrPinBudget, need, need*p.blockSize, free, p.budget, pinLimitText(why))
	}
	p.reserveFor(id, pinReservation{n: need, owner: req.Owner})
	return nil
}

// pinLimitText says what a PinResult.Limit means, for an error message.
func pinLimitText(why string) string {
	switch why {
	case PinLimitTenantQuota:
		return "the tenant's pins are at its cache_bytes quota"
	case PinLimitOtherShares:
		return "what is free is held for other tenants' shares"
	}
	return "the pin budget is full"
}

func (p *pinTable) reserveFor(id uint64, r pinReservation) {
	p.reserved[id] = r
	p.reservedN += r.n
	p.charge(r.owner, r.n)
}

func (p *pinTable) unreserve(id uint64) {
	r, ok := p.reserved[id]
	if !ok {
		return
	}
	p.reservedN -= r.n
	p.charge(r.owner, -r.n)
	delete(p.reserved, id)
}

// pinSeq applies s's pins once its prompt is computed: the leading blocks of its longest pin
// that the cache holds, each with the longest TTL of the pins covering it, while the budget
// lasts. It returns the per-pin results.
func (p *pinTable) pinSeq(c blockCache, s *seq, now time.Time) []PinResult {
	req := s.req
	res := make([]PinResult, len(req.Pins))
	want := 0
	for i, ps := range req.Pins {
		n := pinBlocks(ps, s.prompt, p.blockSize)
		res[i] = PinResult{TTL: ps.TTL, Requested: n * p.blockSize}
		want = max(want, n)
	}
	p.unreserve(s.id) // a strict request's blocks are its own again: room admits them below
	got, limit := 0, ""
	reused := s.usage.reusedTokens() / p.blockSize // leading blocks this request did not compute
	var created []int                              // indexes of the blocks newly pinned and computed here
	for bi := 0; bi < want && bi < len(s.hashes) && bi < len(s.blocks); bi++ {
		h, b := s.hashes[bi], s.blocks[bi]
		if !c.holds(h, b) {
			break // not cached (a refused commit): nothing after it is reachable either
		}
		ttl, local := time.Duration(0), true
		for _, ps := range req.Pins {
			if pinBlocks(ps, s.prompt, p.blockSize) > bi {
				ttl, local = max(ttl, ps.TTL), local && ps.Local
			}
		}
		if e, ok := p.entries[h]; ok {
			if e.local && !local {
				e.local = false // a pin the tiers keep now holds it too: they hear of it
				e.notified = time.Time{}
				p.queue(PinCreated, e)
			}
			p.extend(e, ttl, now)
		} else {
			if limit = p.room(req.Owner, 1); limit != "" {
				break
			}
			parent := s.root
			if bi > 0 {
				parent = s.hashes[bi-1]
			}
			B := p.blockSize
			p.add(c, &pinEntry{root: s.root, hash: h, parent: parent, owner: req.Owner, depth: bi,
				tokens: s.tokens[bi*B : (bi+1)*B : (bi+1)*B], block: b, ttl: ttl, expires: now.Add(ttl), local: local})
			if bi >= reused {
				created = append(created, bi)
			}
		}
		got = bi + 1
	}
	for i := range res {
		res[i].Pinned = min(res[i].Requested, got*p.blockSize)
		res[i].Refused = res[i].Requested > 0 && res[i].Pinned == 0
		if res[i].Pinned < res[i].Requested {
			res[i].Limit = limit
		}
		for _, bi := range created {
			if (bi+1)*p.blockSize <= res[i].Pinned {
				res[i].Created += p.blockSize
			}
		}
	}
	return res
}

// add takes a reference on e's block and records it; a PinCreated event follows.
func (p *pinTable) add(c blockCache, e *pinEntry) {
	c.ref(e.block)
	p.entries[e.hash] = e
	p.charge(e.owner, 1)
	e.notified = e.expires
	p.noteExpiry(e.expires)
	p.queue(PinCreated, e)
}

// extend re-pins an existing entry for ttl from now: a longer TTL replaces the old one (a
// PinCreated event, the tiers pin it longer), and the expiry never moves back.
func (p *pinTable) extend(e *pinEntry, ttl time.Duration, now time.Time) {
	if ttl > e.ttl {
		e.ttl = ttl
		e.expires = later(e.expires, now.Add(ttl))
		e.notified = e.expires
		p.queue(PinCreated, e)
		return
	}
	p.touch(e, now)
}

// touch refreshes e's expiry to now + its TTL (a hit).
func (p *pinTable) touch(e *pinEntry, now time.Time) {
	e.expires = later(e.expires, now.Add(e.ttl))
	if e.expires.Sub(e.notified) >= e.ttl/pinRefreshEvery {
		e.notified = e.expires
		p.queue(PinRefreshed, e)
	}
}

// hit refreshes the pinned blocks among a request's matched blocks.
func (p *pinTable) hit(hashes []prefix.Hash, matched int, now time.Time) {
	if len(p.entries) == 0 {
		return
	}
	for _, h := range hashes[:min(matched, len(hashes))] {
		if e, ok := p.entries[h]; ok {
			p.touch(e, now)
		}
	}
}

// adopt pins a block that a persistent tier kept pinned across a restart (see KnownPin)
// when it is committed again: the pin resumes with its remaining time, budget permitting.
func (p *pinTable) adopt(c blockCache, s *seq, bi int, now time.Time) {
	if len(p.known) == 0 || bi >= len(s.hashes) {
		return
	}
	h := s.hashes[bi]
	k, ok := p.known[h]
	if !ok {
		return
	}
	delete(p.known, h)
	if _, pinned := p.entries[h]; pinned || !k.Expires.After(now) || p.room(s.req.Owner, 1) != "" || !c.holds(h, s.blocks[bi]) {
		return
	}
	parent := s.root
	if bi > 0 {
		parent = s.hashes[bi-1]
	}
	B := p.blockSize
	e := &pinEntry{root: s.root, hash: h, parent: parent, owner: s.req.Owner, depth: bi,
		tokens: s.tokens[bi*B : (bi+1)*B : (bi+1)*B], block: s.blocks[bi], ttl: k.TTL, expires: k.Expires}
	c.ref(e.block)
	p.entries[h] = e
	p.charge(e.owner, 1)
	e.notified = e.expires // the tiers hold it pinned already
	p.noteExpiry(e.expires)
}

// expire drops the pins whose time is up (expires <= now) and gives their references back,
// deepest first, so an expired prefix's tail is evicted before its head.
func (p *pinTable) expire(c blockCache, now time.Time) int {
	if len(p.entries) == 0 || now.Before(p.nextExpiry) {
		return 0
	}
	var gone []*pinEntry
	p.nextExpiry = time.Time{}
	for h, e := range p.entries {
		if !e.expires.After(now) {
			gone = append(gone, e)
			delete(p.entries, h)
			continue
		}
		p.noteExpiry(e.expires)
	}
	p.drop(c, gone, false)
	for h, k := range p.known {
		if !k.Expires.After(now) {
			delete(p.known, h)
		}
	}
	return len(gone)
}

// unpin drops the pins that match, and every pin below them (a pinned descendant would keep
// them in the pool anyway), queueing PinRemoved events. It returns how many blocks it dropped.
func (p *pinTable) unpin(c blockCache, match func(*pinEntry) bool) int {
	drop := map[prefix.Hash]bool{}
	for h, e := range p.entries {
		if match(e) {
			drop[h] = true
		}
	}
	// Descendants: a pin whose parent chain within the table reaches a dropped pin.
	for changed := len(drop) > 0; changed; {
		changed = false
		for h, e := range p.entries {
			if !drop[h] && drop[e.parent] {
				drop[h], changed = true, true
			}
		}
	}
	gone := make([]*pinEntry, 0, len(drop))
	for h := range drop {
		gone = append(gone, p.entries[h])
		delete(p.entries, h)
	}
	p.drop(c, gone, true)
	return len(gone)
}

// shed drops the pin that expires first, and every pin below it, to give memory back to a
// request that cannot run otherwise (see Core.shedPins). No events: the tiers keep their pins
// (the block goes down with its pin when the pool evicts it). It returns the blocks unpinned.
func (p *pinTable) shed(c blockCache) int {
	var first *pinEntry
	for _, e := range p.entries {
		if first == nil || e.expires.Before(first.expires) || e.expires.Equal(first.expires) && e.depth > first.depth {
			first = e
		}
	}
	if first == nil {
		return 0
	}
	drop := map[prefix.Hash]bool{first.hash: true}
	for changed := true; changed; {
		changed = false
		for h, e := range p.entries {
			if !drop[h] && drop[e.parent] {
				drop[h], changed = true, true
			}
		}
	}
	gone := make([]*pinEntry, 0, len(drop))
	for h := range drop {
		gone = append(gone, p.entries[h])
		delete(p.entries, h)
	}
	p.drop(c, gone, false)
	return len(gone)
}

func (p *pinTable) drop(c blockCache, gone []*pinEntry, events bool) {
	if len(gone) == 0 {
		return
	}
	// In position order: release stamps its argument tail first, so deeper blocks become the
	// least recently used.
	slices.SortFunc(gone, func(a, b *pinEntry) int { return cmp.Compare(a.depth, b.depth) })
	blocks := make([]kvcache.BlockID, len(gone))
	for i, e := range gone {
		blocks[i] = e.block
		p.charge(e.owner, -1)
		if events {
			p.queue(PinRemoved, e)
		}
	}
	c.release(blocks)
}

func (p *pinTable) noteExpiry(t time.Time) {
	if p.nextExpiry.IsZero() || t.Before(p.nextExpiry) {
		p.nextExpiry = t
	}
}

func (p *pinTable) queue(k PinEventKind, e *pinEntry) {
	if e.local {
		return // a lease: the working pool's alone
	}
	p.events = append(p.events, PinEvent{Kind: k, Root: e.root, Hash: e.hash, Parent: e.parent, Depth: e.depth,
		Tokens: e.tokens, Block: e.block, TTL: e.ttl, Expires: e.expires})
}

// drainEvents returns the queued events and forgets them.
func (p *pinTable) drainEvents() []PinEvent {
	ev := p.events
	p.events = nil
	return ev
}

// list returns the pins, by root, then depth.
func (p *pinTable) list() []PinInfo {
	out := make([]PinInfo, 0, len(p.entries))
	for _, e := range p.entries {
		out = append(out, e.info(p.blockSize))
	}
	slices.SortFunc(out, func(a, b PinInfo) int {
		if c := slices.Compare(a.Root[:], b.Root[:]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Depth, b.Depth); c != 0 {
			return c
		}
		return slices.Compare(a.Hash[:], b.Hash[:])
	})
	return out
}

func (e *pinEntry) info(blockSize int) PinInfo {
	return PinInfo{Root: e.root, Hash: e.hash, Parent: e.parent, Depth: e.depth, PrefixTokens: (e.depth + 1) * blockSize,
		Block: e.block, TTL: e.ttl, Expires: e.expires, Local: e.local}
}

// endLeases drops the Local pins of hashes under root that no other pin needs: one that a
// pin still held extends (its descendant) stays until it expires, since dropping it would
// let the pool evict what that pin reaches through. No events: the tiers never heard of
// them. It returns how many blocks it dropped.
func (p *pinTable) endLeases(c blockCache, root prefix.Hash, hashes []prefix.Hash) int {
	drop := map[prefix.Hash]bool{}
	for _, h := range hashes {
		if e, ok := p.entries[h]; ok && e.local && e.root == root {
			drop[h] = true
		}
	}
	for h, e := range p.entries {
		if drop[h] {
			continue
		}
		for a, ok := p.entries[e.parent]; ok; a, ok = p.entries[a.parent] {
			delete(drop, a.hash) // an ancestor of a pin that stays
		}
	}
	gone := make([]*pinEntry, 0, len(drop))
	for h := range drop {
		gone = append(gone, p.entries[h])
		delete(p.entries, h)
	}
	p.drop(c, gone, false)
	return len(gone)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// ReservePins checks a strict request's pins against the budget before it is queued, and
// reserves the blocks it would add (see pinTable.reserve). Call it before Add with the same
// id; a request that ends releases what it reserved.
func (c *Core) ReservePins(id uint64, req *Request, root prefix.Hash) error {
	if !c.cfg.PrefixCache {
		return fmt.Errorf("%w: the prefix cache is off, nothing can be pinned", ErrPinBudget)
	}
	want := 0
	for _, ps := range req.Pins {
		want = max(want, pinBlocks(ps, len(req.Prompt), c.cfg.BlockSize))
	}
	// The request's own chain, which may continue a public prefix (tenant.go), as Add will see it.
	probe := &seq{req: req}
	probe.root, probe.public, probe.mark = c.splitChain(req, root)
	hashes := c.seqHashes(probe, req.Prompt[:want*c.cfg.BlockSize])
	return c.pins.reserve(id, req, hashes)
}

// Unreserve gives back what ReservePins reserved for a request that was never added.
func (c *Core) Unreserve(id uint64) { c.pins.unreserve(id) }

// shedPins gives pinned memory back when a request could not run otherwise: the head of the
// queue that does not fit with nothing running (nothing else will free a block), or a running
// request that needs a block to decode, before anything is preempted. Pins are the cache's
// priority, not a reservation against requests: the budget bounds what they hold, and when
// requests need more than the rest of the pool, the pins that expire first yield (counted in
// CoreStats.PinsShed), never a hang. It reports whether it freed anything.
func (c *Core) shedPins() bool {
	n := c.pins.shed(c.cache)
	c.stats.pinsShed += uint64(n)
	return n > 0
}

// ExpirePins drops the pins whose time is up; Schedule calls it too. It returns how many
// blocks were unpinned.
func (c *Core) ExpirePins(now time.Time) int { return c.pins.expire(c.cache, now) }

// Pins lists the pinned blocks, by root, then depth.
func (c *Core) Pins() []PinInfo { return c.pins.list() }

// TouchPins refreshes the pins among the first n of hashes (a use, as a hit is): a pull of
// a prefill's blocks keeps their lease alive while it runs.
func (c *Core) TouchPins(hashes []prefix.Hash, n int, now time.Time) { c.pins.hit(hashes, n, now) }

// EndLeases drops the leases (Local pins) of hashes under root that no other pin needs
// (pinTable.endLeases).
func (c *Core) EndLeases(root prefix.Hash, hashes []prefix.Hash) int {
	return c.pins.endLeases(c.cache, root, hashes)
}

// Unpin drops the pins match selects, and the pins below them; it returns how many blocks
// it unpinned.
func (c *Core) Unpin(match func(PinInfo) bool) int {
	return c.pins.unpin(c.cache, func(e *pinEntry) bool { return match(e.info(c.cfg.BlockSize)) })
}

// AdoptPins tells the core of pins a persistent tier kept (see KnownPin).
func (c *Core) AdoptPins(known []KnownPin) {
	for _, k := range known {
		if k.TTL > 0 {
			c.pins.known[k.Hash] = k
		}
	}
}

// PinEvents returns the pin events queued since the last call.
func (c *Core) PinEvents() []PinEvent { return c.pins.drainEvents() }

// PinnedBlocks is how many blocks pins hold.
func (c *Core) PinnedBlocks() int { return len(c.pins.entries) }

// HasPins reports whether any pin is held (the runner then sweeps while idle).
func (c *Core) HasPins() bool { return len(c.pins.entries) > 0 }

// checkOwners recomputes the owners' accounting from the entries and reservations and
// reports where it differs from the kept one, or where held is over the budget (tests).
func (p *pinTable) checkOwners() error {
	use := make([]int, len(p.use))
	for _, e := range p.entries {
		use[p.slot(e.owner)]++
	}
	for _, r := range p.reserved {
		use[p.slot(r.owner)] += r.n
	}
	held := 0
	for o := range use {
		held += max(use[o], p.share[o])
		if use[o] != p.use[o] {
			return fmt.Errorf("pins: owner %d uses %d blocks, the table says %d", o, use[o], p.use[o])
		}
	}
	if held != p.held || held > p.budget {
		return fmt.Errorf("pins: held %d (the table says %d), budget %d", held, p.held, p.budget)
	}
	return nil
}

// PinOwnerUse is how many blocks each owner's pins hold or reserve, by owner number (index 0:
// the operator's, and owners the table does not know), and the share each is guaranteed.
func (c *Core) PinOwnerUse() (use, share []int) {
	return slices.Clone(c.pins.use), slices.Clone(c.pins.share)
}
