package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"stockpot/internal/blend"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/prefix"
)

// Config configures an Engine.
type Config struct {
	BlockSize      int           // tokens per K/V block
	KVMemory       int64         // bytes for the working block pool; 0 = auto (see DefaultKVMemory)
	KVType         kvcache.DType // element type of K/V
	MaxBatchTokens int           // tokens per forward step
	MaxRunning     int           // sequences running at once
	PrefixCache    bool
	Dedup          bool    // in-flight deduplication of shared prefixes
	Identity       []byte  // cache identity (identity.Descriptor.Bytes()); roots every hash chain
	EOG            []int32 // end-of-generation tokens (tokenizer.EOGs)
	// Hooks, when set, follows the runner: its block and pin events, its own discards, its
	// forward steps and restore stalls (offload.Tiers, under the replica's event publisher
	// in `stockpot serve`). nil: none, and the prefix cache queues no block events unless a
	// hybrid model's checkpoints need them.
	Hooks Hooks
	// StateCheckpointBlocks, for a hybrid model, keeps the recurrent state at the end of
	// every N-th block of a prompt (`--state-checkpoint-blocks`; 0 = 1, every block): a
	// cached prefix is reused only up to the deepest block end with a checkpoint, so N
	// blocks are the reuse granularity, and 1/N of a checkpoint per block its memory (taken
	// from KVMemory). Ignored for other models.
	StateCheckpointBlocks int
	// ReuseEvents adds a Reused block event (with kv) each time a request's admission reuses
	// a block (offload's selective write-through; see prefix.Config.ReuseEvents).
	ReuseEvents bool
	// Restorer, when set, prefetches queued requests' prefixes from lower tiers.
	Restorer Restorer
	// Prefetch is how admission treats a request whose prefetch has not finished (zero:
	// PrefetchWait; DefaultConfig: PrefetchCost, as `stockpot serve --prefetch`).
	Prefetch PrefetchPolicy
	// PrefetchMaxWait is the longest PrefetchTimeout holds a request for its prefetch before
	// computing what has not arrived; under PrefetchCost, the wait for a plan and the least
	// a restore may go without a block before it counts as stalled. Default 500 ms: above the
	// remote tier's 250 ms call timeout, so a Redis read that answers at all lands before the
	// request gives up on it.
	PrefetchMaxWait time.Duration
	// PinBudget caps the working-pool memory pins may hold, in bytes (`--pin-budget`),
	// rounded down to whole blocks. 0 = half the pool; < 0 = no pins (every pin is refused).
	// Past it a pin is partial, or refused for Request.PinStrict (see pins.go).
	PinBudget int64
	// PinOwnerBytes divides the pin budget among tenants: entry i is for Request.Owner i+1
	// (tenant.Tenant.Owner), the most bytes of pinned blocks it may hold (its cache_bytes
	// quota for the device; 0: no cap), and every tenant, with the operator's pins (owner 0)
	// as one more, is guaranteed min(cap, budget/(tenants+1)) that no other's pins can take
	// (pins.go). nil: one budget for all, first come.
	PinOwnerBytes []int64
	// KnownPins are pins the persistent tiers kept across a restart: a block with one of
	// these hashes that enters the pool again is pinned again with its remaining time.
	KnownPins []KnownPin
	// PinSweep is how often an idle runner drops expired pins. Default 1 s. (A busy runner
	// does it on every step.)
	PinSweep time.Duration
	// BlendCheckLayer is the layer at which a CacheBlend request measures its chunk
	// tokens' K/V deviation (blend_cacheblend.go; 0: blend.DefaultCheckLayer, 1). A model
	// with fewer layers measures at its last.
	BlendCheckLayer int
	// Now is the clock (default time.Now); tests pass a fake one to expire pins.
	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultKVMemory is the pool size used when Config.KVMemory is 0: 1 GiB, enough for 16 full
// contexts of the default model (8 layers of 2 KV heads of 64 in f32: 8 KiB a token, 131,072
// tokens, 16 × its 8,192).
const DefaultKVMemory = 1 << 30

// DefaultConfig returns the defaults behind `stockpot serve`.
func DefaultConfig() Config {
	return Config{BlockSize: 16, KVType: kvcache.F32, MaxBatchTokens: 512, MaxRunning: 64, PrefixCache: true, Dedup: true,
		Prefetch: PrefetchCost, PrefetchMaxWait: 500 * time.Millisecond, StateCheckpointBlocks: 1}
}

func (c Config) validate() (Config, error) {
	d := DefaultConfig()
	if c.BlockSize == 0 {
		c.BlockSize = d.BlockSize
	}
	if c.MaxBatchTokens == 0 {
		c.MaxBatchTokens = d.MaxBatchTokens
	}
	if c.MaxRunning == 0 {
		c.MaxRunning = d.MaxRunning
	}
	if c.KVMemory == 0 {
		c.KVMemory = DefaultKVMemory
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.PrefetchMaxWait == 0 {
		c.PrefetchMaxWait = d.PrefetchMaxWait
	}
	if c.StateCheckpointBlocks == 0 {
		c.StateCheckpointBlocks = 1
	}
	if c.StateCheckpointBlocks < 0 || c.StateCheckpointBlocks > 1<<20 {
		return c, fmt.Errorf("engine: state checkpoint every %d blocks out of range [1, %d]", c.StateCheckpointBlocks, 1<<20)
	}
	if c.PinSweep <= 0 {
		c.PinSweep = time.Second
	}
	if c.BlendCheckLayer == 0 {
		c.BlendCheckLayer = blend.DefaultCheckLayer
	}
	if c.BlendCheckLayer < 1 {
		return c, fmt.Errorf("engine: blend check layer %d: layer 0's K/V never deviate, measure at 1 or deeper", c.BlendCheckLayer)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.BlockSize < 1 || c.BlockSize > 4096 {
		return c, fmt.Errorf("engine: block size %d out of range [1, 4096]", c.BlockSize)
	}
	if c.MaxBatchTokens < 1 || c.MaxRunning < 1 {
		return c, fmt.Errorf("engine: max batch tokens %d and max running %d must be positive", c.MaxBatchTokens, c.MaxRunning)
	}
	return c, nil
}

// Engine runs a model over a paged K/V pool with continuous batching and prefix reuse.
// One runner goroutine owns the model, the arena and the scheduler core.
type Engine struct {
	cfg   Config
	model *model.Model
	arena *kvcache.Arena
	cache *prefix.Cache
	core  *Core
	ids   atomic.Uint64

	in      chan *stream
	cancel  chan uint64
	ctrl    chan func()
	fetched chan prefetchMsg
	quit    chan struct{}
	done    chan struct{}

	mu      sync.Mutex
	streams map[uint64]*stream // protected by mu
	closed  bool               // protected by mu

	// stats is the snapshot Stats returns, rewritten in place by publishStats on every step:
	// a value under a lock rather than a fresh pointer each step (that was an allocation per
	// decoded token).
	statsMu sync.Mutex
	stats   Stats // protected by statsMu
	// loadWake is LoadChanged's channel, closed by publishStats when the running or waiting
	// count changes; nil while nobody waits. Protected by statsMu.
	loadWake chan struct{}
	senders  sync.WaitGroup // goroutines waiting to send on a full fetched (see sendFetched)

	eventKV [][]byte // flushEvents' kv argument, reused; runner goroutine only
	pinKV   [][]byte // flushEvents' kv argument of Hooks.PinEvents, reused; runner goroutine only

	// progress holds the progress of the prefetches in flight under PrefetchCost, by request
	// id, from the prefetch's start to its result (prefetched). Runner goroutine only.
	progress map[uint64]*PrefetchProgress

	states     *seqStates   // recurrent states of a hybrid model's sequences (state.go); runner only
	ckpts      *checkpoints // a hybrid model's block checkpoints (state.go); runner only
	eventState [][]byte     // flushEvents' state argument, reused; runner goroutine only
	stateBuf   []byte       // the encoded checkpoints of one hook call; runner goroutine only
	stateBytes int          // one encoded checkpoint's size (model.Config.StateEncodedBytes)
	stateBatch int          // the most checkpoint bytes one hook call carries (stateBatchBytes; tests lower it)
	discarded  uint64       // Core.Stats().StateDiscarded already reported to Hooks.Discarded

	// afterStep, when set, runs on the runner goroutine after every scheduling step, once its
	// stats are published (tests: PauseWhen stops the runner at the step where a state is
	// reached, instead of polling Stats and pausing some steps later). Runner goroutine only.
	afterStep func()
}

// stream carries one request's outputs from the runner to its caller without ever blocking the
// runner: the runner appends to queue, a per-request goroutine forwards to ch.
type stream struct {
	id     uint64
	req    *Request
	root   prefix.Hash
	seed   uint64
	queued time.Time
	ctx    context.Context
	ch     chan Output

	mu     sync.Mutex
	queue  []Output // protected by mu
	notify chan struct{}
	// spare is the queue forward took last, handed back as the next queue once forward has
	// sent every output in it (two arrays taking turns: pushes allocate nothing once they
	// are grown). forward goroutine only, outside mu.
	spare []Output
}

// streamQueue is the outputs a stream's queue holds before it grows: the runner pushes one
// a step, and forward takes them all at each wake-up, so a few cover a caller that keeps up.
const streamQueue = 4

// New builds an engine for m. The K/V pool is sized from cfg.KVMemory.
func New(m *model.Model, cfg Config) (*Engine, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	mc := m.Config()
	layout := kvcache.Layout{BlockSize: cfg.BlockSize, Layers: mc.KVLayers(), KVHeads: mc.KVHeads, HeadDim: mc.HeadDim, DType: cfg.KVType}
	minBlocks := kvcache.BlocksForTokens(mc.ContextLength, cfg.BlockSize)
	kvBudget := cfg.KVMemory
	if mc.Hybrid() {
		kvBudget = kvShare(cfg.KVMemory, layout.BlockBytes(), int64(mc.StateBytes()), cfg.StateCheckpointBlocks)
	}
	arena, err := kvcache.NewArenaForBudget(layout, kvBudget, min(minBlocks, 64))
	if err != nil {
		if mc.Hybrid() {
			return nil, fmt.Errorf("engine: %d bytes of pool leave %d for K/V beside a recurrent-state checkpoint (%d bytes) every %d blocks: %w",
				cfg.KVMemory, kvBudget, mc.StateBytes(), cfg.StateCheckpointBlocks, err)
		}
		return nil, err
	}
	// A hybrid model drains the block events even without a hook: its checkpoints leave
	// with their blocks.
	pc, err := prefix.New(prefix.Config{NumBlocks: arena.NumBlocks(), BlockSize: cfg.BlockSize, MinHitsToProtect: 1,
		DisableEvents: cfg.Hooks == nil && !mc.Hybrid(), ReuseEvents: cfg.ReuseEvents})
	if err != nil {
		return nil, err
	}
	pinBlocks := arena.NumBlocks() / 2
	switch {
	case cfg.PinBudget < 0:
		pinBlocks = 0
	case cfg.PinBudget > 0:
		pinBlocks = int(min(cfg.PinBudget/layout.BlockBytes(), int64(arena.NumBlocks())))
	}
	var pinOwners []int
	for _, b := range cfg.PinOwnerBytes {
		n := int(min(b/layout.BlockBytes(), int64(arena.NumBlocks())))
		if b > 0 && n == 0 {
			n = -1 // a cap under one block allows none (0 would be no cap)
		}
		pinOwners = append(pinOwners, n)
	}
	states := newSeqStates(m)
	e := &Engine{
		cfg: cfg, model: m, arena: arena, cache: pc, states: states,
		ckpts: newCheckpoints(m, states, checkpointBudget(arena.NumBlocks(), cfg.StateCheckpointBlocks)), stateBytes: mc.StateEncodedBytes(), stateBatch: stateBatchBytes,
		in: make(chan *stream, 1024), cancel: make(chan uint64, 1024), ctrl: make(chan func()), fetched: make(chan prefetchMsg, 1024),
		quit: make(chan struct{}), done: make(chan struct{}),
		streams: map[uint64]*stream{}, progress: map[uint64]*PrefetchProgress{},
	}
	e.core = newCore(CoreConfig{
		BlockSize: cfg.BlockSize, ContextLength: mc.ContextLength,
		MaxBatchTokens: cfg.MaxBatchTokens, MaxRunning: cfg.MaxRunning,
		PrefixCache: cfg.PrefixCache, Dedup: cfg.Dedup, EOG: cfg.EOG,
		Prefetch: cfg.Prefetch, PrefetchMaxWait: cfg.PrefetchMaxWait,
		PinBudget: pinBlocks, PinOwners: pinOwners, CheckpointEvery: cfg.StateCheckpointBlocks, StateBytes: mc.StateBytes(), BlockBytes: layout.BlockBytes(),
	}, cacheAdapter{pc})
	if e.ckpts != nil {
		e.core.states = e.ckpts
	}
	e.core.AdoptPins(cfg.KnownPins)
	e.publishStats()
	go e.run()
	return e, nil
}

// kvShare is the part of a hybrid model's pool budget that goes to K/V blocks: the rest holds
// one checkpoint of stateBytes per every blocks of blockBytes.
func kvShare(budget, blockBytes, stateBytes int64, every int) int64 {
	per := blockBytes*int64(every) + stateBytes // every blocks and their checkpoint
	return int64(float64(budget) * float64(blockBytes*int64(every)) / float64(per))
}

// ModelConfig returns the served model's hyper-parameters.
func (e *Engine) ModelConfig() model.Config { return e.model.Config() }

// Generate implements Generator.
func (e *Engine) Generate(ctx context.Context, req *Request) (<-chan Output, error) {
	mc := e.model.Config()
	if len(req.Prompt) == 0 {
		return nil, fmt.Errorf("%w: empty prompt", ErrInvalid)
	}
	if req.MaxTokens < 1 {
		return nil, fmt.Errorf("%w: max_tokens %d must be at least 1", ErrInvalid, req.MaxTokens)
	}
	for _, t := range req.Prompt {
		if t < 0 || int(t) >= mc.Vocab {
			return nil, fmt.Errorf("%w: token id %d outside the vocabulary [0, %d)", ErrInvalid, t, mc.Vocab)
		}
	}
	if t := req.FirstToken; t != nil && (*t < 0 || int(*t) >= mc.Vocab) {
		return nil, fmt.Errorf("%w: first token id %d outside the vocabulary [0, %d)", ErrInvalid, *t, mc.Vocab)
	}
	if len(req.Prompt) >= mc.ContextLength {
		return nil, fmt.Errorf("%w: %d prompt tokens, context length %d leaves no room to generate", ErrPromptTooLong, len(req.Prompt), mc.ContextLength)
	}
	if need := kvcache.BlocksForTokens(len(req.Prompt)+1, e.cfg.BlockSize); need > e.arena.NumBlocks() {
		return nil, fmt.Errorf("%w: %d prompt tokens need %d K/V blocks, the pool has %d", ErrPromptTooLong, len(req.Prompt), need, e.arena.NumBlocks())
	}
	if req.MaxOffloadTokens != nil && *req.MaxOffloadTokens < 0 {
		return nil, fmt.Errorf("%w: max_offload_tokens %d < 0", ErrInvalid, *req.MaxOffloadTokens)
	}
	if len(req.Pins) > MaxPins {
		return nil, fmt.Errorf("%w: %d pins, at most %d", ErrInvalid, len(req.Pins), MaxPins)
	}
	for i, p := range req.Pins {
		if p.TTL <= 0 || p.Tokens < 0 {
			return nil, fmt.Errorf("%w: pin %d: %d tokens for %v; want tokens >= 0 and a TTL > 0", ErrInvalid, i, p.Tokens, p.TTL)
		}
	}
	if err := e.checkBlend(req); err != nil {
		return nil, err
	}
	seed := req.Sampling.Seed
	if !req.Sampling.HasSeed {
		seed = rand.Uint64()
	}
	s := &stream{
		id: e.ids.Add(1), req: req, seed: seed, queued: e.cfg.Now(), ctx: ctx,
		root:   prefix.Root(e.cfg.Identity, req.CacheSalt),
		ch:     make(chan Output, 16),
		notify: make(chan struct{}, 1),
	}
	qs := make([]Output, 2*streamQueue) // the two arrays queue and spare take turns with
	s.queue, s.spare = qs[:0:streamQueue], qs[streamQueue:streamQueue:2*streamQueue]
	if req.PinStrict && len(req.Pins) > 0 {
		// Checked (and reserved) on the runner before the request is queued, so a refusal
		// is an error here, before any stream or header, and a strict pin is never partial.
		var err error
		e.do(func() { err = e.core.ReservePins(s.id, req, s.root) })
		if err != nil {
			return nil, err
		}
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		if req.PinStrict && len(req.Pins) > 0 {
			e.do(func() { e.core.Unreserve(s.id) })
		}
		return nil, ErrShutdown
	}
	e.streams[s.id] = s
	e.mu.Unlock()
	// Queue the request before forward can send its cancellation: the runner handles a
	// cancellation only after every request queued before it (see receive), so a cancel can
	// never reach the core ahead of the request it names and be lost.
	e.in <- s
	go e.forward(s)
	return s.ch, nil
}

// forward moves outputs from the runner to the caller and turns a cancelled context into a
// cancellation for the runner. It ends after the final output.
func (e *Engine) forward(s *stream) {
	defer close(s.ch)
	ctxDone := s.ctx.Done() // nil for a context that is never cancelled
	gone := false           // the caller's context ended: drop tokens until the final output
	cancel := func() {
		ctxDone, gone = nil, true
		select {
		case e.cancel <- s.id:
		case <-e.done: // the runner is gone; shutdown already cancelled s
		}
	}
	for {
		select {
		case <-s.notify:
		case <-ctxDone:
			cancel()
			continue
		}
		s.mu.Lock()
		q := s.queue
		s.queue = s.spare[:0]
		s.mu.Unlock()
		s.spare = q // forward's alone from here: the runner appends to the other array
		for _, o := range q {
			if gone && !o.Done {
				continue
			}
			select {
			case s.ch <- o:
			case <-ctxDone:
				cancel()
				if o.Done {
					select { // deliver the final output if there is room; the caller may be gone
					case s.ch <- o:
					default:
					}
				}
			}
			if o.Done {
				return
			}
		}
		clear(q) // the outputs are the caller's now; the array holds none of them
	}
}

func (s *stream) push(o Output) {
	s.mu.Lock()
	s.queue = append(s.queue, o)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Stats implements Generator.
func (e *Engine) Stats() Stats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	return e.stats
}

// DedupWaits and Preemptions are exposed for benchmarks and tests.
func (e *Engine) SchedulerCounters() (dedupWaits, preemptions uint64) {
	st := e.Stats()
	return st.DedupWaits, st.Preemptions
}

func (e *Engine) publishStats() {
	cs := e.core.Stats()
	used, cached, ev := cacheAdapter{e.cache}.stats()
	st := Stats{
		Running: cs.Running, Waiting: cs.Waiting,
		KVBlocksTotal: e.arena.NumBlocks(), KVBlocksUsed: used, KVBlocksCached: cached,
		KVBlockBytes: e.arena.Layout().BlockBytes(), Evictions: ev,
		DedupWaits: cs.DedupWaits, Preemptions: cs.Preemptions,
		PrefetchStall:  cs.PrefetchStall,
		RestoredBlocks: cs.Restored,
		PinnedBlocks:   e.core.PinnedBlocks(), PinBudgetBlocks: e.core.cfg.PinBudget, PinsShed: cs.PinsShed,
		Evidence:            cs.Evidence,
		MinReusableTokens:   e.cfg.BlockSize,
		QueuedPrefillTokens: cs.QueuedPrefillTokens,
	}
	if e.ckpts != nil {
		st.MinReusableTokens = e.cfg.BlockSize * e.cfg.StateCheckpointBlocks
		st.StateBytes = e.model.Config().StateBytes()
		st.Checkpoints, st.CheckpointBudget, st.CheckpointsDropped = len(e.ckpts.byHash), e.ckpts.max, e.ckpts.dropped
		st.StateDiscardedBlocks = cs.StateDiscarded
	}
	e.statsMu.Lock()
	e.wakeLoadLocked(&st) // loadwake.go
	e.stats = st
	e.statsMu.Unlock()
}

// Close stops accepting requests, cancels the running ones and stops the runner.
func (e *Engine) Close() {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.closed = true
	e.mu.Unlock()
	close(e.quit)
	<-e.done
	e.senders.Wait()
}

// CheckInvariants verifies the block pool and index inside the runner goroutine; with no
// request in flight it also checks that no block is referenced. For tests and debugging.
func (e *Engine) CheckInvariants() error {
	var err error
	e.do(func() {
		if err = e.cache.CheckInvariants(); err != nil {
			return
		}
		if e.core.Idle() {
			// Only pins and reservations whose prefetch still runs (Core.Reserve) may outlive
			// a request.
			if st, r, p := e.cache.Stats(), e.core.Stats().ReservedBlocks, e.core.PinnedBlocks(); st.Referenced != r+p {
				err = fmt.Errorf("engine: idle but %d blocks still referenced, %d reserved, %d pinned", st.Referenced, r, p)
			}
		}
	})
	return err
}

// FlushCached calls fn, on the runner goroutine, with every block the working pool indexes, as
// Stored events, the block's K/V and, for a hybrid model, its state checkpoint (nil when it
// has none; both valid during the call). Serve calls it at shutdown so the write-back tiers
// keep what was never evicted.
func (e *Engine) FlushCached(fn func(ev prefix.Event, kv, state []byte)) {
	e.do(func() {
		e.cache.Live(func(ev prefix.Event) {
			e.stateBuf = e.stateBuf[:0]
			fn(ev, e.arena.BlockData(ev.Block), e.encodeState(ev.Hash))
		})
		e.trimStateBuf()
	})
}

// encodeState appends block h's checkpoint to e.stateBuf and returns those bytes (nil when
// the pool holds none). Earlier returns stay valid (a reallocation leaves them on the old
// array).
func (e *Engine) encodeState(h prefix.Hash) []byte {
	if e.ckpts == nil {
		return nil
	}
	st := e.ckpts.get(h)
	if st == nil {
		return nil
	}
	start := len(e.stateBuf)
	e.stateBuf, _ = st.AppendBinary(e.stateBuf)
	return e.stateBuf[start:len(e.stateBuf):len(e.stateBuf)]
}

// The checkpoints a hook call carries are encoded into e.stateBuf and are valid during the
// call only, so the hooks are called in batches of at most stateBatchBytes of them: a pin or
// a restore of a long prefix (7,679 checkpoints, 1.9 GiB, at 480K tokens of small-kimi-k3)
// would otherwise encode every checkpoint into one buffer at once, doubling through its
// reallocations, and keep that capacity for the life of the engine. After a flush a buffer
// grown past stateKeepBytes is let go.
const (
	stateBatchBytes = 32 << 20
	stateKeepBytes  = 4 << 20
)

// stateBatchFull reports whether e.stateBuf holds a batch's worth of checkpoints: the events
// encoded so far go to the hook before the next one is encoded.
func (e *Engine) stateBatchFull() bool {
	return e.ckpts != nil && len(e.stateBuf) > 0 && len(e.stateBuf)+e.stateBytes > e.stateBatch
}

// trimStateBuf lets go of a state buffer a large flush grew.
func (e *Engine) trimStateBuf() {
	if cap(e.stateBuf) > stateKeepBytes {
		e.stateBuf = nil
	}
}

// Pause stops the runner between steps until the returned resume func is called. Requests
// sent meanwhile queue up; tests and benchmarks use it to make a burst arrive at once.
func (e *Engine) Pause() (resume func()) {
	release := make(chan struct{})
	paused := make(chan struct{})
	go e.do(func() { close(paused); <-release })
	<-paused
	var once sync.Once
	return func() { once.Do(func() { close(release) }) }
}

// do runs fn on the runner goroutine and waits for it.
func (e *Engine) do(fn func()) {
	done := make(chan struct{})
	select {
	case e.ctrl <- func() { fn(); close(done) }:
		<-done
	case <-e.done:
		fn() // runner gone: nothing else touches the state
	}
}

// queuedMessages is how many requests, cancellations and prefetch results wait in the
// runner's buffered channels.
func (e *Engine) queuedMessages() int { return len(e.in) + len(e.cancel) + len(e.fetched) }

// ready is a channel that is always ready: receive(ready) does not block.
var ready = func() chan time.Time { c := make(chan time.Time); close(c); return c }()

// receive handles one message for the runner: a new request, a cancellation, a control
// function or a prefetch result. It waits until one arrives or giveUp fires (nil: wait for a
// message; ready: do not wait). It reports whether it handled a message, and whether the
// engine is quitting (after shutting down).
func (e *Engine) receive(giveUp <-chan time.Time) (got, quit bool) {
	select {
	case s := <-e.in:
		e.add(s)
	case id := <-e.cancel:
		// The request was queued on e.in before its cancellation was sent (Generate), but
		// select picks among ready channels at random: add everything queued first, or a
		// cancel that overtook its request would name an unknown id and be dropped, leaving
		// the request to run to the end for a client that is gone.
		e.addQueued()
		e.core.Cancel(id, e.cfg.Now())
	case fn := <-e.ctrl:
		fn()
	case m := <-e.fetched:
		e.prefetched(m)
	case <-e.quit:
		e.shutdown()
		return false, true
	case <-giveUp:
		return false, false
	}
	return true, false
}

func (e *Engine) run() {
	defer close(e.done)
	mc := e.model.Config()
	// logitBuf holds the step's logits rows back to back, in plan order, so that the model's
	// output head writes them in place (model.Sequence.Logits) instead of copying them out.
	var logitBuf []float32
	var seqs, checks []model.Sequence // checks: CacheBlend's measuring items (PlanItem.BlendCheck)
	var tables [][]int32
	var logitRows [][]float32 // reused per step: Advance reads it during the call only
	var kvs []kernels.PagedKV // one per plan item, reused; Forward keeps no reference after the step
	for {
		// Outputs queued by the last message go out before any wait: a cancellation that
		// emptied the core (the only queued request, held back for memory, a prefetch or
		// another request's blocks) would otherwise sit in the outbox until the next message.
		e.deliver()
		// Wait for work when idle; otherwise take what arrived without blocking.
		if e.core.Idle() {
			var sweep <-chan time.Time // nil: wait for a message
			if e.core.HasPins() {
				sweep = time.After(e.cfg.PinSweep) // wake to expire pins (Schedule does it)
			}
			if _, quit := e.receive(sweep); quit {
				return
			}
		}
		for {
			got, quit := e.receive(ready)
			if quit {
				return
			}
			// ready competes at random with the messages, so receive(ready) can give up while
			// some are queued: keep going until the buffered channels are empty, or a burst of
			// cancellations would be spread over as many forward steps, each request running
			// (and holding its blocks) until its own cancellation happens to be picked.
			if !got && e.queuedMessages() == 0 {
				break
			}
		}
		e.deliver()
		e.ckpts.recycle()
		now := e.cfg.Now()
		e.feedProgress(now)
		plan := e.core.Schedule(now)
		// The events first: an evicted block's bytes must be copied out before a restore
		// lands in its place. A block committed or pinned at admission from a restore is
		// not in the arena yet: its events carry the restore's bytes (blockKV).
		e.flushEvents(plan.Restores)
		e.reportDiscards()
		e.applyRestores(plan.Restores)
		e.applyBlends(plan.Blends)
		if len(plan.Items) == 0 {
			e.publishStats()
			e.stepDone()
			if !e.core.Idle() {
				// Waiting on memory or on another request's in-flight blocks.
				if _, quit := e.receive(time.After(2 * time.Millisecond)); quit {
					return
				}
			}
			continue
		}
		seqs, checks = seqs[:0], checks[:0]
		for len(tables) < len(plan.Items) {
			tables = append(tables, nil)
		}
		if cap(logitRows) < len(plan.Items) {
			logitRows = make([][]float32, len(plan.Items))
			kvs = make([]kernels.PagedKV, len(plan.Items))
		}
		logits := logitRows[:len(plan.Items)]
		clear(logits)
		nl := 0
		for _, it := range plan.Items {
			if it.WantLogits {
				nl++
			}
		}
		if len(logitBuf) < nl*mc.Vocab {
			logitBuf = make([]float32, nl*mc.Vocab)
		}
		nl = 0
		for i, it := range plan.Items {
			t := tables[i][:0]
			for _, b := range it.Blocks {
				t = append(t, int32(b))
			}
			tables[i] = t
			kv := &kvs[i]
			*kv = kernels.PagedKV{F32: e.arena.F32(), F16: e.arena.F16(), Q8: e.arena.Q8(), BlockSize: e.cfg.BlockSize, Layers: mc.KVLayers(), KVHeads: mc.KVHeads, HeadDim: mc.HeadDim, Table: t}
			sq := model.Sequence{Tokens: it.Tokens, Pos: it.Pos, Positions: it.Positions, KV: kv, State: e.states.get(it)}
			if it.BlendCheck {
				checks = append(checks, sq)
				continue
			}
			for j := range it.Checkpoints {
				st := e.ckpts.alloc()
				st.Pos = (it.Checkpoints[j].Block + 1) * e.cfg.BlockSize
				it.Checkpoints[j].State = st
				sq.Checkpoints = append(sq.Checkpoints, st)
			}
			if it.WantLogits {
				sq.Logits = logitBuf[nl*mc.Vocab : (nl+1)*mc.Vocab]
				logits[i] = sq.Logits
				nl++
			}
			seqs = append(seqs, sq)
		}
		t0 := time.Now()
		if len(checks) > 0 {
			e.checkBlends(checks, plan.Measures)
		}
		var err error
		if len(seqs) > 0 { // none when the step is only CacheBlend's measuring
			err = e.model.Forward(seqs)
		}
		if err != nil {
			e.cfg.Logger.Error("forward", "err", err)
			// Whatever the checkpoints hold now is not the state at their block ends.
			for _, it := range plan.Items {
				for j := range it.Checkpoints {
					e.ckpts.retire(it.Checkpoints[j].State)
					it.Checkpoints[j].State = nil
				}
			}
		}
		if e.cfg.Hooks != nil {
			n, att := 0, int64(0)
			for _, it := range plan.Items {
				k := int64(len(it.Tokens))
				n += len(it.Tokens)
				att += k*int64(it.Pos) + k*(k-1)/2
			}
			e.cfg.Hooks.ForwardStep(n, att, time.Since(t0))
		}
		e.core.Advance(plan, logits, e.cfg.Now())
		e.flushEvents(nil)
		e.deliver()
		e.publishStats()
		e.stepDone()
	}
}

// stepDone runs the afterStep hook, if any.
func (e *Engine) stepDone() {
	if e.afterStep != nil {
		e.afterStep()
	}
}

// flushEvents hands the cache's queued block events, then the pin events, to their hooks.
// restores are the copies into blocks still to be applied (this step's): a Stored, Reused or
// PinCreated event of such a block carries the restore's bytes, which are what the block
// holds from now on, never the arena's stale ones (a write-through or a tier pin would store
// those under the block's hash, with a checksum that verifies). An Evicted event carries the
// arena's bytes: the block's old contents, about to be overwritten. A hybrid model's
// checkpoints go with their blocks: to the hook beside the K/V, then out of the pool when the
// block leaves it.
func (e *Engine) flushEvents(restores []Restore) {
	defer e.core.ClearRestored() // the events of the blocks it marked are drained here
	e.flushPinEvents(restores)
	if e.cfg.Hooks == nil && e.ckpts == nil {
		return
	}
	evs := e.cache.Events()
	if len(evs) == 0 {
		return
	}
	for i := range evs {
		if evs[i].Kind == prefix.Stored && e.core.WasRestored(evs[i].Block) {
			evs[i].Restored = true
		}
	}
	if e.cfg.Hooks != nil {
		e.eventKV, e.eventState, e.stateBuf = e.eventKV[:0], e.eventState[:0], e.stateBuf[:0]
		dh, _ := e.cfg.Hooks.(BlockDataHooks)
		lo := 0
		for i, ev := range evs {
			if e.stateBatchFull() {
				e.cfg.Hooks.BlockEvents(evs[lo:i], e.eventKV, e.eventState)
				clear(e.eventKV)
				clear(e.eventState)
				e.eventKV, e.eventState, e.stateBuf = e.eventKV[:0], e.eventState[:0], e.stateBuf[:0]
				lo = i
			}
			var kv, state []byte
			switch {
			case dh != nil && !dh.WantsBlockData(ev):
				// Nobody reads its bytes: no checkpoint encoded.
			case ev.Kind == prefix.Stored, ev.Kind == prefix.Reused:
				kv = e.blockKV(ev.Block, restores)
				if !ev.Restored { // a restored block is not written down again: no state
					state = e.encodeState(ev.Hash)
				}
			case ev.Kind == prefix.Evicted:
				kv, state = e.arena.BlockData(ev.Block), e.encodeState(ev.Hash)
			}
			e.eventKV = append(e.eventKV, kv)
			e.eventState = append(e.eventState, state)
		}
		e.cfg.Hooks.BlockEvents(evs[lo:], e.eventKV, e.eventState)
		clear(e.eventKV) // hold no views of the arena between steps
		clear(e.eventState)
		e.trimStateBuf()
	}
	if e.ckpts != nil {
		for _, ev := range evs {
			switch ev.Kind {
			case prefix.Evicted, prefix.Removed:
				e.ckpts.drop(ev.Hash)
			case prefix.Cleared:
				e.ckpts.dropAll()
			}
		}
	}
}

// reportDiscards hands Hooks.Discarded the blocks the core discarded since the last call.
func (e *Engine) reportDiscards() {
	if e.ckpts == nil {
		return
	}
	n := e.core.Stats().StateDiscarded
	if n > e.discarded && e.cfg.Hooks != nil {
		e.cfg.Hooks.Discarded(ReasonIncompleteState, int(n-e.discarded))
	}
	e.discarded = n
}

// blockKV is the K/V block b holds once restores are applied.
func (e *Engine) blockKV(b kvcache.BlockID, restores []Restore) []byte {
	for i := range restores {
		if kvcache.BlockID(restores[i].Block) == b {
			return restores[i].Data
		}
	}
	return e.arena.BlockData(b)
}

func (e *Engine) flushPinEvents(restores []Restore) {
	evs := e.core.PinEvents()
	if len(evs) == 0 || e.cfg.Hooks == nil {
		return
	}
	e.pinKV, e.stateBuf = e.pinKV[:0], e.stateBuf[:0]
	lo := 0
	for i, ev := range evs {
		if e.stateBatchFull() {
			e.cfg.Hooks.PinEvents(evs[lo:i], e.pinKV)
			clear(e.pinKV)
			e.pinKV, e.stateBuf = e.pinKV[:0], e.stateBuf[:0]
			lo = i
		}
		var kv []byte
		if ev.Kind == PinCreated {
			kv = e.blockKV(ev.Block, restores)
			evs[i].State = e.encodeState(ev.Hash)
		}
		e.pinKV = append(e.pinKV, kv)
	}
	e.cfg.Hooks.PinEvents(evs[lo:], e.pinKV)
	clear(e.pinKV)
	for i := range evs {
		evs[i].State = nil // the bytes are reused: hold no views of them
	}
	e.trimStateBuf()
}

// Pins lists the blocks pins hold in the working pool, by root, then depth (for the cache
// admin API). Expired pins are dropped first.
func (e *Engine) Pins() []PinInfo {
	var out []PinInfo
	e.do(func() {
		e.core.ExpirePins(e.cfg.Now())
		out = e.core.Pins()
	})
	return out
}

// Unpin drops the pins match selects (it sees each pinned block), and every pin below them,
// telling the tiers (Hooks.PinEvents, PinRemoved); it returns how many blocks it unpinned. The blocks
// stay cached, unpinned, and are evicted as any other.
func (e *Engine) Unpin(match func(PinInfo) bool) int {
	var n int
	e.do(func() {
		n = e.core.Unpin(match)
		e.flushEvents(nil)
		e.publishStats()
	})
	return n
}

// MarkPublic marks the full blocks of tokens, chained from the root of salt (the public
// namespace's), public: requests with PublicReads continue them (tenant.go). It returns how
// many blocks it marked.
func (e *Engine) MarkPublic(salt string, tokens []int32) (int, error) {
	root := prefix.Root(e.cfg.Identity, salt)
	hashes := prefix.BlockHashes(root, tokens, e.cfg.BlockSize)
	var err error
	e.do(func() { err = e.core.MarkPublic(root, hashes) })
	return len(hashes), err
}

// Root is the root of the hash chains of a tenant's prompts (salt: Request.CacheSalt): a
// pin's PinInfo.Root, for selecting a tenant's pins (Unpin) in the cache admin API.
func (e *Engine) Root(salt string) prefix.Hash { return prefix.Root(e.cfg.Identity, salt) }

// SweepPins drops the expired pins now (the runner does it on every step and every
// Config.PinSweep while idle); it returns how many blocks it unpinned. For tests with a fake
// clock.
func (e *Engine) SweepPins() int {
	var n int
	e.do(func() {
		n = e.core.ExpirePins(e.cfg.Now())
		e.flushEvents(nil)
		e.publishStats()
	})
	return n
}

type prefetchMsg struct {
	id    uint64
	p     Prefetched
	chunk int // 0: the prompt's prefetch; i+1: the prefetch of the blend's chunk i
}

// add queues a request and, with tiers configured, starts its prefetch: the blocks after what
// the working pool holds now are looked up while the request waits in the queue.
func (e *Engine) add(s *stream) {
	root := e.core.Add(s.id, s.req, s.root, s.seed, s.queued)
	if e.cfg.Restorer == nil || !e.cfg.PrefixCache {
		return
	}
	e.fetchChunks(s.id)
	have, hashes := e.core.PeekQueued(s.id)
	limit := prefix.MaxMatchBlocks(len(s.req.Prompt), e.cfg.BlockSize)
	if n := s.req.MaxReuseTokens; n != nil {
		limit = min(limit, max(*n, 0)/e.cfg.BlockSize) // nothing past the cap is fetched
	}
	if have >= limit {
		return
	}
	id := s.id
	done := func(p Prefetched) {
		start := time.Now()
		e.decodeCheckpoints(&p)
		p.Elapsed += time.Since(start) // decoding is part of the restore (usage restore_ms)
		e.sendFetched(prefetchMsg{id: id, p: p})
	}
	var dst [][]byte
	if _, ok := e.cfg.Restorer.(IntoRestorer); ok {
		// Reserve the blocks the prefetch may restore, so it verifies straight into them.
		if ids := e.core.Reserve(id, have, limit-have); ids != nil {
			// Reserving may have evicted cached blocks: their bytes go to the hook (the
			// write-back copies them out) before the Restorer may overwrite them.
			e.flushEvents(nil)
			dst = make([][]byte, len(ids))
			for i, b := range ids {
				dst[i] = e.arena.BlockData(b)
			}
		}
	}
	if dst == nil {
		e.core.Prefetching(id)
	}
	e.startPrefetch(id, root, hashes[:limit], s.req.Prompt, have, dst, done)
}

// fetchChunks starts the prefetches of request id's blend chunks that the working pool lacks
// (Core.ChunkFetches): each chunk's blocks under the chunks' root, as if it were a prompt.
func (e *Engine) fetchChunks(id uint64) {
	for _, f := range e.core.ChunkFetches(id) {
		chunk := f.Chunk + 1
		e.cfg.Restorer.Prefetch(f.Root, f.Hashes, f.Tokens, f.First, func(p Prefetched) {
			e.sendFetched(prefetchMsg{id: id, p: p, chunk: chunk})
		})
	}
}

// startPrefetch starts request id's prefetch on the Restorer: with progress under
// PrefetchCost where it reports some (ProgressRestorer), into the reserved blocks dst where
// there are some (IntoRestorer), plain otherwise.
func (e *Engine) startPrefetch(id uint64, root prefix.Hash, hashes []prefix.Hash, prompt []int32, first int, dst [][]byte, done func(Prefetched)) {
	if pr, ok := e.cfg.Restorer.(ProgressRestorer); ok && e.cfg.Prefetch == PrefetchCost {
		p := &PrefetchProgress{}
		e.progress[id] = p
		pr.PrefetchProgress(root, hashes, prompt, first, dst, p, done)
		return
	}
	if dst != nil {
		e.cfg.Restorer.(IntoRestorer).PrefetchInto(root, hashes, prompt, first, dst, done)
		return
	}
	e.cfg.Restorer.Prefetch(root, hashes, prompt, first, done)
}

// feedProgress hands the core the progress of every prefetch in flight (PrefetchCost), as
// of now: at every scheduling step, so a held request is weighed against what has arrived.
func (e *Engine) feedProgress(now time.Time) {
	for id, p := range e.progress {
		e.core.PrefetchProgressed(id, p.Load(), now)
	}
}

// sendFetched hands a prefetch result to the runner without blocking the Restorer's goroutine.
// When the buffer is full a goroutine waits to send it; once the runner has returned (e.done)
// the result is dropped, so that goroutine never outlives the engine. Close waits for them.
func (e *Engine) sendFetched(m prefetchMsg) {
	select {
	case e.fetched <- m:
		return
	case <-e.done:
		return // the runner is gone; shutdown already cancelled the request
	default:
	}
	e.senders.Add(1)
	go func() {
		defer e.senders.Done()
		select {
		case e.fetched <- m:
		case <-e.done:
		}
	}()
}

// decodeCheckpoints decodes and checks a hybrid model's restored checkpoints
// (DecodeState: the format, finite values; and the position must be the block's end) into
// Checkpoint, on the Restorer's goroutine that delivers p and on up to GOMAXPROCS goroutines
// beside it, not on the runner's: at 480K tokens of small-kimi-k3 that is 1.9 GiB, seconds of
// work that would stall every running request. A block whose checkpoint fails is kept as
// K/V without one, and the core's reuse rule ends the prefix before it. The tier's bytes are
// not kept.
func (e *Engine) decodeCheckpoints(p *Prefetched) {
	if e.ckpts == nil {
		return
	}
	var idx []int
	for i := range p.Blocks {
		if p.Blocks[i].State != nil {
			idx = append(idx, i)
		}
	}
	decode := func(i int) {
		rb := &p.Blocks[i]
		if st, err := e.model.DecodeState(rb.State); err == nil && st.Pos == (p.First+i+1)*e.cfg.BlockSize {
			rb.Checkpoint = st
		}
	}
	var next atomic.Int64
	work := func() {
		for k := int(next.Add(1) - 1); k < len(idx); k = int(next.Add(1) - 1) {
			decode(idx[k])
		}
	}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(idx)/8+1) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	for i := range p.Blocks {
		p.Blocks[i].State = nil
	}
}

// prefetched hands a prefetch result (its checkpoints decoded: decodeCheckpoints) to the core
// and reports any stall it ended.
func (e *Engine) prefetched(m prefetchMsg) {
	before := e.core.Stats().PrefetchStall
	if m.chunk > 0 {
		e.core.ChunkPrefetched(m.id, m.chunk-1, m.p, e.cfg.Now())
	} else {
		delete(e.progress, m.id)
		e.core.Prefetched(m.id, m.p, e.cfg.Now())
	}
	if d := e.core.Stats().PrefetchStall - before; d > 0 && e.cfg.Hooks != nil {
		e.cfg.Hooks.RestoreStall(d)
	}
}

// applyRestores copies restored tier bytes into their blocks (before the forward pass).
func (e *Engine) applyRestores(rs []Restore) {
	for _, r := range rs {
		copy(e.arena.BlockData(kvcache.BlockID(r.Block)), r.Data)
	}
}

// deliver hands queued outputs to their streams. Stats are published first, so a caller that
// has seen its final output also sees the blocks it released.
func (e *Engine) deliver() {
	ready := e.core.Ready()
	if len(ready) == 0 {
		return
	}
	e.publishStats()
	for _, d := range ready {
		e.mu.Lock()
		s := e.streams[d.Seq]
		if d.Out.Done {
			delete(e.streams, d.Seq)
		}
		e.mu.Unlock()
		if d.Out.Done {
			e.states.release(d.Seq)
		}
		if s != nil {
			s.push(d.Out)
		}
	}
}

// addQueued adds every request waiting on e.in, without blocking.
func (e *Engine) addQueued() {
	for {
		select {
		case s := <-e.in:
			e.add(s)
		default:
			return
		}
	}
}

// shutdown cancels everything still queued or running.
func (e *Engine) shutdown() {
	now := e.cfg.Now()
	e.addQueued()
	e.mu.Lock()
	ids := make([]uint64, 0, len(e.streams))
	for id := range e.streams {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	for _, id := range ids {
		e.core.Cancel(id, now)
	}
	e.deliver()
	// A request registered just before Close whose send on e.in came after the drain above is
	// in no core queue, so nothing ended it: end its stream here, or its caller waits forever.
	e.mu.Lock()
	left := make([]*stream, 0, len(e.streams))
	for id, s := range e.streams {
		left = append(left, s)
		delete(e.streams, id)
	}
	e.mu.Unlock()
	for _, s := range left {
		n := len(s.req.Prompt)
		s.push(Output{Done: true, FinishReason: FinishCancelled, Usage: &Usage{PromptTokens: n, ComputedTokens: n}})
	}
	e.publishStats()
}
