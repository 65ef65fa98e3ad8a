package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"stockpot/internal/handoff"
	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/pipeline"
	"stockpot/internal/prefix"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"stockpot/internal/bytesize"
	"stockpot/internal/engine"
	"stockpot/internal/identity"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/offload"
	"stockpot/internal/server"
	"stockpot/internal/tier/redis"
	"stockpot/internal/tlsconfig"
	"stockpot/internal/vllmevents"
)

// serveOptions are the resolved flags of `stockpot serve`: the packages' own configs, which
// the flags write into, and what newInstance needs beside them. newInstance fills the fields
// that come from the model (engine.Config's Identity and EOG, server.Config's ModelName,
// Fingerprint, ContextLength and BlockSize, the tier layout) and from the wiring (the cache
// admin, the tier hooks, the tenants' pin and tier quotas from server.Config.Tenants).
type serveOptions struct {
	model    string
	threads  int            // 0 = one per CPU
	engine   engine.Config  // zero fields are the engine's defaults
	server   server.Config  // zero fields are the server's defaults
	tiers    offload.Config // lower tiers; Identity and Layout are filled from the model
	handoff  handoffOptions // prefill/decode disaggregation
	logger   *slog.Logger
	progress io.Writer

	// kvZMQ publishes block events in vLLM's wire format too (--kv-events-zmq; serve_kvzmq.go).
	kvZMQ vllmevents.PublisherConfig

	// calibrate measures the quantized kernels' prefetch distances at start
	// (kernels.CalibratePrefetch) instead of keeping the defaults.
	calibrate bool
}

// instance is a wired server: model, engine and HTTP handlers, not yet listening.
type instance struct {
	file   *loadedFile
	pool   *kernels.Pool
	engine *engine.Engine
	server *server.Server
	reg    *prometheus.Registry
	events *kvevents.Publisher
	tiers  *offload.Tiers // nil without lower tiers

	zmq *zmqPublisher // vLLM-format events (serve_kvzmq.go); nil without --kv-events-zmq
}

// replicaHooks are the engine's hooks in a replica: the working pool's block events are
// published on /v1/kv-events (the router's global index), then every hook goes on to the
// tiers' (offload.Tiers), or without tiers to a hybrid's discard metric, or nowhere.
type replicaHooks struct {
	engine.Hooks
	events *kvevents.Publisher
	buf    []kvevents.Event // reused: the hooks run on the engine's runner goroutine only

	zmq *zmqPublisher // nil without --kv-events-zmq
}

// BlockEvents publishes evs (Publish never blocks), then hands them on.
func (h *replicaHooks) BlockEvents(evs []prefix.Event, kv, state [][]byte) {
	h.buf = kvevents.FromPrefix(h.buf[:0], kvtier.Device, evs)
	h.events.Publish(h.buf...)
	h.zmq.device(evs)
	h.Hooks.BlockEvents(evs, kv, state)
}

// WantsBlockData implements engine.BlockDataHooks: the publishers read no block's bytes,
// so the tiers below decide (without tiers, nothing reads them).
func (h *replicaHooks) WantsBlockData(ev prefix.Event) bool {
	switch in := h.Hooks.(type) {
	case engine.BlockDataHooks:
		return in.WantsBlockData(ev)
	case engine.NopHooks:
		return false
	}
	return true
}

// handler serves the API plus the replica's block events. Event streams are long-lived, so
// they end when drain is done (the server's drain waits for in-flight requests).
func (in *instance) handler(drain context.Context) http.Handler {
	ev := in.events.Handler()
	events := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(drain, cancel)
		defer stop()
		ev.ServeHTTP(w, r.WithContext(ctx))
	})
	// The events name every cached block of every tenant: once any key is configured they
	// take an events or admin key (the router sends its --backend-events-key).
	guarded := in.server.RequireEventsKey(events)
	mux := http.NewServeMux()
	mux.Handle("/v1/kv-events", guarded)
	mux.Handle("/v1/kv-events/", guarded)
	mux.Handle("/", in.server.Handler())
	return mux
}

// Close stops the engine. With lower tiers, every block still in the working pool is written
// down first (write-back at shutdown), so the cache survives a restart. It is also the one
// cleanup of a partly built instance (newInstance's errors): each part is closed if it exists.
func (in *instance) Close() {
	if in.engine != nil {
		if in.tiers != nil {
			in.engine.FlushCached(in.tiers.FlushBlock)
		}
		in.engine.Close()
	}
	if in.tiers != nil {
		in.tiers.Close()
	}
	if in.pool != nil {
		in.pool.Close()
	}
	in.zmq.Close()
}

// newInstance loads the model and wires engine and server. cmdServe and the tests share it.
func newInstance(o serveOptions) (*instance, error) {
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.progress == nil {
		o.progress = io.Discard
	}
	if o.threads <= 0 {
		o.threads = runtime.NumCPU()
	}
	lf, err := openModel(o.model, o.progress)
	if err != nil {
		return nil, err
	}
	in := &instance{file: lf, pool: kernels.NewPool(o.threads), reg: prometheus.NewRegistry()}
	fail := func(err error) (*instance, error) {
		in.Close()
		return nil, err
	}
	m, err := model.Load(lf.file, in.pool)
	if err != nil {
		return fail(err)
	}
	if o.calibrate { // before any request: nothing else runs on the pool yet
		fmt.Fprintf(o.progress, "stockpot: %s\n", kernels.CalibratePrefetch(in.pool, m.Products()))
	}
	reg := in.reg
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ecfg, tenants := o.engine, o.server.Tenants
	blockSize, kvType := ecfg.BlockSize, ecfg.KVType
	desc := identity.Descriptor{Model: lf.fingerprint, Tokenizer: lf.tok.Digest(), KVType: kvType.String(), BlockSize: blockSize,
		StateFormat: lf.cfg.StateFormat()}
	idDigest := desc.Digest()
	ecfg.PinOwnerBytes = tenantPinOwners(tenants) // each tenant's pins: its cache_bytes, and a share of the budget
	ecfg.Identity = idDigest[:]
	ecfg.EOG = lf.tok.EOGs()
	ecfg.Logger = o.logger
	// Block events feed /v1/kv-events (the router's global index). The hook runs on the
	// engine's runner goroutine; Publish never blocks.
	if in.events, err = kvevents.NewPublisher(kvevents.DefaultConfig()); err != nil {
		return fail(err)
	}
	in.events.SetIdentity(hex.EncodeToString(idDigest[:]), blockSize)
	hooks := &replicaHooks{Hooks: engine.NopHooks{}, events: in.events}
	if in.zmq, err = newZMQPublisher(o.kvZMQ, blockSize, o.logger); err != nil {
		return fail(err)
	}
	hooks.zmq = in.zmq
	peers, err := handoff.ParsePeers(o.handoff.peers)
	if err != nil {
		return fail(err)
	}
	if o.handoff.role == handoff.RoleDecode && peers.Len() == 0 {
		return fail(errors.New("serve: --role decode needs at least one --prefill-peer (the only replicas it pulls from)"))
	}
	if o.handoff.role.Decodes() && peers.Len() > 0 {
		o.tiers.TransferBytes = o.handoff.transferBytes // pulled blocks wait there for admission
	}
	if o.tiers.Enabled() {
		tcfg := o.tiers
		tcfg.Identity = idDigest
		tcfg.Layout = kvcache.Layout{BlockSize: blockSize, Layers: lf.cfg.KVLayers(), KVHeads: lf.cfg.KVHeads, HeadDim: lf.cfg.HeadDim, DType: kvType}
		tcfg.StateBytes = lf.cfg.StateEncodedBytes() // a hybrid's checkpoints travel with their blocks
		tcfg.AttendCost = lf.cfg.AttendCost()        // deeper blocks cost more to recompute
		tcfg.StateEvery = ecfg.StateCheckpointBlocks // only every N-th block carries a checkpoint
		tcfg.Events = in.events.Publish              // host, disk and remote blocks on /v1/kv-events too
		// And in vLLM's format with --kv-events-zmq (serve_kvzmq.go).
		tcfg.Events = in.zmq.tee(tcfg.Events)
		if in.tiers, err = offload.Open(tcfg, reg); err != nil {
			return fail(err)
		}
		tenantTierQuotas(in.tiers, tenants)
		// The cost model's figures weigh the router's tiers.
		in.events.SetCosts(in.tiers.Costs)
		in.tiers.Hook(&ecfg) // restore, known pins; and under the publisher: cost model feed, write-back, pins
		hooks.Hooks = in.tiers
	} else if lf.cfg.Hybrid() {
		// No tiers, but the engine discards a hybrid's hits past its last checkpoint: they
		// are counted in stockpot_kv_blocks_discarded_total{reason} all the same.
		m, err := offload.NewMetrics(reg)
		if err != nil {
			return fail(err)
		}
		hooks.Hooks = m.DiscardHooks()
	}
	ecfg.Hooks = hooks
	if in.engine, err = engine.New(m, ecfg); err != nil {
		return fail(err)
	}
	in.events.SetLoad(replicaLoad(in.engine)) // serve_load.go: the load line routers read
	st := in.engine.Stats()
	// The router rounds a replica's match down to its reuse unit: a hybrid resumes only at a
	// state checkpoint (every --state-checkpoint-blocks blocks), any other model at any block.
	if err := in.events.SetReuseBlocks(max(1, st.MinReusableTokens/blockSize)); err != nil {
		return fail(err)
	}
	fmt.Fprintf(o.progress, "stockpot: KV pool %d blocks × %d tokens (%s, %s), prefix cache %v, %d threads\n",
		st.KVBlocksTotal, blockSize, bytesize.Format(int64(st.KVBlocksTotal)*st.KVBlockBytes), kvType, ecfg.PrefixCache, in.pool.Threads())
	if st.StateBytes > 0 {
		fmt.Fprintf(o.progress, "stockpot: hybrid %s: a state checkpoint (%s) every %d blocks, at most %d (%s); a prefix is reusable in units of %d tokens\n",
			lf.cfg.Arch, bytesize.Format(int64(st.StateBytes)), st.MinReusableTokens/blockSize, st.CheckpointBudget,
			bytesize.Format(int64(st.CheckpointBudget)*int64(st.StateBytes)), st.MinReusableTokens)
	}
	if ecfg.PrefixCache && st.MinReusableTokens >= lf.cfg.ContextLength {
		// Never a silent zero: no prompt fits before the first resume point.
		o.logger.Warn("no prompt can reuse the cache: the reusable unit is not shorter than the context",
			"min_reusable_tokens", st.MinReusableTokens, "context_length", lf.cfg.ContextLength)
		fmt.Fprintf(o.progress, "stockpot: warning: prefixes are reusable in units of %d tokens, the context is %d: no prompt can hit the cache (lower --state-checkpoint-blocks or --block-size)\n",
			st.MinReusableTokens, lf.cfg.ContextLength)
	}

	scfg := o.server
	scfg.ModelName = lf.name
	scfg.Fingerprint = lf.fingerprint.String()
	scfg.ContextLength = lf.cfg.ContextLength
	scfg.BlockSize = blockSize
	scfg.CacheAdmin = in.engine
	scfg.Logger = o.logger
	if in.tiers != nil {
		scfg.TierStats = in.tiers.Stats
		scfg.TierDrop = in.tiers.DropRoot
		scfg.TierPins = func() []server.TierPin {
			var out []server.TierPin
			for _, p := range in.tiers.Pins() {
				out = append(out, server.TierPin{Tier: p.Tier, Root: p.Root, Hash: p.Hash, TTL: p.TTL, Expires: p.Expires})
			}
			return out
		}
		scfg.TierUnpin = in.tiers.Unpin
	}
	layout := kvcache.Layout{BlockSize: blockSize, Layers: lf.cfg.KVLayers(), KVHeads: lf.cfg.KVHeads, HeadDim: lf.cfg.HeadDim, DType: kvType}
	scfg.Handoff = o.handoff.wire(in, peers, handoff.Codec{Identity: idDigest, Layout: layout, Keys: o.tiers.Keys, Stateful: in.engine.Stateful()},
		lf.cfg.StateEncodedBytes(), scfg.BackendKey, o.logger)
	if in.server, err = server.New(scfg, in.engine, pipeline.FromTokenizer(lf.tok), reg); err != nil {
		return fail(err)
	}
	in.server.SetCacheProber(in.cacheProber(ecfg, idDigest)) // POST /v1/cache/probe (serve_probe.go)
	// The TTFT floor's estimate, from a few misses now: it holds from the first request.
	if err := in.server.CalibrateFloor(context.Background()); err != nil {
		return fail(err)
	}
	return in, nil
}

// serveFlags are the flags of `stockpot serve` that are read before they reach a Config
// (sizes, names of kinds, files of keys, certificates and tier secrets). The others write
// straight into serveOptions' configs.
type serveFlags struct {
	kvMemory, kvType, maxBody, reqMemory, grammarMaxBytes, grammarMemory, responsesStore *string
	keyFile, adminKeyFile, eventsKeyFile, dashboardKeyFile, cacheIsolation               *string
	tlsCert, tlsKey, tlsClientCA, hostCache, diskSize, remoteWrite                       *string
	remotePasswordFile, remoteCAFile, prefetch, pinBudget, memLimit                      *string
	role, transferMemory                                                                 *string
	tierKeyFiles                                                                         stringList
	tenants                                                                              tenantFlags
}

// addServeFlags registers serve's flags on fs. Their defaults are o's: the packages'
// DefaultConfig, so a flag cannot drift from the default the package documents and tests.
func addServeFlags(fs *flag.FlagSet, o *serveOptions) *serveFlags {
	ec, sc, tc := &o.engine, &o.server, &o.tiers
	f := &serveFlags{}
	fs.StringVar(&o.model, "model", defaultModel, "GGUF file, or synthetic:PRESET")
	fs.StringVar(&sc.Addr, "addr", sc.Addr, "listen address")
	fs.IntVar(&o.threads, "threads", runtime.NumCPU(), "compute threads")
	fs.BoolVar(&o.calibrate, "calibrate", true, "measure the quantized kernels' prefetch distance on this machine at start (about 0.1-0.5 s for a quantized model; the values never change, only speed); false keeps the defaults")
	fs.IntVar(&ec.BlockSize, "block-size", ec.BlockSize, "tokens per KV block")
	f.kvMemory = fs.String("kv-memory", "auto", "working KV block pool size (e.g. 512MiB), or auto")
	f.kvType = fs.String("kv-type", ec.KVType.String(), "K/V element type: f32, f16 or q8_0 (ggml's block_q8_0, 34 bytes per 32 values; needs a head dim that is a multiple of 32)")
	fs.BoolVar(&ec.PrefixCache, "prefix-cache", ec.PrefixCache, "reuse cached prompt prefixes")
	fs.BoolVar(&ec.Dedup, "prefix-dedup", ec.Dedup, "wait for prefix blocks another request is computing instead of computing them twice")
	fs.IntVar(&ec.MaxBatchTokens, "max-batch-tokens", ec.MaxBatchTokens, "tokens per forward step (prefill chunk + decodes)")
	fs.IntVar(&ec.MaxRunning, "max-running", ec.MaxRunning, "requests running at once")
	fs.IntVar(&sc.MaxPromptTokens, "max-prompt-tokens", 0, "refuse longer prompts (0: context length - 1)")
	addBlendFlags(fs, &sc.Blend) // serve_blend.go
	f.maxBody = fs.String("max-body-bytes", bytesize.Format(sc.MaxBodyBytes), "refuse larger request bodies")
	f.reqMemory = fs.String("request-memory", bytesize.Format(sc.RequestMemoryBytes), "budget for request bodies being read and parsed: each reserves 32x its length + 64KiB (its copies, tokens and tokenizer buffers) before it is read, and waits up to --read-timeout (then 503) while others hold it; at least one --max-body-bytes body's cost")
	fs.Var((*stringList)(&sc.APIKeys), "api-key", "required API key (repeatable)")
	f.keyFile = fs.String("api-key-file", "", "file with one API key per line")
	fs.Var((*stringList)(&sc.AdminKeys), "admin-key", "key for the admin API: /v1/cache, /v1/cache/prewarm and /v1/requests/recent (repeatable); without one it is off (403). Behind a router, include the router's --backend-key")
	f.adminKeyFile = fs.String("admin-key-file", "", "file with admin keys, one per line")
	fs.DurationVar(&sc.ReadTimeout, "read-timeout", sc.ReadTimeout, "longest time to read a request body (slower bodies get a 408); streams are not bounded")
	fs.DurationVar(&sc.IdleTimeout, "idle-timeout", sc.IdleTimeout, "close keep-alive connections idle this long")
	fs.IntVar(&sc.MaxConnections, "max-connections", sc.MaxConnections, "connections held open at once; more wait in the listen backlog")
	fs.IntVar(&sc.MaxConnectionsPerClient, "max-connections-per-client", 0, "connections held open at once from one IP, loopback included (more are answered 429); 0 = an eighth of --max-connections")
	f.grammarMaxBytes = fs.String("grammar-max-bytes", bytesize.Format(pipeline.DefaultGrammarConfig().MaxBytes), "bound on one request's constrained-decoding grammar: its schemas' estimate (refused with a 400 before anything is built) and what its compile may allocate")
	f.grammarMemory = fs.String("grammar-memory", bytesize.Format(pipeline.DefaultGrammarConfig().Memory), "memory for grammars in all: half caches compiled ones, half runs compiles (each up to 2x --grammar-max-bytes; more wait, or get a 429)")
	f.responsesStore = fs.String("responses-store-bytes", bytesize.Format(sc.ResponsesStoreBytes), "memory for the responses kept for /v1/responses' previous_response_id (at most 1024; the least recently used go first; a larger response is not kept); 0 = keep none")
	fs.StringVar(&sc.MetricsKey, "metrics-key", "", "key for /metrics (an admin key also works); without one /metrics is open only while no key of any kind is configured")
	fs.BoolVar(&sc.PublicMetrics, "public-metrics", false, "leave /metrics open even with keys configured (its counters show every tenant's cache hits)")
	fs.Var((*stringList)(&sc.EventsKeys), "events-key", "key for /v1/kv-events and its snapshot (repeatable; the router's --backend-events-key; an admin key also works)")
	f.eventsKeyFile = fs.String("events-key-file", "", "file with events keys, one per line")
	fs.Var((*stringList)(&sc.DashboardKeys), "dashboard-key", "key for /dashboard, /dashboard/events and /dashboard/state (repeatable; also as ?key=; an admin key also works)")
	f.dashboardKeyFile = fs.String("dashboard-key-file", "", "file with dashboard keys, one per line")
	fs.DurationVar(&sc.TTFTFloor, "ttft-floor", 0, "timing safety: a request whose prompt holds blocks its key did not send gets its first token no sooner than max(this, the estimated miss TTFT) and a miss's usage, so a hit on another key's prompt looks like a miss (0: off)")
	f.cacheIsolation = fs.String("cache-isolation", "tenant", "who may reuse whose cached blocks: tenant (every key of a tenant shares its cache) or key (each API key has its own cache inside its tenant's: no key learns what another sent, by any timing)")
	f.tlsCert = fs.String("tls-cert", "", "serve HTTPS with this PEM certificate chain (needs --tls-key)")
	f.tlsKey = fs.String("tls-key", "", "the PEM private key of --tls-cert")
	f.tlsClientCA = fs.String("tls-client-ca", "", "mutual TLS: require client certificates signed by this PEM CA (the router's --backend-tls-cert)")
	f.hostCache = fs.String("host-cache", bytesize.Format(tc.HostBytes), "host RAM tier budget (e.g. 4GiB); 0 = off")
	fs.StringVar(&tc.DiskDir, "disk-cache", tc.DiskDir, "disk tier directory; empty = off")
	f.diskSize = fs.String("disk-cache-size", bytesize.Format(tc.DiskBytes), "disk tier budget")
	fs.StringVar(&tc.RemoteURL, "remote-cache", tc.RemoteURL, "remote tier, redis://host:port/db; empty = off")
	fs.Var(&f.tierKeyFiles, "tier-key-file", "file of keys that sign and check the records of the disk and remote tiers, one a line, hex or base64, 16+ bytes (repeatable); the first key signs, every key verifies (rotation: put the new key first); a record they do not authenticate is discarded as forged")
	f.remotePasswordFile = fs.String("remote-cache-password-file", "", "file holding the remote tier's Redis password (AUTH), in place of one in the --remote-cache URL")
	f.remoteCAFile = fs.String("remote-cache-ca-file", "", "PEM CA that a rediss:// --remote-cache server's certificate must chain to, in place of the system's")
	fs.DurationVar(&tc.Remote.CallTimeout, "remote-call-timeout", redis.DefaultConfig().CallTimeout, "bound on each remote tier call (a batched read or write); a call past it fails, counts toward the breaker, and its blocks are computed instead")
	remoteTTLFlags(fs, &tc.Remote) // --remote-cache-ttl, --remote-cache-ttl-refresh (serve_redis.go)
	fs.IntVar(&tc.Admission.MinHits, "offload-min-hits", tc.Admission.MinHits, "offload only blocks that at least this many requests reused")
	fs.IntVar(&tc.Admission.MinPrefixTokens, "offload-min-prefix-tokens", tc.Admission.MinPrefixTokens, "write back only blocks ending at least this many tokens into their prompt")
	f.remoteWrite = fs.String("remote-write", tc.RemoteWrite.String(), "when the remote tier is written: through (every computed block at once), selective (at once, the blocks that pass --offload-min-*), back (on eviction and shutdown, as host and disk)")
	fs.IntVar(&tc.MaxOffloadTokens, "max-offload-tokens", tc.MaxOffloadTokens, "offload no block ending past this many tokens into its prompt (a request's max_offload_tokens caps further); 0 = no cap")
	f.prefetch = fs.String("prefetch", ec.Prefetch.String(), "queued requests vs their tier prefetch: cost (wait while the cost model finds restoring the rest cheaper than recomputing it, and the restore makes progress), wait, timeout or best-effort")
	fs.DurationVar(&ec.PrefetchMaxWait, "prefetch-timeout", ec.PrefetchMaxWait, "for --prefetch timeout: longest wait before computing instead; for cost: the wait for a prefetch's plan, and the least a restore may go without a block before it counts as stalled")
	tierQueueFlags(fs, tc) // --tier-readers, --tier-prefetch-queue, --tier-writers, --tier-queue-blocks (serve_tiers.go)
	f.pinBudget = fs.String("pin-budget", "auto", "working-pool memory pins (cache_control, prompt_cache_retention) may hold (e.g. 256MiB); auto = half the pool, 0 = no pins")
	fs.IntVar(&ec.StateCheckpointBlocks, "state-checkpoint-blocks", ec.StateCheckpointBlocks, "hybrid models (qwen35, kimi-linear, kimi-k3): keep the recurrent state at the end of every N-th block; a cached prefix is reused only up to a checkpoint, so N blocks are the hit granularity, and each checkpoint's memory comes out of --kv-memory")
	f.memLimit = fs.String("memory-limit", "auto", "soft limit of the Go heap: the collector runs harder near it rather than let the heap reach twice its live size (e.g. 20GiB); auto = 90% of the cgroup's limit (followed as it changes), or on a host without one the smaller of 75% of its memory and 90% of what is available at start, unless GOMEMLIMIT is set; off = none")
	f.tenants = addTenantFlags(fs, true)
	h := &o.handoff
	f.role = fs.String("role", string(handoff.RoleBoth), "prefill/decode disaggregation: both (prefill and decode here), prefill (compute prompts and hand their KV to decode replicas) or decode (pull prompts' KV from --prefill-peer replicas and decode)")
	fs.Var((*stringList)(&h.peers), "prefill-peer", "a prefill replica this decode replica may pull KV from, http://host:port (repeatable); a transfer naming any other address is refused")
	fs.DurationVar(&h.lease, "handoff-lease", handoff.DefaultLease, "how long a prefill replica holds a prompt's blocks for its decode replica")
	f.transferMemory = fs.String("transfer-memory", "1GiB", "a decode replica's buffer for pulled blocks waiting for admission")
	fs.IntVar(&h.streams, "handoff-streams", 4, "streams one pull uses at once")
	addKVZMQFlags(fs, &o.kvZMQ)
	return f
}

// resolve reads the flags that are not a Config field as they stand into o, checking each,
// in the order `stockpot serve` always reported them.
func (f *serveFlags) resolve(o *serveOptions) error {
	ec, sc, tc := &o.engine, &o.server, &o.tiers
	if sc.ReadTimeout <= 0 || sc.IdleTimeout <= 0 || sc.MaxConnections <= 0 {
		return fmt.Errorf("serve: --read-timeout, --idle-timeout and --max-connections must be positive")
	}
	if *f.kvMemory != "auto" {
		n, err := bytesize.Parse(*f.kvMemory)
		if err != nil {
			return fmt.Errorf("--kv-memory: %w", err)
		}
		ec.KVMemory = n
	}
	bodyLimit, err := bytesize.Parse(*f.maxBody)
	if err != nil {
		return fmt.Errorf("--max-body-bytes: %w", err)
	}
	if bodyLimit > 0 {
		sc.MaxBodyBytes = bodyLimit
	}
	if sc.RequestMemoryBytes, err = bytesize.Parse(*f.reqMemory); err != nil || sc.RequestMemoryBytes <= 0 {
		return fmt.Errorf("--request-memory %q: a positive size (e.g. 1GiB)", *f.reqMemory)
	}
	g := &sc.Grammar
	if g.MaxBytes, err = bytesize.Parse(*f.grammarMaxBytes); err != nil || g.MaxBytes <= 0 {
		return fmt.Errorf("--grammar-max-bytes: must be a positive size (%v)", err)
	}
	if g.Memory, err = bytesize.Parse(*f.grammarMemory); err != nil || g.Memory < 2*g.MaxBytes {
		return fmt.Errorf("--grammar-memory: must be a size of at least twice --grammar-max-bytes (%v)", err)
	}
	if sc.ResponsesStoreBytes, err = bytesize.Parse(*f.responsesStore); err != nil {
		return fmt.Errorf("--responses-store-bytes: %w", err)
	}
	if sc.ResponsesStoreBytes == 0 {
		sc.ResponsesStoreBytes = -1 // server.Config: negative keeps none
	}
	if ec.KVType, err = kvcache.ParseDType(*f.kvType); err != nil {
		return fmt.Errorf("--kv-type %q: want f32, f16 or q8_0", *f.kvType)
	}
	if err := f.readKeyFiles(sc); err != nil {
		return err
	}
	if *f.cacheIsolation != "tenant" && *f.cacheIsolation != "key" {
		return fmt.Errorf("serve: --cache-isolation %q: want tenant or key", *f.cacheIsolation)
	}
	sc.KeyIsolation = *f.cacheIsolation == "key"
	if sc.TTFTFloor < 0 {
		return fmt.Errorf("serve: --ttft-floor %v must be >= 0", sc.TTFTFloor)
	}
	if sc.TLS, err = tlsconfig.Server(tlsconfig.ServerFiles{Cert: *f.tlsCert, Key: *f.tlsKey, ClientCA: *f.tlsClientCA}); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if sc.Tenants, sc.BackendKey, err = f.tenants.load(sc.APIKeys); err != nil {
		return err
	}
	if tc.Remote.CallTimeout <= 0 {
		return fmt.Errorf("--remote-call-timeout %v: must be positive", tc.Remote.CallTimeout)
	}
	if err := tierSecurity(tc, f.tierKeyFiles, *f.remotePasswordFile, *f.remoteCAFile, o.logger); err != nil {
		return err
	}
	if tc.RemoteWrite, err = offload.ParseWritePolicy(*f.remoteWrite); err != nil {
		return fmt.Errorf("--remote-write: %w", err)
	}
	if ec.StateCheckpointBlocks < 1 {
		return fmt.Errorf("--state-checkpoint-blocks %d must be at least 1", ec.StateCheckpointBlocks)
	}
	if tc.MaxOffloadTokens < 0 {
		return fmt.Errorf("--max-offload-tokens %d must be >= 0", tc.MaxOffloadTokens)
	}
	if tc.HostBytes, err = bytesize.Parse(*f.hostCache); err != nil {
		return fmt.Errorf("--host-cache: %w", err)
	}
	if tc.DiskBytes, err = bytesize.Parse(*f.diskSize); err != nil {
		return fmt.Errorf("--disk-cache-size: %w", err)
	}
	if ec.PinBudget, err = parsePinBudget(*f.pinBudget); err != nil {
		return err
	}
	if ec.Prefetch, err = engine.ParsePrefetchPolicy(*f.prefetch); err != nil {
		return fmt.Errorf("--prefetch %w", err)
	}
	h := &o.handoff
	if h.role, err = handoff.ParseRole(*f.role); err != nil {
		return fmt.Errorf("--role: %w", err)
	}
	if h.transferBytes, err = bytesize.Parse(*f.transferMemory); err != nil || h.transferBytes <= 0 {
		return fmt.Errorf("--transfer-memory %q: a positive size", *f.transferMemory)
	}
	if h.lease <= 0 || h.streams < 1 {
		return fmt.Errorf("--handoff-lease %v and --handoff-streams %d must be positive", h.lease, h.streams)
	}
	return nil
}

// readKeyFiles adds the keys of the --*-key-file flags to those given one by one.
func (f *serveFlags) readKeyFiles(sc *server.Config) error {
	fileKeys, err := readKeyFile(*f.keyFile)
	if err != nil {
		return fmt.Errorf("--api-key-file: %w", err)
	}
	sc.APIKeys = append(sc.APIKeys, fileKeys...)
	fileAdmin, err := readKeyFile(*f.adminKeyFile)
	if err != nil {
		return fmt.Errorf("--admin-key-file: %w", err)
	}
	sc.AdminKeys = append(sc.AdminKeys, fileAdmin...)
	for _, kf := range []struct {
		flag, path string
		into       *[]string
	}{{"--events-key-file", *f.eventsKeyFile, &sc.EventsKeys}, {"--dashboard-key-file", *f.dashboardKeyFile, &sc.DashboardKeys}} {
		ks, err := readKeyFile(kf.path)
		if err != nil {
			return fmt.Errorf("%s: %w", kf.flag, err)
		}
		*kf.into = append(*kf.into, ks...)
	}
	return nil
}

func cmdServe(args []string) error {
	o := serveOptions{engine: engine.DefaultConfig(), server: server.DefaultConfig(), tiers: offload.DefaultConfig(), progress: os.Stderr}
	fs := newFlagSet("serve")
	f := addServeFlags(fs, &o)
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	memLine, followMem, err := applyMemoryLimit(*f.memLimit)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "stockpot: "+memLine)
	o.logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := f.resolve(&o); err != nil {
		return err
	}
	sc := &o.server
	// Bind before loading the model: the address is taken at once (a port in use fails now,
	// not after seconds of loading, and nobody else can take it meanwhile), and connections
	// made while the model loads wait in the listen backlog until it serves.
	ln, err := net.Listen("tcp", sc.Addr)
	if err != nil {
		return err
	}
	inst, err := newInstance(o)
	if err != nil {
		ln.Close()
		return err
	}
	defer inst.Close()
	srv, lf := inst.server, inst.file
	scheme := "http"
	if sc.TLS != nil {
		scheme = "https"
	}
	fmt.Fprintf(os.Stderr, "stockpot: serving %s on %s://%s (OpenAI API under /v1, metrics at /metrics)\n", lf.name, scheme, ln.Addr())
	if sc.TTFTFloor > 0 && len(sc.APIKeys) == 0 {
		fmt.Fprintln(os.Stderr, "stockpot: --ttft-floor without --api-key: principals are told apart by whatever key clients send")
	}
	if sc.TTFTFloor > 0 && sc.PublicMetrics {
		fmt.Fprintln(os.Stderr, "stockpot: --ttft-floor with --public-metrics: the hit counters on /metrics tell hits the floor hides")
	}
	if len(sc.APIKeys)+len(sc.AdminKeys)+len(sc.EventsKeys) > 0 && len(sc.AdminKeys)+len(sc.EventsKeys) == 0 {
		fmt.Fprintln(os.Stderr, "stockpot: no --events-key or --admin-key: /v1/kv-events answers 403, so a router's kv-aware policy routes without this replica's blocks")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if followMem != nil {
		go followMem(ctx, func(line string) { fmt.Fprintln(os.Stderr, "stockpot: "+line) })
	}
	if err := srv.ServeHandler(ctx, ln, inst.handler(ctx)); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(os.Stderr, "stockpot: drained, bye")
	return nil
}

// parsePinBudget reads --pin-budget into engine.Config.PinBudget: "auto" is 0 (half the
// pool), a size is bytes, and 0 turns pins off (-1).
func parsePinBudget(v string) (int64, error) {
	if v == "auto" {
		return 0, nil
	}
	n, err := bytesize.Parse(v)
	if err != nil {
		return 0, fmt.Errorf("--pin-budget: %w", err)
	}
	if n == 0 {
		return -1, nil
	}
	return n, nil
}
