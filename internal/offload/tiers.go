package offload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/kvcache"
	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/disk"
	"stockpot/internal/tier/hostmem"
	"stockpot/internal/tier/redis"
)

// Config configures the lower tiers of one serving engine (the --host-cache, --disk-cache,
// --remote-cache, --offload-* flags of `stockpot serve`). A tier is on when its field is set;
// with none on there is nothing to open (Enabled).
type Config struct {
	HostBytes int64  // host-RAM tier budget; 0 = off
	DiskDir   string // disk tier directory; "" = off
	DiskBytes int64  // disk tier budget. Default 10 GiB (disk.DefaultConfig)
	RemoteURL string // redis://host:port/db; "" = off
	// TransferBytes, when > 0, is a decode replica's buffer for the blocks it pulls from
	// prefill replicas (kvtier.Transfer, PutTransfer): read before every tier below, never
	// written down to, dropped least recently used past this many bytes.
	TransferBytes int64
	// Remote is the remote store's settings beyond its URL (call timeout, breaker, TTL,
	// password, CA); zero fields take redis.DefaultConfig's, and IdentityDigest is always
	// Identity. serve sets the call timeout and the credentials; tests shorten the breaker's
	// cool-down.
	Remote redis.Config
	// Keys, when set (--tier-key-file), sign every record written to the disk and remote
	// tiers, and a record read from them that its MAC does not authenticate is discarded as
	// forged (tier.Keyring). The host tier's records never leave the process: read unchecked.
	Keys      *tier.Keyring
	Admission Admission
	// RemoteWrite is when the remote tier is written (`--remote-write`; see WritePolicy).
	// Default WriteSelective. Host and disk are written back.
	RemoteWrite WritePolicy
	// MaxOffloadTokens caps the prefix depth offloaded at all (`--max-offload-tokens`): a
	// block that ends past this many tokens from the prompt's start is never written down,
	// through or back. 0 = no cap. A request's own max_offload_tokens (engine.Request) caps
	// further, through the block events' NoOffload.
	MaxOffloadTokens int

	// FetchTimeout bounds one prefetch: lookup, reads and verification across every tier.
	// Default 30 s: far above any healthy fetch (the remote tier's own calls time out at
	// 250 ms), it only frees a worker from a store that hangs.
	FetchTimeout time.Duration
	// Fetchers is how many prefetches run at once. Default 64, the engine's default
	// MaxRunning: a queue that long is already a full batch waiting.
	Fetchers int
	// FetchQueue is how many prefetches wait for a fetcher. Default 4096; past it a prefetch
	// answers at once with nothing, and the request computes its prefix.
	FetchQueue int
	// WriteQueueBlocks is each tier's write-back queue, in blocks (`--tier-queue-blocks`;
	// WriterConfig.QueueLen, default 256). Writers is how many goroutines write each tier
	// (`--tier-writers`; WriterConfig.Workers, default 1). 0: the default.
	WriteQueueBlocks, Writers int
	// Events, when set, receives Stored and Removed for the blocks the tiers hold (the
	// kv-events publisher's Publish; see events.go). Called from the writer's and the
	// reconciler's goroutines: it must be safe for concurrent use and never block.
	Events func(...kvevents.Event)

	// Set by the caller from the model, not from flags.
	Identity [32]byte       // identity.Descriptor digest
	Layout   kvcache.Layout // shape of every block
	// StateBytes, for a hybrid model, is the size of one block's recurrent-state checkpoint
	// as the engine encodes it (model.State.AppendBinary); 0 for models without state. With
	// it, a record is complete only with its checkpoint, and a restored prefix ends at the
	// last block that has one (FetcherConfig.NeedState).
	StateBytes int
	// AttendCost is the model's attention work per earlier position as a fraction of its
	// per-token work (model.Config.AttendCost), for the cost model (CostConfig.AttendCost).
	AttendCost float64
	// StateEvery is the engine's checkpoint interval in blocks (FetcherConfig.StateEvery).
	StateEvery int
}

// DefaultConfig returns the defaults behind `stockpot serve`: every tier off.
func DefaultConfig() Config {
	return Config{DiskBytes: disk.DefaultConfig().CapacityBytes, FetchTimeout: 30 * time.Second, Fetchers: 64, FetchQueue: 4096}
}

// Enabled reports whether cfg turns on any tier.
func (c Config) Enabled() bool {
	return c.HostBytes > 0 || c.DiskDir != "" || c.RemoteURL != "" || c.TransferBytes > 0
}

func (c Config) validate() (Config, error) {
	d := DefaultConfig()
	if c.DiskBytes == 0 {
		c.DiskBytes = d.DiskBytes
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = d.FetchTimeout
	}
	if c.Fetchers == 0 {
		c.Fetchers = d.Fetchers
	}
	if c.FetchQueue == 0 {
		c.FetchQueue = d.FetchQueue
	}
	switch {
	case !c.Enabled():
		return c, errors.New("offload: no tier configured")
	case int(c.RemoteWrite) >= len(writePolicyNames):
		return c, fmt.Errorf("offload: %v", c.RemoteWrite)
	case c.MaxOffloadTokens < 0:
		return c, fmt.Errorf("offload: max offload tokens %d < 0", c.MaxOffloadTokens)
	case c.StateBytes < 0:
		return c, fmt.Errorf("offload: state bytes %d < 0", c.StateBytes)
	case c.HostBytes < 0 || c.TransferBytes < 0:
		return c, fmt.Errorf("offload: host tier budget %d and transfer buffer %d must not be negative", c.HostBytes, c.TransferBytes)
	case c.FetchTimeout < 0 || c.Fetchers < 0 || c.FetchQueue < 0:
		return c, fmt.Errorf("offload: fetch timeout %v, fetchers %d and queue %d must not be negative", c.FetchTimeout, c.Fetchers, c.FetchQueue)
	case c.WriteQueueBlocks < 0 || c.Writers < 0:
		return c, fmt.Errorf("offload: write queue %d blocks and %d writers must not be negative", c.WriteQueueBlocks, c.Writers)
	}
	return c, nil
}

// Tiers is the wired lower tiers of one engine: the stores, fastest first; write-back of
// evicted blocks (BlockEvents) and of the whole pool at shutdown (FlushBlock); restore of
// queued requests' prefixes (it is the engine.Restorer); and their metrics.
type Tiers struct {
	cfg      Config
	tiers    []TierStore
	transfer *TierStore     // the decode role's pulled blocks (Config.TransferBytes); nil without
	closers  []func() error // stores that hold resources, in open order
	metrics  *Metrics
	writer   *Writer
	fetcher  *Fetcher
	restorer *restorer
	pins     *pinWriter
	sweeper  chan struct{} // closed by Close: stops the pin sweeper
	events   *tierEvents   // nil without Config.Events
}

// PinSweepEvery is how often the pin sweeper ends expired pins in the stores that keep them
// (host, disk): every store operation sweeps first, so this only brings an idle store's
// Stats, and the disk's pin records, up to date.
const PinSweepEvery = 30 * time.Second

// sweep ends expired pins in every store with a Sweep method, each PinSweepEvery, until
// stop is closed.
func sweep(tiers []TierStore, stop <-chan struct{}) {
	tk := time.NewTicker(PinSweepEvery)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			for _, tr := range tiers {
				if sw, ok := tr.Store.(interface{ Sweep() int }); ok {
					sw.Sweep()
				}
			}
		}
	}
}

var (
	_ engine.Restorer         = (*Tiers)(nil)
	_ engine.IntoRestorer     = (*Tiers)(nil)
	_ engine.ProgressRestorer = (*Tiers)(nil)
)

// Open opens the configured stores (host, disk, remote, in that order), registers the offload
// metrics with reg, and starts the writer and the fetchers. On error nothing stays open.
func Open(cfg Config, reg prometheus.Registerer) (*Tiers, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	t := &Tiers{cfg: cfg}
	fail := func(err error) (*Tiers, error) {
		t.Close()
		return nil, err
	}
	if cfg.HostBytes > 0 {
		s, err := hostmem.New(hostmem.Config{CapacityBytes: cfg.HostBytes})
		if err != nil {
			return fail(fmt.Errorf("host tier: %w", err))
		}
		t.tiers = append(t.tiers, TierStore{Tier: kvtier.Host, Store: s})
	}
	if cfg.TransferBytes > 0 {
		s, err := hostmem.New(hostmem.Config{CapacityBytes: cfg.TransferBytes})
		if err != nil {
			return fail(fmt.Errorf("transfer buffer: %w", err))
		}
		t.transfer = &TierStore{Tier: kvtier.Transfer, Store: s}
	}
	if cfg.DiskDir != "" {
		s, err := disk.Open(disk.Config{Dir: cfg.DiskDir, CapacityBytes: cfg.DiskBytes, IdentityDigest: cfg.Identity})
		if err != nil {
			return fail(fmt.Errorf("disk tier: %w", err))
		}
		t.tiers = append(t.tiers, TierStore{Tier: kvtier.Disk, Store: s})
		t.closers = append(t.closers, s.Close)
		if reg != nil {
			// Its start-up drops (stockpot_kv_disk_startup_dropped_total{reason}).
			if err := reg.Register(s); err != nil {
				if _, dup := err.(prometheus.AlreadyRegisteredError); !dup {
					return fail(fmt.Errorf("disk tier metrics: %w", err))
				}
			}
		}
	}
	if cfg.RemoteURL != "" {
		rcfg := cfg.Remote // zero fields: the defaults (redis validates)
		rcfg.IdentityDigest = cfg.Identity
		s, err := redis.Open(cfg.RemoteURL, rcfg)
		if err != nil {
			return fail(fmt.Errorf("remote tier: %w", err))
		}
		t.tiers = append(t.tiers, TierStore{Tier: kvtier.Remote, Store: s})
		t.closers = append(t.closers, s.Close)
		if reg != nil {
			// Its breaker counters (stockpot_kv_remote_breaker_*): per master on a cluster.
			if err := reg.Register(s); err != nil {
				if _, dup := err.(prometheus.AlreadyRegisteredError); !dup {
					return fail(fmt.Errorf("remote tier metrics: %w", err))
				}
			}
		}
	}
	if err := t.start(reg); err != nil {
		return fail(err)
	}
	return t, nil
}

// start registers the metrics with reg and starts the writer, the fetchers and the pin
// writer over t.tiers (opened by Open, or given by a test).
func (t *Tiers) start(reg prometheus.Registerer) error {
	cfg := t.cfg
	var err error
	if t.metrics, err = NewMetrics(reg); err != nil {
		return err
	}
	wcfg := DefaultWriterConfig()
	wcfg.Identity, wcfg.Layout, wcfg.Admission, wcfg.Remote = cfg.Identity, cfg.Layout, cfg.Admission, cfg.RemoteWrite
	wcfg.QueueLen, wcfg.Workers = cfg.WriteQueueBlocks, cfg.Writers // 0: the writer's defaults
	if slices.ContainsFunc(t.tiers, func(ts TierStore) bool { return ts.Tier != kvtier.Host }) {
		wcfg.Keys = cfg.Keys // with the host tier alone nothing leaves the process: nothing to sign
	}
	if t.events = newTierEvents(cfg.Events, t.tiers); t.events != nil {
		wcfg.OnPut = t.events.put
	}
	if t.writer, err = NewWriter(wcfg, t.tiers, t.metrics); err != nil {
		return err
	}
	if err = reg.Register(queueCollector{t.writer}); err != nil {
		return err
	}
	fcfg := DefaultFetcherConfig()
	fcfg.Identity, fcfg.Layout, fcfg.Keys = cfg.Identity, cfg.Layout, cfg.Keys
	fcfg.NeedState, fcfg.StateBytes = cfg.StateBytes > 0, cfg.StateBytes
	fcfg.Cost.AttendCost = cfg.AttendCost
	fcfg.StateEvery = cfg.StateEvery
	read := t.tiers
	if t.transfer != nil {
		read = append([]TierStore{*t.transfer}, t.tiers...) // pulled blocks first
	}
	if t.fetcher, err = NewFetcher(fcfg, read, t.metrics); err != nil {
		return err
	}
	if len(t.tiers) > 1 && t.tiers[0].Tier == kvtier.Host {
		t.fetcher.SetPromote(t.writer.Promote) // promote.go
	}
	if t.events != nil {
		t.fetcher.SetRestored(t.events.adopt) // events.go: a restored remote block is announced
	}
	t.restorer = newRestorer(t.fetcher, cfg)
	if err = reg.Register(queueLimits{t.writer, t.restorer}); err != nil { // queues.go
		return err
	}
	t.pins = newPinWriter(cfg.Identity, cfg.Layout, t.tiers, t.metrics, wcfg.PutTimeout)
	t.pins.stateBytes, t.pins.keys = cfg.StateBytes, wcfg.Keys
	if t.events != nil {
		t.pins.onPut = t.events.put // before any job: jobs come from the engine, after Hook
	}
	t.sweeper = make(chan struct{})
	go sweep(t.tiers, t.sweeper)
	t.events.start()
	return nil
}

// Hook wires t into an engine's config: t restores queued prefixes (Restorer), and is the
// engine's Hooks (block events to its write-back, pin events to the tiers' pins, measured
// forward steps to its cost model, the engine's own discards and restore stalls to its
// metrics; see the methods below); the pins the persistent tiers kept across a restart
// become the engine's KnownPins (see pins.go). A caller that adds hooks of its own (serve's
// event publisher) sets cfg.Hooks after Hook to one that calls t on.
func (t *Tiers) Hook(cfg *engine.Config) {
	cfg.Restorer = t
	cfg.Hooks = t
	cfg.KnownPins = append(cfg.KnownPins, knownPins(t.tiers, time.Now())...)
	if t.reuseEvents() {
		cfg.ReuseEvents = true
	}
}

var _ engine.Hooks = (*Tiers)(nil)

// ForwardStep feeds a measured forward step to the restore-vs-recompute cost model
// (engine.Hooks).
func (t *Tiers) ForwardStep(tokens int, attended int64, d time.Duration) {
	t.fetcher.ObservePrefill(tokens, attended, d)
}

// Discarded counts the blocks the engine itself discarded (engine.Hooks: a hybrid's hits
// past its last checkpoint) in stockpot_kv_blocks_discarded_total.
func (t *Tiers) Discarded(reason string, blocks int) { t.metrics.Discarded(reason, blocks) }

// RestoreStall adds an admission's wait for its prefetch to its metric (engine.Hooks).
func (t *Tiers) RestoreStall(d time.Duration) { t.metrics.RestoreStall(d) }

// BlockEvents is the engine's block-event sink (kv[i] is evs[i]'s K/V, intact during the call,
// state[i] its recurrent-state checkpoint or nil; see engine.Hooks). Never
// blocks. A checkpoint goes into the block's record, under the same checksum. Every block past the offload cap
// (offloadable) is skipped; of the others:
//   - Evicted: write-back to the tiers not written through;
//   - Stored (a commit): write-through (the remote tier unless RemoteWrite is WriteBack) under
//     WriteThrough, and under WriteSelective when its admission needs no reuse (MinHits 0);
//   - Reused: under WriteSelective, write-through at the reuse that brings the block's hits to
//     MinHits (the engine sends these only when reuseEvents asked for them).
func (t *Tiers) BlockEvents(evs []prefix.Event, kv, state [][]byte) {
	for i, ev := range evs {
		var st []byte
		if i < len(state) {
			st = state[i]
		}
		switch t.write(ev) {
		case writeBack:
			t.writer.Enqueue(t.evicted(ev, st), kv[i])
		case writeThrough:
			t.writer.Through(t.evicted(ev, st), kv[i])
		}
	}
}

// WantsBlockData implements engine.BlockDataHooks: the engine encodes a block's checkpoint
// only for the events BlockEvents writes down.
func (t *Tiers) WantsBlockData(ev prefix.Event) bool { return t.write(ev) != writeNone }

// The writes a block event causes (Tiers.write).
const (
	writeNone = iota
	writeBack
	writeThrough
)

// write is what BlockEvents does with ev.
func (t *Tiers) write(ev prefix.Event) int {
	pol, minHits := t.cfg.RemoteWrite, t.cfg.Admission.MinHits
	switch {
	case !t.offloadable(ev):
	case ev.Kind == prefix.Evicted:
		return writeBack
	case ev.Kind == prefix.Stored && ev.Restored:
		// Restored from a tier, not computed: the tiers have it (written when it was
		// computed). Writing it through again would encode every block of a long restore
		// on the engine's goroutine (8 s at 480K tokens) for a queue that drops most of them.
	case ev.Kind == prefix.Stored && (pol == WriteThrough || pol == WriteSelective && minHits == 0):
		return writeThrough
	case ev.Kind == prefix.Reused && pol == WriteSelective && minHits > 0 && ev.Hits == uint32(minHits):
		return writeThrough
	}
	return writeNone
}

// reuseEvents reports whether selective write-through needs the engine's Reused events: a
// remote tier, and an admission that waits for reuses.
func (t *Tiers) reuseEvents() bool {
	return t.cfg.RemoteWrite == WriteSelective && t.cfg.Admission.MinHits > 0 &&
		slices.ContainsFunc(t.tiers, func(tr TierStore) bool { return tr.Tier == kvtier.Remote })
}

// offloadable reports whether a block may be written down at all: within the server's cap
// (Config.MaxOffloadTokens) and not beyond a request's (the event's NoOffload).
func (t *Tiers) offloadable(ev prefix.Event) bool {
	if ev.Kind != prefix.Stored && ev.Kind != prefix.Evicted && ev.Kind != prefix.Reused {
		return false
	}
	if ev.NoOffload {
		return false
	}
	return t.cfg.MaxOffloadTokens == 0 || int(ev.Depth+1)*t.cfg.Layout.BlockSize <= t.cfg.MaxOffloadTokens
}

// PinEvents is the engine's pin-event sink (engine.Hooks): the pins go down the
// tiers that are Pinners, off the engine's goroutine. Never blocks.
func (t *Tiers) PinEvents(evs []engine.PinEvent, kv [][]byte) { t.pins.events(evs, kv) }

// PinStats returns the pin writer's counters.
func (t *Tiers) PinStats() PinStats { return t.pins.stats() }

// FlushBlock writes one block of the working pool back at shutdown (engine.FlushCached's fn):
// it waits for queue space rather than drop, since no request waits on the caller then. A
// block pinned in the pool is written pinned, with its TTL (a write-back is a use: the
// store's expiry restarts from now), so the pin survives the restart.
//
// A block past the offload cap is not written, unless it is pinned: a pin asks for the block
// to be kept, and the pin writer has already written it to the tiers that keep pins.
func (t *Tiers) FlushBlock(ev prefix.Event, kv, state []byte) {
	e := t.evicted(ev, state)
	e.PinTTL = t.pins.pinTTL(ev.Hash, time.Now())
	if e.PinTTL <= 0 && !t.offloadable(ev) {
		return
	}
	t.writer.EnqueueWait(e, kv)
}

// evicted is the writer's view of a block event and its checkpoint (state). Without recurrent
// state (Config.StateBytes 0) every block is complete; a hybrid's is complete when it carries
// a checkpoint of the right size, and one without is written as K/V only.
func (t *Tiers) evicted(ev prefix.Event, state []byte) Evicted {
	e := Evicted{Root: ev.Root, Hash: ev.Hash, Parent: ev.Parent, Tokens: ev.Tokens, Hits: int(ev.Hits),
		PrefixTokens: int(ev.Depth+1) * t.cfg.Layout.BlockSize, StateComplete: t.cfg.StateBytes == 0, Owner: ev.Owner}
	if t.cfg.StateBytes > 0 && len(state) == t.cfg.StateBytes {
		e.Aux, e.StateComplete = [][]byte{state}, true
	}
	return e

}

// SetOwnerLimit gives owner (a tenant's number, tenant.Tenant.Owner) a byte budget in the
// tiers of kind k that keep per-owner budgets (tier.OwnerLimiter: the host tier). It reports
// whether such a tier was found.
func (t *Tiers) SetOwnerLimit(k kvtier.Tier, owner uint16, bytes int64) bool {
	found := false
	for _, st := range t.tiers {
		if st.Tier != k {
			continue
		}
		if ol, ok := st.Store.(tier.OwnerLimiter); ok {
			ol.SetOwnerLimit(owner, bytes)
			found = true
		}
	}
	return found
}

// WriterStats returns the writer's counters (write-back and write-through, per tier).
func (t *Tiers) WriterStats() WriterStats { return t.writer.Stats() }

// Stats returns the tiers' rows of the stockpot_kv_cache_* metrics (server.Config.TierStats).
func (t *Tiers) Stats() []kvtier.Stat { return TierStats(t.tiers) }

// Close stops the fetchers (in-flight prefetches are canceled and answered empty), writes
// what is queued, and closes the stores. Safe on a partly opened Tiers, and more than once.
func (t *Tiers) Close() {
	if t.restorer != nil {
		t.restorer.close()
	}
	if t.sweeper != nil {
		close(t.sweeper)
		t.sweeper = nil
	}
	if t.pins != nil {
		t.pins.close() // before the writer and the stores: its last Puts go to the stores
	}
	if t.writer != nil {
		t.writer.Close()
	}
	if t.events != nil {
		t.events.close()
		t.events = nil
	}
	for _, c := range t.closers {
		_ = c()
	}
	t.closers = nil
}

// PutTransfer keeps items (encoded records a decode replica pulled from a prefill replica,
// keyed by root and hash) in the transfer buffer, where the next prefetch of their prompt
// finds them before any tier, verifies them as it verifies every record, and restores them
// as kvtier.Transfer. It fails without a buffer (Config.TransferBytes).
func (t *Tiers) PutTransfer(ctx context.Context, items []tier.Item) error {
	if t.transfer == nil {
		return errors.New("offload: no transfer buffer (TransferBytes is 0)")
	}
	return t.transfer.Store.Put(ctx, items)
}

// DropTransfer forgets pulled blocks once their request no longer needs them.
func (t *Tiers) DropTransfer(ctx context.Context, keys []tier.Key) {
	if t.transfer != nil {
		_ = t.transfer.Store.Delete(ctx, keys)
	}
}

// HasTransfer reports whether t has a transfer buffer.
func (t *Tiers) HasTransfer() bool { return t != nil && t.transfer != nil }
