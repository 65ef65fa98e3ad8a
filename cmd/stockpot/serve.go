package main

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"strings"
	"syscall"
	"time"

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
	"stockpot/internal/tenant"
	"stockpot/internal/tier/redis"
	"stockpot/internal/tlsconfig"
)

// serveOptions are the resolved flags of `stockpot serve`.
type serveOptions struct {
	model                string
	addr                 string
	threads, blockSize   int
	kvBudget             int64
	kvType               kvcache.DType
	prefixCache, dedup   bool
	maxBatch, maxRunning int
	maxPrompt            int
	maxBody              int64
	grammar              server.GrammarConfig
	requestMemory        int64 // server.Config.RequestMemoryBytes (--request-memory)
	keys                 []string
	adminKeys            []string // the cache admin API (--admin-key)
	metricsKey           string
	eventsKeys           []string // the block events (--events-key)
	dashboardKeys        []string // the dashboard (--dashboard-key)
	publicMetrics        bool
	tls                  *tls.Config    // nil: plain HTTP
	ttftFloor            time.Duration  // server.Config.TTFTFloor
	keyIsolation         bool           // server.Config.KeyIsolation (--cache-isolation key)
	tenants              *tenant.Set    // --tenants (nil: keys, if any, are the single tenant)
	backendKey           string         // --backend-key: verifies the router's tenant header
	readTimeout          time.Duration  // request bodies; 0 = server default
	idleTimeout          time.Duration  // keep-alive connections; 0 = server default
	maxConns             int            // 0 = server default
	responsesStoreBytes  int64          // server.Config.ResponsesStoreBytes: 0 = server default, < 0 = none
	maxConnsPerClient    int            // server.Config.MaxConnectionsPerClient: 0 = server default
	tiers                offload.Config // lower tiers; Identity and Layout are filled from the model
	prefetch             engine.PrefetchPolicy
	prefetchMaxWait      time.Duration // 0 = the engine's default
	pinBudget            int64         // engine.Config.PinBudget: 0 = half the pool, < 0 = no pins
	stateEvery           int           // engine.Config.StateCheckpointBlocks: 0 = the engine's default
	logger               *slog.Logger
	progress             io.Writer
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
	reg := in.reg
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	desc := identity.Descriptor{Model: lf.fingerprint, Tokenizer: lf.tok.Digest(), KVType: o.kvType.String(), BlockSize: o.blockSize,
		StateFormat: lf.cfg.StateFormat()}
	idDigest := desc.Digest()
	ecfg := engine.DefaultConfig()
	ecfg.BlockSize = o.blockSize
	ecfg.KVMemory = o.kvBudget
	ecfg.KVType = o.kvType
	ecfg.PrefixCache = o.prefixCache
	ecfg.Dedup = o.dedup
	ecfg.MaxBatchTokens = o.maxBatch
	ecfg.MaxRunning = o.maxRunning
	ecfg.Prefetch = o.prefetch
	ecfg.PrefetchMaxWait = o.prefetchMaxWait
	ecfg.PinBudget = o.pinBudget
	ecfg.PinOwnerBytes = tenantPinOwners(o.tenants) // each tenant's pins: its cache_bytes, and a share of the budget
	ecfg.StateCheckpointBlocks = o.stateEvery
	ecfg.Identity = idDigest[:]
	ecfg.EOG = lf.tok.EOGs()
	ecfg.Logger = o.logger
	// Block events feed /v1/kv-events (the router's global index). The hook runs on the
	// engine's runner goroutine; Publish never blocks.
	if in.events, err = kvevents.NewPublisher(kvevents.DefaultConfig()); err != nil {
		return fail(err)
	}
	in.events.SetIdentity(hex.EncodeToString(idDigest[:]), o.blockSize)
	var evBuf []kvevents.Event
	ecfg.OnBlockEvents = func(evs []prefix.Event, _, _ [][]byte) {
		evBuf = kvevents.FromPrefix(evBuf[:0], kvtier.Device, evs)
		in.events.Publish(evBuf...)
	}
	if o.tiers.Enabled() {
		tcfg := o.tiers
		tcfg.Identity = idDigest
		tcfg.Layout = kvcache.Layout{BlockSize: o.blockSize, Layers: lf.cfg.KVLayers(), KVHeads: lf.cfg.KVHeads, HeadDim: lf.cfg.HeadDim, DType: o.kvType}
		tcfg.StateBytes = lf.cfg.StateEncodedBytes() // a hybrid's checkpoints travel with their blocks
		tcfg.AttendCost = lf.cfg.AttendCost()        // deeper blocks cost more to recompute
		tcfg.StateEvery = ecfg.StateCheckpointBlocks // only every N-th block carries a checkpoint
		tcfg.Events = in.events.Publish              // host, disk and remote blocks on /v1/kv-events too
		if in.tiers, err = offload.Open(tcfg, reg); err != nil {
			return fail(err)
		}
		tenantTierQuotas(in.tiers, o.tenants)
		// The cost model's figures weigh the router's tiers.
		in.events.SetCosts(in.tiers.Costs)
		in.tiers.Hook(&ecfg) // restore, cost model feed, and write-back after the publisher
	} else if lf.cfg.Hybrid() {
		// No tiers, but the engine discards a hybrid's hits past its last checkpoint: they
		// are counted in stockpot_kv_blocks_discarded_total{reason} all the same.
		m, err := offload.NewMetrics(reg)
		if err != nil {
			return fail(err)
		}
		ecfg.OnDiscard = m.Discarded
	}
	if in.engine, err = engine.New(m, ecfg); err != nil {
		return fail(err)
	}
	st := in.engine.Stats()
	// The router rounds a replica's match down to its reuse unit: a hybrid resumes only at a
	// state checkpoint (every --state-checkpoint-blocks blocks), any other model at any block.
	if err := in.events.SetReuseBlocks(max(1, st.MinReusableTokens/o.blockSize)); err != nil {
		return fail(err)
	}
	fmt.Fprintf(o.progress, "stockpot: KV pool %d blocks × %d tokens (%s, %s), prefix cache %v, %d threads\n",
		st.KVBlocksTotal, o.blockSize, bytesize.Format(int64(st.KVBlocksTotal)*st.KVBlockBytes), o.kvType, o.prefixCache, in.pool.Threads())
	if st.StateBytes > 0 {
		fmt.Fprintf(o.progress, "stockpot: hybrid %s: a state checkpoint (%s) every %d blocks, at most %d (%s); a prefix is reusable in units of %d tokens\n",
			lf.cfg.Arch, bytesize.Format(int64(st.StateBytes)), st.MinReusableTokens/o.blockSize, st.CheckpointBudget,
			bytesize.Format(int64(st.CheckpointBudget)*int64(st.StateBytes)), st.MinReusableTokens)
	}
	if o.prefixCache && st.MinReusableTokens >= lf.cfg.ContextLength {
		// Never a silent zero: no prompt fits before the first resume point.
		o.logger.Warn("no prompt can reuse the cache: the reusable unit is not shorter than the context",
			"min_reusable_tokens", st.MinReusableTokens, "context_length", lf.cfg.ContextLength)
		fmt.Fprintf(o.progress, "stockpot: warning: prefixes are reusable in units of %d tokens, the context is %d: no prompt can hit the cache (lower --state-checkpoint-blocks or --block-size)\n",
			st.MinReusableTokens, lf.cfg.ContextLength)
	}

	scfg := server.DefaultConfig()
	scfg.Addr = o.addr
	scfg.ModelName = lf.name
	scfg.Fingerprint = lf.fingerprint.String()
	scfg.ContextLength = lf.cfg.ContextLength
	scfg.BlockSize = o.blockSize
	scfg.MaxPromptTokens = o.maxPrompt
	if o.maxBody > 0 {
		scfg.MaxBodyBytes = o.maxBody
	}
	scfg.RequestMemoryBytes = o.requestMemory
	scfg.APIKeys = o.keys
	scfg.Tenants, scfg.BackendKey = o.tenants, o.backendKey
	scfg.MetricsKey = o.metricsKey
	scfg.EventsKeys, scfg.DashboardKeys, scfg.PublicMetrics = o.eventsKeys, o.dashboardKeys, o.publicMetrics
	scfg.TLS = o.tls
	scfg.TTFTFloor = o.ttftFloor
	scfg.KeyIsolation = o.keyIsolation
	scfg.AdminKeys, scfg.CacheAdmin = o.adminKeys, in.engine
	scfg.ReadTimeout = o.readTimeout
	scfg.IdleTimeout = o.idleTimeout
	scfg.MaxConnections = o.maxConns
	scfg.ResponsesStoreBytes = o.responsesStoreBytes
	scfg.Grammar = o.grammar
	scfg.MaxConnectionsPerClient = o.maxConnsPerClient
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
	if in.server, err = server.New(scfg, in.engine, server.FromTokenizer(lf.tok), reg); err != nil {
		return fail(err)
	}
	// The TTFT floor's estimate, from a few misses now: it holds from the first request.
	if err := in.server.CalibrateFloor(context.Background()); err != nil {
		return fail(err)
	}
	return in, nil
}

func cmdServe(args []string) error {
	// Defaults come from the packages' DefaultConfig, so a flag cannot drift from the default
	// the package documents and tests.
	ed, sd, td := engine.DefaultConfig(), server.DefaultConfig(), offload.DefaultConfig()
	fs := newFlagSet("serve")
	modelSpec := fs.String("model", defaultModel, "GGUF file, or synthetic:PRESET")
	addr := fs.String("addr", sd.Addr, "listen address")
	threads := fs.Int("threads", runtime.NumCPU(), "compute threads")
	blockSize := fs.Int("block-size", ed.BlockSize, "tokens per KV block")
	kvMemory := fs.String("kv-memory", "auto", "working KV block pool size (e.g. 512MiB), or auto")
	kvType := fs.String("kv-type", ed.KVType.String(), "K/V element type: f32, f16 or q8_0 (ggml's block_q8_0, 34 bytes per 32 values; needs a head dim that is a multiple of 32)")
	prefixCache := fs.Bool("prefix-cache", ed.PrefixCache, "reuse cached prompt prefixes")
	dedup := fs.Bool("prefix-dedup", ed.Dedup, "wait for prefix blocks another request is computing instead of computing them twice")
	maxBatch := fs.Int("max-batch-tokens", ed.MaxBatchTokens, "tokens per forward step (prefill chunk + decodes)")
	maxRunning := fs.Int("max-running", ed.MaxRunning, "requests running at once")
	maxPrompt := fs.Int("max-prompt-tokens", 0, "refuse longer prompts (0: context length - 1)")
	maxBody := fs.String("max-body-bytes", bytesize.Format(sd.MaxBodyBytes), "refuse larger request bodies")
	reqMemory := fs.String("request-memory", bytesize.Format(sd.RequestMemoryBytes), "budget for request bodies being read and parsed: each reserves 32x its length + 64KiB (its copies, tokens and tokenizer buffers) before it is read, and waits up to --read-timeout (then 503) while others hold it; at least one --max-body-bytes body's cost")
	var keys stringList
	fs.Var(&keys, "api-key", "required API key (repeatable)")
	keyFile := fs.String("api-key-file", "", "file with one API key per line")
	var adminKeys stringList
	fs.Var(&adminKeys, "admin-key", "key for the admin API: /v1/cache, /v1/cache/prewarm and /v1/requests/recent (repeatable); without one it is off (403). Behind a router, include the router's --backend-key")
	adminKeyFile := fs.String("admin-key-file", "", "file with admin keys, one per line")
	readTimeout := fs.Duration("read-timeout", sd.ReadTimeout, "longest time to read a request body (slower bodies get a 408); streams are not bounded")
	idleTimeout := fs.Duration("idle-timeout", sd.IdleTimeout, "close keep-alive connections idle this long")
	maxConns := fs.Int("max-connections", sd.MaxConnections, "connections held open at once; more wait in the listen backlog")
	maxConnsPerClient := fs.Int("max-connections-per-client", 0, "connections held open at once from one IP, loopback included (more are answered 429); 0 = an eighth of --max-connections")
	grammarMaxBytes := fs.String("grammar-max-bytes", bytesize.Format(server.DefaultGrammarConfig().MaxBytes), "bound on one request's constrained-decoding grammar: its schemas' estimate (refused with a 400 before anything is built) and what its compile may allocate")
	grammarMemory := fs.String("grammar-memory", bytesize.Format(server.DefaultGrammarConfig().Memory), "memory for grammars in all: half caches compiled ones, half runs compiles (each up to 2x --grammar-max-bytes; more wait, or get a 429)")
	responsesStore := fs.String("responses-store-bytes", bytesize.Format(sd.ResponsesStoreBytes), "memory for the responses kept for /v1/responses' previous_response_id (at most 1024; the least recently used go first; a larger response is not kept); 0 = keep none")
	metricsKey := fs.String("metrics-key", "", "key for /metrics (an admin key also works); without one /metrics is open only while no key of any kind is configured")
	publicMetrics := fs.Bool("public-metrics", false, "leave /metrics open even with keys configured (its counters show every tenant's cache hits)")
	var eventsKeys, dashboardKeys stringList
	fs.Var(&eventsKeys, "events-key", "key for /v1/kv-events and its snapshot (repeatable; the router's --backend-events-key; an admin key also works)")
	eventsKeyFile := fs.String("events-key-file", "", "file with events keys, one per line")
	fs.Var(&dashboardKeys, "dashboard-key", "key for /dashboard, /dashboard/events and /dashboard/state (repeatable; also as ?key=; an admin key also works)")
	dashboardKeyFile := fs.String("dashboard-key-file", "", "file with dashboard keys, one per line")
	ttftFloor := fs.Duration("ttft-floor", 0, "timing safety: a request whose prompt holds blocks its key did not send gets its first token no sooner than max(this, the estimated miss TTFT) and a miss's usage, so a hit on another key's prompt looks like a miss (0: off)")
	cacheIsolation := fs.String("cache-isolation", "tenant", "who may reuse whose cached blocks: tenant (every key of a tenant shares its cache) or key (each API key has its own cache inside its tenant's: no key learns what another sent, by any timing)")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate chain (needs --tls-key)")
	tlsKey := fs.String("tls-key", "", "the PEM private key of --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "mutual TLS: require client certificates signed by this PEM CA (the router's --backend-tls-cert)")
	hostCache := fs.String("host-cache", bytesize.Format(td.HostBytes), "host RAM tier budget (e.g. 4GiB); 0 = off")
	diskCache := fs.String("disk-cache", td.DiskDir, "disk tier directory; empty = off")
	diskSize := fs.String("disk-cache-size", bytesize.Format(td.DiskBytes), "disk tier budget")
	remoteCache := fs.String("remote-cache", td.RemoteURL, "remote tier, redis://host:port/db; empty = off")
	var tierKeyFiles stringList
	fs.Var(&tierKeyFiles, "tier-key-file", "file of keys that sign and check the records of the disk and remote tiers, one a line, hex or base64, 16+ bytes (repeatable); the first key signs, every key verifies (rotation: put the new key first); a record they do not authenticate is discarded as forged")
	remotePasswordFile := fs.String("remote-cache-password-file", "", "file holding the remote tier's Redis password (AUTH), in place of one in the --remote-cache URL")
	remoteCAFile := fs.String("remote-cache-ca-file", "", "PEM CA that a rediss:// --remote-cache server's certificate must chain to, in place of the system's")
	remoteTimeout := fs.Duration("remote-call-timeout", redis.DefaultConfig().CallTimeout, "bound on each remote tier call (a batched read or write); a call past it fails, counts toward the breaker, and its blocks are computed instead")
	minHits := fs.Int("offload-min-hits", td.Admission.MinHits, "offload only blocks that at least this many requests reused")
	minPrefix := fs.Int("offload-min-prefix-tokens", td.Admission.MinPrefixTokens, "write back only blocks ending at least this many tokens into their prompt")
	remoteWrite := fs.String("remote-write", td.RemoteWrite.String(), "when the remote tier is written: through (every computed block at once), selective (at once, the blocks that pass --offload-min-*), back (on eviction and shutdown, as host and disk)")
	maxOffload := fs.Int("max-offload-tokens", td.MaxOffloadTokens, "offload no block ending past this many tokens into its prompt (a request's max_offload_tokens caps further); 0 = no cap")
	prefetch := fs.String("prefetch", ed.Prefetch.String(), "queued requests vs their tier prefetch: wait, timeout or best-effort")
	prefetchTimeout := fs.Duration("prefetch-timeout", ed.PrefetchMaxWait, "for --prefetch timeout: longest wait before computing instead")
	pinBudget := fs.String("pin-budget", "auto", "working-pool memory pins (cache_control, prompt_cache_retention) may hold (e.g. 256MiB); auto = half the pool, 0 = no pins")
	stateEvery := fs.Int("state-checkpoint-blocks", ed.StateCheckpointBlocks, "hybrid models (qwen35, kimi-linear, kimi-k3): keep the recurrent state at the end of every N-th block; a cached prefix is reused only up to a checkpoint, so N blocks are the hit granularity, and each checkpoint's memory comes out of --kv-memory")
	memLimit := fs.String("memory-limit", "auto", "soft limit of the Go heap: the collector runs harder near it rather than let the heap reach twice its live size (e.g. 20GiB); auto = 90% of the cgroup's limit (followed as it changes), or on a host without one the smaller of 75% of its memory and 90% of what is available at start, unless GOMEMLIMIT is set; off = none")
	tenantOpts := addTenantFlags(fs, true)
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected arguments %q", fs.Args())
	}
	memLine, followMem, err := applyMemoryLimit(*memLimit)
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "stockpot: "+memLine)
	if *readTimeout <= 0 || *idleTimeout <= 0 || *maxConns <= 0 {
		return fmt.Errorf("serve: --read-timeout, --idle-timeout and --max-connections must be positive")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var kvBudget int64
	if *kvMemory != "auto" {
		n, err := bytesize.Parse(*kvMemory)
		if err != nil {
			return fmt.Errorf("--kv-memory: %w", err)
		}
		kvBudget = n
	}
	bodyLimit, err := bytesize.Parse(*maxBody)
	if err != nil {
		return fmt.Errorf("--max-body-bytes: %w", err)
	}
	reqMemBytes, err := bytesize.Parse(*reqMemory)
	if err != nil || reqMemBytes <= 0 {
		return fmt.Errorf("--request-memory %q: a positive size (e.g. 1GiB)", *reqMemory)
	}
	var gcfg server.GrammarConfig
	if gcfg.MaxBytes, err = bytesize.Parse(*grammarMaxBytes); err != nil || gcfg.MaxBytes <= 0 {
		return fmt.Errorf("--grammar-max-bytes: must be a positive size (%v)", err)
	}
	if gcfg.Memory, err = bytesize.Parse(*grammarMemory); err != nil || gcfg.Memory < 2*gcfg.MaxBytes {
		return fmt.Errorf("--grammar-memory: must be a size of at least twice --grammar-max-bytes (%v)", err)
	}
	storeBytes, err := bytesize.Parse(*responsesStore)
	if err != nil {
		return fmt.Errorf("--responses-store-bytes: %w", err)
	}
	if storeBytes == 0 {
		storeBytes = -1 // server.Config: negative keeps none
	}
	dt, err := kvcache.ParseDType(*kvType)
	if err != nil {
		return fmt.Errorf("--kv-type %q: want f32, f16 or q8_0", *kvType)
	}
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return fmt.Errorf("--api-key-file: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				keys = append(keys, l)
			}
		}
	}
	fileAdmin, err := readKeyFile(*adminKeyFile)
	if err != nil {
		return fmt.Errorf("--admin-key-file: %w", err)
	}
	adminKeys = append(adminKeys, fileAdmin...)
	for _, kf := range []struct {
		flag, path string
		into       *stringList
	}{{"--events-key-file", *eventsKeyFile, &eventsKeys}, {"--dashboard-key-file", *dashboardKeyFile, &dashboardKeys}} {
		ks, err := readKeyFile(kf.path)
		if err != nil {
			return fmt.Errorf("%s: %w", kf.flag, err)
		}
		*kf.into = append(*kf.into, ks...)
	}
	if *cacheIsolation != "tenant" && *cacheIsolation != "key" {
		return fmt.Errorf("serve: --cache-isolation %q: want tenant or key", *cacheIsolation)
	}
	if *ttftFloor < 0 {
		return fmt.Errorf("serve: --ttft-floor %v must be >= 0", *ttftFloor)
	}
	tlsCfg, err := tlsconfig.Server(tlsconfig.ServerFiles{Cert: *tlsCert, Key: *tlsKey, ClientCA: *tlsClientCA})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	tenants, backendKey, err := tenantOpts.load(keys)
	if err != nil {
		return err
	}

	to := td
	to.DiskDir, to.RemoteURL = *diskCache, *remoteCache
	if *remoteTimeout <= 0 {
		return fmt.Errorf("--remote-call-timeout %v: must be positive", *remoteTimeout)
	}
	to.Remote.CallTimeout = *remoteTimeout
	if err := tierSecurity(&to, tierKeyFiles, *remotePasswordFile, *remoteCAFile, logger); err != nil {
		return err
	}
	to.Admission = offload.Admission{MinHits: *minHits, MinPrefixTokens: *minPrefix}
	if to.RemoteWrite, err = offload.ParseWritePolicy(*remoteWrite); err != nil {
		return fmt.Errorf("--remote-write: %w", err)
	}
	if *stateEvery < 1 {
		return fmt.Errorf("--state-checkpoint-blocks %d must be at least 1", *stateEvery)
	}
	if *maxOffload < 0 {
		return fmt.Errorf("--max-offload-tokens %d must be >= 0", *maxOffload)
	}
	to.MaxOffloadTokens = *maxOffload
	if to.HostBytes, err = bytesize.Parse(*hostCache); err != nil {
		return fmt.Errorf("--host-cache: %w", err)
	}
	if to.DiskBytes, err = bytesize.Parse(*diskSize); err != nil {
		return fmt.Errorf("--disk-cache-size: %w", err)
	}
	pins, err := parsePinBudget(*pinBudget)
	if err != nil {
		return err
	}
	policy, err := engine.ParsePrefetchPolicy(*prefetch)
	if err != nil {
		return fmt.Errorf("--prefetch %w", err)
	}
	opts := serveOptions{
		model: *modelSpec, addr: *addr, threads: *threads, blockSize: *blockSize, kvBudget: kvBudget,
		kvType: dt, prefixCache: *prefixCache, dedup: *dedup, maxBatch: *maxBatch, maxRunning: *maxRunning,
		maxPrompt: *maxPrompt, maxBody: bodyLimit, requestMemory: reqMemBytes, keys: keys, adminKeys: adminKeys, metricsKey: *metricsKey,
		eventsKeys: eventsKeys, dashboardKeys: dashboardKeys, publicMetrics: *publicMetrics, tls: tlsCfg, ttftFloor: *ttftFloor, keyIsolation: *cacheIsolation == "key", logger: logger, progress: os.Stderr,
		readTimeout: *readTimeout, idleTimeout: *idleTimeout, maxConns: *maxConns, responsesStoreBytes: storeBytes, grammar: gcfg, maxConnsPerClient: *maxConnsPerClient,
		tiers: to, prefetch: policy, prefetchMaxWait: *prefetchTimeout, pinBudget: pins, stateEvery: *stateEvery,
		tenants: tenants, backendKey: backendKey,
	}
	// Bind before loading the model: the address is taken at once (a port in use fails now,
	// not after seconds of loading, and nobody else can take it meanwhile), and connections
	// made while the model loads wait in the listen backlog until it serves.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	inst, err := newInstance(opts)
	if err != nil {
		ln.Close()
		return err
	}
	defer inst.Close()
	srv, lf := inst.server, inst.file
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	fmt.Fprintf(os.Stderr, "stockpot: serving %s on %s://%s (OpenAI API under /v1, metrics at /metrics)\n", lf.name, scheme, ln.Addr())
	if *ttftFloor > 0 && len(keys) == 0 {
		fmt.Fprintln(os.Stderr, "stockpot: --ttft-floor without --api-key: principals are told apart by whatever key clients send")
	}
	if *ttftFloor > 0 && *publicMetrics {
		fmt.Fprintln(os.Stderr, "stockpot: --ttft-floor with --public-metrics: the hit counters on /metrics tell hits the floor hides")
	}
	if len(keys)+len(adminKeys)+len(eventsKeys) > 0 && len(adminKeys)+len(eventsKeys) == 0 {
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
