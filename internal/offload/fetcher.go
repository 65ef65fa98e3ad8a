package offload

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"stockpot/internal/kvcache"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	Identity [32]byte       // identity digest every record must carry
	Layout   kvcache.Layout // shape every record must have
	// NeedState: the model keeps recurrent state, so a restored prefix must
	// end at a block whose auxiliary state is complete.
	NeedState bool
	// StateBytes, with NeedState, is the size of a complete record's checkpoint (its one
	// Aux entry); a record flagged complete whose state is another size counts as without
	// one (a truncated or foreign state is never used). 0 skips the check.
	StateBytes int
	// StateEvery, with NeedState, is the checkpoint interval in blocks (the engine's
	// StateCheckpointBlocks; 0 is 1): only every StateEvery-th block of a prompt carries a
	// checkpoint, so only those pay its bytes in the cost model's read estimate.
	StateEvery int
	Cost       CostConfig
	// Keys, when set, authenticate every record read from a tier other than host
	// (tier.Want.Keys): one its MAC does not authenticate is discarded as forged.
	Keys *tier.Keyring
}

// DefaultFetcherConfig returns the defaults; Identity and Layout must be set.
func DefaultFetcherConfig() FetcherConfig { return FetcherConfig{Cost: DefaultCostConfig()} }

func (c FetcherConfig) validate() (FetcherConfig, error) {
	if err := c.Layout.Validate(); err != nil {
		return c, fmt.Errorf("offload: fetcher: %w", err)
	}
	if c.Identity == [32]byte{} {
		return c, errors.New("offload: fetcher: Identity is zero")
	}
	return c, nil
}

// Request names the prefix to restore: the blocks after the ones the device
// already holds, in order.
type Request struct {
	Root   prefix.Hash
	Parent prefix.Hash   // parent of Hashes[0]: Root, or the last block on the device
	Hashes []prefix.Hash // block hashes, in prefix order
	Tokens []int32       // len(Hashes)*BlockSize tokens of those blocks
	Pos    int           // position of Tokens[0] in the prompt (the blocks the device holds come before)
	// Into, when set, holds one destination per block (Layout.BlockBytes() bytes each: the
	// pool blocks reserved for the request): a block's K/V is copied into Into[i] in the same
	// pass over its bytes as the checksum (tier.DecodeVerifyInto), and a usable Record's KV
	// is Into[i]. A block that fails leaves garbage in Into[i]. Into[i] is written only while
	// the fetch runs: after Fetch's Future is Done (or fetch has returned) nothing writes it.
	Into [][]byte
	// Progress, when set, hears how the fetch goes (engine.PrefetchProgress): its plan once
	// the cost model has chosen the blocks, then each chunk of them read and verified.
	Progress Progress
}

// Progress receives a fetch's progress, from its goroutines; it must not block.
type Progress interface {
	// Plan: blocks will be read, estimated to take restore, where computing them would
	// take recompute (CostModel.Estimate). Called once, before any Arrive.
	Plan(blocks int, restore, recompute time.Duration)
	// Arrive: n more of them were read and verified (or failed verification).
	Arrive(n int)
}

// Restored is the outcome for one block of a Request.
type Restored struct {
	Found  bool         // in some tier (Tier)
	Tier   kvtier.Tier  // where it was found, when Found
	Record *tier.Record // verified, usable; nil otherwise
	Reason string       // discard reason when found but not used (tier.Reason*); "" otherwise
	Err    error        // the verification error behind Reason, if any
}

// ReasonAfterBreak is the discard reason of a block that was read and verified but follows a
// broken link of its chain (a block that failed verification, or one lost since the lookup):
// it is fine, but its parent cannot be restored, so neither can it. The block that broke the
// chain is counted under its own reason (tier.Reason*), each later damaged block under its
// own too; only the sound ones after the break are after_break.
const ReasonAfterBreak = "after_break"

// Result of a Fetch.
type Result struct {
	// Blocks has one entry per block found in some tier, for the longest
	// available prefix; it may be shorter than the Request.
	Blocks []Restored
	// Usable is how many leading Blocks carry a verified Record.
	Usable int
	// Saved is the CostModel's estimate of the time restoring saves.
	Saved time.Duration
}

// Future is a Fetch in flight.
type Future struct {
	done chan struct{}
	res  Result
	err  error
}

// Done is closed when the result is ready.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait returns the result, or ctx's error if ctx ends first (the fetch goes
// on; a later Wait still gets it).
func (f *Future) Wait(ctx context.Context) (Result, error) {
	select {
	case <-f.done:
		return f.res, f.err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

type flightKey struct {
	tier int
	key  tier.Key
}

type call struct {
	done    chan struct{} // closed when the Get that reads it ends (one for all the keys of that Get)
	val     []byte
	waiters int // fetches that joined this read; protected by Fetcher.mu
}

// Fetcher restores prefixes from the tiers. Safe for concurrent use.
type Fetcher struct {
	cfg     FetcherConfig
	tiers   []TierStore
	metrics *Metrics

	// promote, when set (SetPromote), receives the verified records a fetch restored from a
	// tier other than host, as tier items, to put in host (promotion; see promote.go).
	promote func([]tier.Item)
	// restored, when set (SetRestored), receives the keys of the verified blocks a fetch
	// restored from the remote tier (adoption; see events.go).
	restored func([]tier.Key)

	mu struct {
		sync.Mutex
		cost   *CostModel
		flight map[flightKey]*call
	}
}

// NewFetcher returns a Fetcher over tiers, searched in order (host, disk,
// remote). metrics may be nil.
func NewFetcher(cfg FetcherConfig, tiers []TierStore, metrics *Metrics) (*Fetcher, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	cost, err := NewCostModel(cfg.Cost)
	if err != nil {
		return nil, err
	}
	f := &Fetcher{cfg: cfg, tiers: tiers, metrics: metrics}
	for _, t := range tiers {
		metrics.ReadBytes(t.Tier.String(), 0) // the series reads 0 from the start
	}
	f.mu.cost = cost
	f.mu.flight = make(map[flightKey]*call)
	return f, nil
}

// ObservePrefill feeds the cost model a measured prefill (the engine calls
// it after each prefill step; engine.Hooks.ForwardStep).
func (f *Fetcher) ObservePrefill(tokens int, attended int64, d time.Duration) {
	f.mu.Lock()
	f.mu.cost.ObservePrefill(tokens, attended, d)
	f.mu.Unlock()
}

// Fetch starts restoring req on its own goroutine and returns at once.
// Canceling ctx abandons the fetch (its result then carries ctx's error).
func (f *Fetcher) Fetch(ctx context.Context, req Request) *Future {
	fu := &Future{done: make(chan struct{})}
	go func() {
		defer close(fu.done)
		fu.res, fu.err = f.fetch(ctx, req)
	}()
	return fu
}

// Lookup returns, per block, the index of the first tier holding it (-1 for
// none), probing every tier with one batched Contains. A tier that fails is
// treated as holding nothing.
func (f *Fetcher) Lookup(ctx context.Context, req Request) []int {
	keys := make([]tier.Key, len(req.Hashes))
	loc := make([]int, len(req.Hashes))
	for i, h := range req.Hashes {
		keys[i], loc[i] = tier.Key{Root: req.Root, Hash: h}, -1
	}
	probe := keys // the keys still unfound, at positions idx (nil: every position)
	var idx []int
	for ti, t := range f.tiers {
		if len(probe) == 0 || ctx.Err() != nil {
			break
		}
		has, err := t.Store.Contains(ctx, probe)
		if err != nil {
			continue
		}
		if idx == nil && ti == len(f.tiers)-1 { // the one tier asked (the usual case)
			for i, h := range has {
				if h {
					loc[i] = ti
				}
			}
			break
		}
		if idx == nil {
			idx = make([]int, len(keys))
			for i := range idx {
				idx[i] = i
			}
		}
		rest := idx[:0]
		for j, i := range idx {
			if has[j] {
				loc[i] = ti
			} else {
				rest = append(rest, i)
			}
		}
		idx = rest
		if ti == len(f.tiers)-1 {
			break // no tier left to ask
		}
		if &probe[0] == &keys[0] {
			probe = make([]tier.Key, 0, len(idx)) // keys stays whole: it is copied from here
		}
		probe = probe[:0]
		for _, i := range idx {
			probe = append(probe, keys[i])
		}
	}
	return loc
}

func (f *Fetcher) fetch(ctx context.Context, req Request) (Result, error) {
	bs := f.cfg.Layout.BlockSize
	if len(req.Tokens) != len(req.Hashes)*bs {
		return Result{}, fmt.Errorf("offload: request has %d tokens for %d blocks of %d", len(req.Tokens), len(req.Hashes), bs)
	}
	if req.Into != nil && len(req.Into) != len(req.Hashes) {
		return Result{}, fmt.Errorf("offload: request has %d destinations for %d blocks", len(req.Into), len(req.Hashes))
	}
	for i, d := range req.Into {
		if int64(len(d)) != f.cfg.Layout.BlockBytes() {
			return Result{}, fmt.Errorf("offload: destination %d has %d bytes, a block %d", i, len(d), f.cfg.Layout.BlockBytes())
		}
	}
	loc := f.Lookup(ctx, req)
	found := 0
	for found < len(loc) && loc[found] >= 0 {
		found++
	}
	res := Result{Blocks: make([]Restored, found)}
	if found == 0 {
		if req.Progress != nil {
			req.Progress.Plan(0, 0, 0)
		}
		return res, ctx.Err()
	}
	// Cost: how many leading blocks are worth reading.
	spans := make([]Span, found)
	recBytes := tier.EncodedSizeOf(f.cfg.Layout)
	every := max(f.cfg.StateEvery, 1)
	for i := range spans {
		b := recBytes
		if f.cfg.NeedState && (req.Pos/bs+i+1)%every == 0 {
			b += 4 + int64(f.cfg.StateBytes) // a checkpoint block's state travels with its K/V
		}
		spans[i] = Span{Tier: f.tiers[loc[i]].Tier, Bytes: b, Tokens: bs, Pos: req.Pos + i*bs}
		res.Blocks[i].Found, res.Blocks[i].Tier = true, spans[i].Tier
	}
	f.mu.Lock()
	n, saved := f.mu.cost.Plan(spans)
	restore, recompute := f.mu.cost.Estimate(spans[:n])
	f.mu.Unlock()
	if req.Progress != nil {
		req.Progress.Plan(n, restore, recompute)
	}
	res.Saved = saved
	for i := n; i < found; i++ {
		res.Blocks[i].Reason = tier.ReasonSlowerThanRecompute
	}
	f.metrics.Discarded(tier.ReasonSlowerThanRecompute, found-n)

	// Read the first n blocks: one batched Get per tier, tiers in parallel.
	// Decode and verify on all cores (the checksum pass is the costly part of a host-tier
	// restore; with req.Into it is also the copy into the pool). A tier read in chunks
	// (readChunk) verifies each chunk as it arrives, while the next ones are read.
	//
	// The blocks' Records and their tokens are cut from two arrays of the fetch's (a block is
	// verified by one goroutine at a time, into its own Record; they are only read once the
	// fetch returns), not allocated two a block.
	vals := make([][]byte, n)
	dec := make([]checked, n)
	recs := make([]tier.Record, n)
	toks := make([]int32, n*bs)
	verify := func(i int, v []byte) {
		parent := req.Parent
		if i > 0 {
			parent = req.Hashes[i-1]
		}
		want := tier.Want{Identity: f.cfg.Identity, Root: req.Root, Hash: req.Hashes[i],
			Parent: parent, Tokens: req.Tokens[i*bs : (i+1)*bs], Layout: f.cfg.Layout}
		if f.tiers[loc[i]].Tier != kvtier.Host {
			want.Keys = f.cfg.Keys // the host tier's bytes never left this process
		}
		var into []byte // nil: the K/V stays in v (DecodeVerify)
		if req.Into != nil {
			into = req.Into[i]
		}
		r := &recs[i]
		r.Tokens = toks[i*bs : i*bs : (i+1)*bs]
		dec[i].rec, dec[i].err = nil, tier.DecodeVerifyTo(r, v, want, into)
		if dec[i].err == nil {
			dec[i].rec = r
		}
	}
	var wg sync.WaitGroup
	for ti, idx := range blocksByTier(loc[:n], len(f.tiers)) {
		if len(idx) == 0 {
			continue
		}
		if len(idx) == n { // one tier (the usual case): no goroutine to wake
			f.readTier(ctx, ti, req, idx, vals, dec, verify)
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.readTier(ctx, ti, req, idx, vals, dec, verify)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	// Walk the results in order: the usable prefix stops at the first gap or failure.
	for reason, k := range assemble(&res, vals, dec, f.cfg.NeedState, f.cfg.StateBytes) {
		f.metrics.Discarded(reason, k)
	}
	f.promoteUsable(req, &res, vals)
	f.reportRemote(req, &res)
	return res, nil
}

// blocksByTier returns, for each of tiers tiers, the blocks loc puts in it (loc[i] is block
// i's tier), in chain order: slices of one array.
func blocksByTier(loc []int, tiers int) [][]int {
	by := make([][]int, tiers)
	order := make([]int, 0, len(loc))
	for t := range tiers { // a few tiers: a pass each
		from := len(order)
		for i, lt := range loc {
			if lt == t {
				order = append(order, i)
			}
		}
		by[t] = order[from:len(order):len(order)]
	}
	return by
}

// checked is one fetched block after decoding and verification.
type checked struct {
	rec *tier.Record
	err error
}

// assemble walks the fetched blocks in chain order and decides what is usable, in place in
// res: the usable prefix (res.Usable) stops at the first gap (a block lost since the lookup,
// vals[i] nil: a plain miss, not a discard) or failure (discarded under its own reason); a
// valid block after either is discarded as ReasonAfterBreak (its parent cannot be restored),
// a damaged one under its own reason; with needState the prefix also ends at the last
// block whose recurrent state is complete (and, stateBytes > 0, of that size: see HasState).
// Blocks never found at the end are trimmed. It
// returns the discarded blocks by reason. Pure: no I/O, no metrics.
//
// REQUIRES: len(vals) == len(dec) <= len(res.Blocks); res.Blocks[i] for i < len(vals) are
// the blocks that were read.
func assemble(res *Result, vals [][]byte, dec []checked, needState bool, stateBytes int) map[string]int {
	discarded := map[string]int{}
	broken := false // a block before this one was lost or failed: the chain is broken
	for i := range vals {
		b := &res.Blocks[i]
		if vals[i] == nil { // lost since Contains: a plain miss
			broken = true
			b.Found, b.Tier = false, 0
			continue
		}
		rec, err := dec[i].rec, dec[i].err
		switch {
		case err != nil:
			b.Reason, b.Err = tier.Reason(err), err
			broken = true
		case broken:
			// Valid, but its parent is not restorable.
			b.Reason = ReasonAfterBreak
		default:
			b.Record = rec
			res.Usable = i + 1
		}
		if b.Reason != "" {
			discarded[b.Reason]++
		}
	}
	if needState {
		last := res.Usable
		for last > 0 && !HasState(res.Blocks[last-1].Record, stateBytes) {
			last--
		}
		for i := last; i < res.Usable; i++ {
			res.Blocks[i].Record, res.Blocks[i].Reason = nil, tier.ReasonIncompleteState
			res.Blocks[i].Err = tier.ErrIncompleteState
		}
		if res.Usable > last {
			discarded[tier.ReasonIncompleteState] += res.Usable - last
		}
		res.Usable = last
	}
	// Trim trailing blocks that were never found (a gap at the end).
	for len(res.Blocks) > 0 && !res.Blocks[len(res.Blocks)-1].Found {
		res.Blocks = res.Blocks[:len(res.Blocks)-1]
	}
	return discarded
}

// HasState reports whether a record carries a complete recurrent-state checkpoint: flagged
// complete, with its one Aux entry of stateBytes bytes (any size for stateBytes 0, and none
// needed then: a model without recurrent state writes complete records with no Aux).
func HasState(r *tier.Record, stateBytes int) bool {
	if r == nil || !r.StateComplete {
		return false
	}
	if stateBytes == 0 {
		return true
	}
	return len(r.Aux) == 1 && len(r.Aux[0]) == stateBytes
}

// readChunk is how many keys one Get asks a tier of this kind for, with up to chunksInFlight
// such Gets at once; 0 is one Get for the whole batch. The disk tier is read one key per Get,
// chunksInFlight Gets at once, each block verified (into its pool block) on the goroutine that
// read it, as soon as it has arrived, while the other reads keep the device busy: one Get for
// a whole request leaves the device idle while the blocks are checked (0.64x of the device's
// O_DIRECT bandwidth), and 4-key chunks wait for a chunk's slowest read before checking any
// of it and hand each block between goroutines twice (the store's reader, the verifier),
// which a loaded machine makes pay in wake-ups: measured in the same run, 4x4 chunks reached
// 0.53 GB/s at 634 ms of CPU per GB restored, one key per Get 0.66 GB/s at 544 ms/GB. The
// host tier answers from memory (nothing to overlap). The remote tier is batched for its
// round trips, in calls of about remoteChunkBytes (recBytes is the largest record): one call
// for a whole long prompt (82 MiB at 32K tokens of small-kimi-k3) outlasts the per-call
// timeout (250 ms by default) and the restore is lost, while 4 MiB calls, chunksInFlight at
// once, each finish well inside it and overlap their verification with the next reads.
func readChunk(t kvtier.Tier, recBytes int64) int {
	switch t {
	case kvtier.Disk:
		return 1
	case kvtier.Remote:
		return int(max(1, remoteChunkBytes/max(recBytes, 1)))
	}
	return 0
}

// remoteChunkBytes is the size of one remote read call (readChunk).
const remoteChunkBytes = 4 << 20

// chunksInFlight bounds the chunked Gets of one tier in flight: 8 reads at once, what the
// disk store's own parallel Get uses (disk.readers), and past what the virtio disk measured
// needs to reach its bandwidth (4 in flight did).
const chunksInFlight = 8

// readTier reads the blocks idx of req from tier ti into vals and verifies each (verify(i,
// value) sets dec[i]) once it has arrived: in chunks of readChunk keys, or in one Get. A store
// that checks its values itself (tier.CheckedGetter: the disk tier) runs verify as its check,
// on the goroutine that read the value, so a block's bytes are checked once, not by the store
// and then again by verify. It feeds the cost model the bytes read over the time the tier
// took to deliver all of them (from the first Get's start to the last one's end; verification
// is not reading, though a CheckedGetter's ends inside it).
func (f *Fetcher) readTier(ctx context.Context, ti int, req Request, idx []int, vals [][]byte, dec []checked, verify func(i int, v []byte)) {
	t := f.tiers[ti]
	rc, _ := t.Store.(tier.Recycler)
	rec := tier.EncodedSizeOf(f.cfg.Layout)
	if f.cfg.NeedState {
		rec += 4 + int64(f.cfg.StateBytes)
	}
	chunk := readChunk(t.Tier, rec)
	if chunk <= 0 || chunk >= len(idx) {
		chunk = len(idx)
	}
	nchunks := (len(idx) + chunk - 1) / chunk
	// What the readers share, in one allocation (they may run on goroutines of their own).
	st := &struct {
		bytes, next, lastEnd atomic.Int64
		failed               atomic.Bool
		wg                   sync.WaitGroup
	}{}
	start := time.Now()
	run := func() {
		defer st.wg.Done()
		for c := int(st.next.Add(1) - 1); c < nchunks && ctx.Err() == nil; c = int(st.next.Add(1) - 1) {
			part := idx[c*chunk : min((c+1)*chunk, len(idx))]
			keys := make([]tier.Key, len(part))
			for j, i := range part {
				keys[j] = tier.Key{Root: req.Root, Hash: req.Hashes[i]}
			}
			check := func(j int, v []byte) error {
				verify(part[j], v)
				return dec[part[j]].err
			}
			got, own, ok, n, err := f.get(ctx, ti, keys, check)
			if err != nil && t.Tier == kvtier.Remote && ctx.Err() == nil {
				// Once more: the blocks are a chain, so one failed call would end the
				// restored prefix at its first block and every block after it would be
				// recomputed (at 480K tokens beside a CI run, 4 calls of 629 past the
				// 250 ms call timeout cost 8,000 blocks, minutes of prefill). The failed
				// call counts toward the breaker, which refuses the retry at once when
				// the remote is down rather than slow.
				got, own, ok, n, err = f.get(ctx, ti, keys, check)
			}
			for end := int64(time.Since(start)); ; {
				if old := st.lastEnd.Load(); old >= end || st.lastEnd.CompareAndSwap(old, end) {
					break
				}
			}
			st.bytes.Add(n)
			if err != nil {
				st.failed.Store(true)
			}
			for j, i := range part {
				vals[i] = got[j]
			}
			verifyAll(len(part), func(j int) {
				if got[j] != nil && !ok[j] { // not verified by the store's check
					verify(part[j], got[j])
				}
			})
			if req.Progress != nil {
				req.Progress.Arrive(len(part))
			}
			if rc != nil && req.Into != nil && !f.promotes(t.Tier) {
				f.recycle(rc, part, got, own, dec)
			}
		}
	}
	readers := min(chunksInFlight, nchunks)
	st.wg.Add(readers)
	for range readers - 1 {
		go run()
	}
	run() // the last reader is this goroutine: one wake-up fewer (all of them for one chunk)
	st.wg.Wait()
	if !st.failed.Load() && st.bytes.Load() > 0 {
		f.mu.Lock()
		f.mu.cost.ObserveRead(t.Tier, st.bytes.Load(), time.Duration(st.lastEnd.Load()))
		f.mu.Unlock()
	}
}

// recycle hands the store back the values of part (got[j] is block part[j]'s) that are
// nobody else's: read by this fetch's own Get with no other fetch joined (own), and decoded
// into the pool, with no Aux aliasing them (or failed). The fetch reads vals only for their
// nil-ness afterwards (assemble).
func (f *Fetcher) recycle(rc tier.Recycler, part []int, got [][]byte, own []bool, dec []checked) {
	var done [][]byte
	for j, i := range part {
		if own[j] && got[j] != nil && (dec[i].rec == nil || len(dec[i].rec.Aux) == 0) {
			done = append(done, got[j])
		}
	}
	if len(done) > 0 {
		rc.Recycle(done)
	}
}

// get reads keys from tier ti, joining reads of the same keys already in
// flight (singleflight) and leading one batched Get for the rest. It returns
// the values; own[i], whether value i is this call's alone (its own Get read it
// and no other fetch joined that read); checked[i], whether check(i, value)
// verified value i inside the store's read (a tier.CheckedGetter, for the keys
// this call led) and stood; the bytes its own Get read; and that Get's error.
func (f *Fetcher) get(ctx context.Context, ti int, keys []tier.Key, check func(i int, v []byte) error) (out [][]byte, own, checked []bool, bytes int64, getErr error) {
	out = make([][]byte, len(keys))
	flags := make([]bool, 2*len(keys))
	own, checked = flags[:len(keys):len(keys)], flags[len(keys):]
	// calls[i] is key i's read when this call leads it; one channel, closed when the Get
	// ends, tells every fetch that joined any of them.
	calls := make([]call, len(keys))
	done := make(chan struct{})
	var joined []int // keys another fetch is reading, and its calls
	var joinedCalls []*call
	f.mu.Lock()
	for i, k := range keys {
		fk := flightKey{ti, k}
		if c, ok := f.mu.flight[fk]; ok {
			c.waiters++
			joined, joinedCalls = append(joined, i), append(joinedCalls, c)
			continue
		}
		calls[i].done = done
		f.mu.flight[fk] = &calls[i]
	}
	f.mu.Unlock()
	lead := func(j int) int { return j } // the key of the j-th key this call reads
	lk := keys
	if len(joined) > 0 {
		var li []int
		lk = make([]tier.Key, 0, len(keys)-len(joined))
		for i := range keys {
			if calls[i].done != nil {
				lk, li = append(lk, keys[i]), append(li, i)
			}
		}
		lead = func(j int) int { return li[j] }
	}
	if len(lk) > 0 {
		t := f.tiers[ti]
		start := time.Now()
		var vals [][]byte
		var ok []bool
		var err error
		if cg, is := t.Store.(tier.CheckedGetter); is && check != nil {
			vals, ok, err = cg.GetChecked(ctx, lk, func(j int, v []byte) error { return check(lead(j), v) })
		} else {
			vals, err = t.Store.Get(ctx, lk)
		}
		d := time.Since(start)
		f.metrics.ObserveRead(t.Tier.String(), d)
		f.mu.Lock()
		for j := range lk {
			i := lead(j)
			c := &calls[i]
			if err == nil {
				c.val = vals[j]
				bytes += int64(len(vals[j]))
				checked[i] = ok != nil && ok[j]
			}
			out[i] = c.val
			own[i] = c.waiters == 0 // and none can join: the entry goes now
			delete(f.mu.flight, flightKey{ti, keys[i]})
		}
		close(done)
		f.mu.Unlock()
		f.metrics.ReadBytes(t.Tier.String(), bytes)
		getErr = err
	}
	for j, c := range joinedCalls {
		select {
		case <-c.done:
			out[joined[j]] = c.val
		case <-ctx.Done():
		}
	}
	return out, own, checked, bytes, getErr
}

// verifyAll runs fn(0..n-1) on up to GOMAXPROCS goroutines, the caller's among them. Blocks
// are independent, so the order does not matter; small batches stay on the caller's goroutine.
func verifyAll(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	work := func() {
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			fn(i)
		}
	}
	for range workers - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work() // the caller is a worker too: on a loaded machine the others may start late
	wg.Wait()
}
