package server

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"stockpot/internal/handoff"
	"stockpot/internal/kvtier"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
	"stockpot/internal/tenant"
)

// Config configures a Server. Zero fields take the defaults of DefaultConfig, except
// ModelName and ContextLength, which must be set.
type Config struct {
	// Addr is where cmd/stockpot listens; Serve itself takes a listener.
	Addr string
	// ModelName is the served model id: requests naming another model get 404 model_not_found.
	ModelName string
	// Fingerprint is the model's identity fingerprint, shown in /v1/models and as
	// system_fingerprint.
	Fingerprint string
	// ContextLength is the model's context length in tokens. A prompt must be shorter, to leave
	// room for one generated token.
	ContextLength int
	// BlockSize is tokens per KV block, reported in /v1/models.
	BlockSize int
	// MaxPromptTokens refuses longer prompts with a 400; 0 means ContextLength-1.
	MaxPromptTokens int
	// MaxBodyBytes refuses larger request bodies with a 413.
	MaxBodyBytes int64
	// RequestMemoryBytes is the request memory budget (--request-memory; reqmem.go): every
	// request with a body reserves its length times 32, plus 64 KiB, before it is read, and
	// waits (up to ReadTimeout, then a 503) while the requests in flight hold the rest. At
	// least the cost of one body of MaxBodyBytes.
	RequestMemoryBytes int64
	// APIKeys, when non-empty, are required as "Authorization: Bearer KEY" or "x-api-key: KEY"
	// on the API (the operator endpoints take their own keys: endpoint_auth.go).
	APIKeys []string
	// Tenants, when set (--tenants), are the principals: a request's key names its tenant,
	// whose namespace its cache salt is derived from and whose quotas it takes (tenants.go).
	// It replaces APIKeys, which are the single-tenant shorthand (tenant.Single); set one.
	Tenants *tenant.Set
	// BackendKey is the key shared with the router (--backend-key): the router's own calls
	// present it as a bearer key, and its forwarded requests name their tenant in the
	// tenant.Header signed with it. Without it that header is refused.
	BackendKey string
	// MetricsKey, when set, grants /metrics ("Authorization: Bearer KEY"), as admin keys do.
	// Without it /metrics is open only while no key of any kind is configured, or with
	// PublicMetrics (endpoint_auth.go).
	MetricsKey string
	// PublicMetrics opens /metrics to anyone even when keys are configured. Its counters show
	// every tenant's cache hits, an oracle the TTFT floor cannot hide.
	PublicMetrics bool
	// EventsKeys grant the replica's block events (RequireEventsKey), as admin keys do.
	EventsKeys []string
	// DashboardKeys grant the dashboard (/dashboard, its events and state), as admin keys do.
	DashboardKeys []string
	// TenantKey, when set, says whether key is a tenant's API key (a tenants layer that keeps
	// its own keys instead of APIKeys): such a key then gets a 403, not a 401, on an operator
	// endpoint, and its presence closes the operator endpoints as any configured key does.
	TenantKey func(key string) bool
	// TTFTFloor, when positive, turns the TTFT floor on for every principal (internal/runner):
	// a request whose prompt holds blocks its principal does not know gets its first token no
	// sooner than max(TTFTFloor, the estimated miss TTFT past what it knows), and the usage of
	// such a miss.
	TTFTFloor time.Duration
	// Principal, when set, names each API request's principal and its floor (a tenants layer:
	// per-tenant floors); nil: the presented key's SHA-256 with TTFTFloor.
	Principal PrincipalFunc
	// Handoff, when set, is this replica's part in prefill/decode disaggregation (handoff.go):
	// its role, the transfers it holds for decodes, and its puller. nil: it takes no
	// kv_transfer_params.
	Handoff *handoff.Node
	// onFloorPlan, when set (tests), sees every TTFT floor decision (runner.Config.OnFloorPlan).
	onFloorPlan func(runner.FloorPlan)
	// KeyIsolation gives every API key its own cache namespace inside its tenant's
	// (--cache-isolation key; principal.go): no key reuses a block another key computed, so
	// no key learns by any channel what another sent. Behind a router the replica sees the
	// router's key, so keys are told apart only where clients reach the replica directly.
	KeyIsolation bool
	// TLS, when set, serves HTTPS (with TLS.ClientCAs and RequireAndVerifyClientCert: mutual
	// TLS); build it with internal/tlsconfig.
	TLS *tls.Config
	// DrainTimeout is how long Serve lets running requests finish after its context ends.
	DrainTimeout time.Duration
	// ReadHeaderTimeout bounds slow clients sending headers.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds the time to read a request body, from the end of its headers; a body
	// still incomplete then is answered 408 and its connection closed. It does not bound the
	// response: a stream may run as long as it generates (there is no write timeout).
	ReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle between requests for this long.
	IdleTimeout time.Duration
	// MaxConnections caps the connections Serve holds open at once; more wait in the
	// listener's backlog until one closes. Beyond it, 16 more (connlimit.HealthReserve)
	// serve only GET /health and /ready, so probes are answered while clients hold all the
	// others; and the wait for a request's head (ReadHeaderTimeout, IdleTimeout between
	// requests) falls from all of it at half full to 1 s when full (internal/connlimit).
	MaxConnections int
	// MaxConnectionsPerClient caps the connections open at once from one remote IP (loopback
	// too: a router or proxy, whose connections all come from its address, should raise it to
	// the streams it sends one replica); more are answered 429 and closed. 0: an eighth of
	// MaxConnections, so that it takes eight addresses to fill the server, but at least 64
	// (all of them, if fewer), so a small cap does not starve one ordinary client.
	MaxConnectionsPerClient int
	// MaxHeaderBytes bounds request headers (larger are answered 431).
	MaxHeaderBytes int
	// ResponsesStoreBytes bounds the memory of the responses kept for /v1/responses'
	// previous_response_id (beside their count, 1024); a response larger than it on its own
	// is not kept. 0: the default; negative: none is kept.
	ResponsesStoreBytes int64
	// Grammar bounds constrained decoding's grammars: their estimated and compiled size, how
	// many compile at once, and the cache of compiled ones (internal/pipeline's grammars.go).
	// Zero fields take pipeline.DefaultGrammarConfig's.
	Grammar pipeline.GrammarConfig
	// Blend is chunk blending's default recompute fraction and its bound on chunks per
	// request (serve --blend-recompute, --blend-max-chunks); zero: pipeline.DefaultBlendConfig.
	Blend pipeline.BlendConfig
	// HitRateWindow and HitRateMaxAge define stockpot_prefix_cache_hit_rate's sliding window: the
	// last HitRateWindow requests that finished within HitRateMaxAge.
	HitRateWindow int
	HitRateMaxAge time.Duration
	// TierStats, when set, reports the lower KV tiers (host, disk, remote) for the
	// stockpot_kv_cache_usage_bytes, _capacity_bytes and _evictions_total metrics.
	TierStats func() []kvtier.Stat
	// AdminKeys guard the cache admin API (cache_admin.go); without any it answers 403.
	AdminKeys []string
	// CacheAdmin serves the cache admin API (the engine); nil: it answers 501.
	CacheAdmin CacheAdmin
	// TierDrop, when set, drops a root's blocks from the lower tiers on DELETE /v1/cache.
	TierDrop TierDropper
	// TierPins and TierUnpin, when set, list and drop the lower tiers' pins (GET and
	// DELETE /v1/cache?pin=).
	TierPins  func() []TierPin
	TierUnpin TierUnpinner
	// Logger receives request errors and recovered panics.
	Logger *slog.Logger
	// Now is the clock (tests); defaults to time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults. ModelName and ContextLength still need setting.
func DefaultConfig() Config {
	return Config{
		Addr:      "127.0.0.1:8080",
		BlockSize: 16,
		// 16 MiB holds a 128k-token prompt as a token-id array with room to spare.
		MaxBodyBytes: 16 << 20,
		// 1 GiB lets one body of the largest size be parsed and tokenized beside thousands
		// of ordinary ones (a 10 KB chat body reserves 384 KB), while a flood of 16 MiB
		// bodies cannot take the server past it.
		RequestMemoryBytes: 1 << 30,
		DrainTimeout:       30 * time.Second,
		ReadHeaderTimeout:  10 * time.Second,
		// A 16 MiB body at 1 MB/s arrives in 16 s; a client slower than that is holding a
		// connection, not sending a prompt.
		ReadTimeout: 30 * time.Second,
		// nginx's keepalive_timeout is 75 s and most HTTP clients drop idle connections after
		// 90 s; 60 s keeps a busy client's connection warm without hoarding idle ones.
		IdleTimeout: 60 * time.Second,
		// Far above what one CPU replica serves at once (64 running requests by default), low
		// enough to stay clear of the usual 65536 open-files limit with room for tier files.
		MaxConnections: 4096,
		MaxHeaderBytes: 1 << 20, // net/http's default
		// 64 MiB keeps the last 1024 responses of an agent's conversations of up to 64 KiB
		// each (some 16k tokens of text), or fewer longer ones, at a small share of the memory
		// a model's KV pool takes; a client's store cannot grow past it.
		ResponsesStoreBytes: 64 << 20,
		// vLLM reports its prefix-cache hit rate over the last 1000 requests; the age bound
		// keeps an idle server from showing an hour-old rate.
		HitRateWindow: 1000,
		HitRateMaxAge: 5 * time.Minute,
	}
}

// validate returns c with defaults filled in, leaving the caller's struct alone.
func (c Config) validate() (Config, error) {
	d := DefaultConfig()
	if c.ModelName == "" {
		return c, errors.New("server: Config.ModelName is required")
	}
	if c.ContextLength <= 1 {
		return c, fmt.Errorf("server: Config.ContextLength must be at least 2, got %d", c.ContextLength)
	}
	orDefault(&c.Addr, d.Addr)
	orDefault(&c.BlockSize, d.BlockSize)
	if c.MaxPromptTokens < 0 {
		return c, fmt.Errorf("server: Config.MaxPromptTokens must be >= 0, got %d", c.MaxPromptTokens)
	}
	if c.MaxPromptTokens == 0 || c.MaxPromptTokens > c.ContextLength-1 {
		c.MaxPromptTokens = c.ContextLength - 1
	}
	if c.TTFTFloor < 0 {
		return c, fmt.Errorf("server: Config.TTFTFloor must be >= 0, got %v", c.TTFTFloor)
	}
	if err := c.Blend.Validate(); err != nil {
		return c, fmt.Errorf("server: Config.Blend: %w", err)
	}
	orDefault(&c.MaxBodyBytes, d.MaxBodyBytes)
	if c.RequestMemoryBytes <= 0 {
		c.RequestMemoryBytes = max(d.RequestMemoryBytes, requestCost(c.MaxBodyBytes, c.MaxBodyBytes))
	}
	if need := requestCost(c.MaxBodyBytes, c.MaxBodyBytes); c.RequestMemoryBytes < need {
		return c, fmt.Errorf("server: the request memory budget (%d bytes) is below one largest body's cost (%d bytes: --max-body-bytes %d times %d, plus %d)",
			c.RequestMemoryBytes, need, c.MaxBodyBytes, requestExpansion, requestBase)
	}
	orDefault(&c.DrainTimeout, d.DrainTimeout)
	orDefault(&c.ReadHeaderTimeout, d.ReadHeaderTimeout)
	orDefault(&c.ReadTimeout, d.ReadTimeout)
	orDefault(&c.IdleTimeout, d.IdleTimeout)
	orDefault(&c.MaxConnections, d.MaxConnections)
	if c.MaxConnectionsPerClient <= 0 {
		c.MaxConnectionsPerClient = max(c.MaxConnections/8, min(c.MaxConnections, 64))
	}
	orDefault(&c.MaxHeaderBytes, d.MaxHeaderBytes)
	switch {
	case c.ResponsesStoreBytes == 0:
		c.ResponsesStoreBytes = d.ResponsesStoreBytes
	case c.ResponsesStoreBytes < 0:
		c.ResponsesStoreBytes = 0
	}
	orDefault(&c.HitRateWindow, d.HitRateWindow)
	orDefault(&c.HitRateMaxAge, d.HitRateMaxAge)
	keys := make([]string, 0, len(c.APIKeys))
	for _, k := range c.APIKeys {
		if k != "" {
			keys = append(keys, k)
		}
	}
	c.APIKeys = keys
	if c.Tenants != nil && len(c.APIKeys) > 0 {
		return c, errors.New("server: Config.Tenants and Config.APIKeys are exclusive (--api-key is the single-tenant shorthand of --tenants)")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// orDefault sets *v to d when it is zero (or, for numbers, below zero).
func orDefault[T cmp.Ordered](v *T, d T) {
	var zero T
	if *v <= zero {
		*v = d
	}
}
