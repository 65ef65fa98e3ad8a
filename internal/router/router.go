package router

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"stockpot/internal/api"
	"stockpot/internal/apikey"
	"stockpot/internal/kvevents"
	"stockpot/internal/tenant"
)

// Config configures a Router.
type Config struct {
	// Backends are the initial backend URLs.
	Backends []string
	// PrefillBackends and DecodeBackends are initial backends of a fixed role in prefill/decode
	// disaggregation (--prefill-backend, --decode-backend); a backend in Backends takes the
	// role its /health reports (pd.go).
	PrefillBackends, DecodeBackends []string
	// PD configures prefill/decode disaggregation (pd.go).
	PD PDConfig
	// Policy names the routing policy (see PolicyNames). Default kv-aware.
	Policy string
	PolicyConfig
	// HealthInterval is the period of GET /health checks. Default 1s.
	HealthInterval time.Duration
	// HealthTimeout bounds one check. Default 1s.
	HealthTimeout time.Duration
	// DownAfter consecutive failed checks take a backend out. Default 2.
	// A connection error while proxying takes it out at once.
	DownAfter int
	// Outlier is passive health: backends whose proxied requests keep failing are ejected
	// for a while (outlier.go).
	Outlier OutlierConfig
	// MaxAttempts bounds the backends one request is tried on. Default 3.
	MaxAttempts int
	// MaxBodyBytes caps request bodies (the router buffers them to retry
	// and to read the prompt). Default 16 MiB, as serve.
	MaxBodyBytes int64
	// TokenizeTimeout bounds the /tokenize call a policy needs. Default 2s;
	// on timeout the policy decides without tokens.
	TokenizeTimeout time.Duration
	// Events turns on event subscriptions; default: on for kv-aware only.
	Events *bool
	// KVEventsListen, when set (route --kv-events-listen), binds a ZeroMQ SUB there that
	// replicas publish vLLM-format KV events to; every backend's index is then fed from it
	// alone (vllm_events.go). KVEventsMaxRate bounds one backend's events a second (0:
	// DefaultKVEventsMaxRate).
	KVEventsListen  string
	KVEventsMaxRate float64
	// Registerer receives the router's metrics; /metrics serves Gatherer.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	Logger     *slog.Logger
	// Transport is the upstream transport; default a pooled one.
	Transport http.RoundTripper

	// APIKeys, when any is set, are required of clients on the OpenAI
	// endpoints ("Authorization: Bearer K" or "x-api-key: K"), and the
	// router terminates auth: a client's key is never forwarded (BackendKey
	// takes its place). Without them the router checks nothing and passes
	// the client's headers through.
	APIKeys []string
	// AdminKeys guard every method of /backends. Without any, membership
	// over HTTP is off (403); AddBackend and RemoveBackend still work.
	AdminKeys []string
	// MetricsKeys, when any is set, guard /metrics (an admin key is also
	// accepted there). Without them /metrics is open, as on serve.
	MetricsKeys []string
	// BackendKey is sent as "Authorization: Bearer K" on the router's own
	// calls to replicas (health, /tokenize, /v1/kv-events and its
	// snapshot), and on forwarded requests when APIKeys are set.
	BackendKey string
	// DashboardKeys guard /dashboard and its events and state (an admin key
	// is also accepted there).
	DashboardKeys []string
	// PublicMetrics leaves /metrics open even when keys are configured.
	PublicMetrics bool
	// BackendEventsKey is sent instead of BackendKey on the router's reads
	// of a replica's /v1/kv-events and its snapshot (the replica's
	// --events-key). Empty: BackendKey.
	BackendEventsKey string
	// BackendTLS is the client TLS config for https backends (CA, client
	// certificate for mutual TLS; internal/tlsconfig.Client). It applies to
	// the default Transport; a caller's own Transport carries its own.
	BackendTLS *tls.Config
	// Tenants, when set (--tenants), replace APIKeys: a client's key names its tenant, whose
	// quotas the router applies and whose namespace it routes by; forwarded requests carry
	// the tenant in tenant.Header signed with BackendKey, which is then required (tenants.go).
	Tenants *tenant.Set
	// BodyReadTimeout bounds reading one request's body (a client dripping
	// bytes holds a connection no longer). Default 60s. The response is not
	// bounded: long streams run as long as they run.
	BodyReadTimeout time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Policy: "kv-aware", PolicyConfig: DefaultPolicyConfig(), Outlier: DefaultOutlierConfig(), PD: DefaultPDConfig(), HealthInterval: time.Second,
		HealthTimeout: time.Second, DownAfter: 2, MaxAttempts: 3, MaxBodyBytes: 16 << 20, TokenizeTimeout: 2 * time.Second,
		BodyReadTimeout: 60 * time.Second}
}

// validate fills zero values with the defaults and rejects negative ones (a negative timeout
// or count is a mistake, not a request for the default). c is a copy: the caller's struct is
// not changed.
func (c Config) validate() (Config, error) {
	d := DefaultConfig()
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	pc, err := c.PolicyConfig.validate()
	if err != nil {
		return c, err
	}
	c.PolicyConfig = pc
	if c.Outlier, err = c.Outlier.validate(); err != nil {
		return c, err
	}
	if c.PD, err = c.PD.validate(); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"HealthInterval", &c.HealthInterval, d.HealthInterval},
		{"HealthTimeout", &c.HealthTimeout, d.HealthTimeout},
		{"TokenizeTimeout", &c.TokenizeTimeout, d.TokenizeTimeout},
		{"BodyReadTimeout", &c.BodyReadTimeout, d.BodyReadTimeout},
	} {
		if *f.v < 0 {
			return c, fmt.Errorf("router: %s %v is negative", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.DownAfter < 0 || c.MaxAttempts < 0 || c.MaxBodyBytes < 0 {
		return c, fmt.Errorf("router: DownAfter %d, MaxAttempts %d and MaxBodyBytes %d must not be negative", c.DownAfter, c.MaxAttempts, c.MaxBodyBytes)
	}
	if c.DownAfter == 0 {
		c.DownAfter = d.DownAfter
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = d.MaxAttempts
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	c.BackendKey = strings.TrimSpace(c.BackendKey)
	c.BackendEventsKey = strings.TrimSpace(c.BackendEventsKey)
	if c.BackendEventsKey == "" {
		c.BackendEventsKey = c.BackendKey
	}
	if c.Tenants != nil {
		if newKeySet(c.APIKeys).Len() > 0 {
			return c, fmt.Errorf("router: Tenants and APIKeys are exclusive (--api-key is the single-tenant shorthand of --tenants)")
		}
		if c.BackendKey == "" {
			return c, fmt.Errorf("router: Tenants need a BackendKey (--backend-key): replicas trust the forwarded tenant only when signed with it")
		}
	}
	if c.Events == nil {
		on := c.Policy == "kv-aware"
		c.Events = &on
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Transport == nil {
		c.Transport = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
			TLSClientConfig:     c.BackendTLS,
		}
	}
	return c, nil
}

// ErrNoBackend means no healthy backend is left to try.
var ErrNoBackend = errors.New("router: no healthy backend")

// ErrUnknownBackend is returned by RemoveBackend for an unknown ID.
var ErrUnknownBackend = errors.New("router: unknown backend")

// Router is the cache-aware gateway: membership, health, policy, proxy.
type Router struct {
	cfg    Config
	policy Policy
	needs  tokenNeeder // nil when the policy never needs tokens
	toks   *tokenCache // /tokenize answers by request bytes
	// outliers is passive health: which backends are ejected for failing (outlier.go).
	outliers *outliers
	// client forwards requests (credentials set per request); own makes the
	// router's own calls and always carries the backend key.
	client, own *http.Client
	// events reads the replicas' block events with the events key.
	events *http.Client

	m   *metrics
	pdm *pdMetrics // prefill/decode disaggregation (pd.go)
	// onOverhead, when set (benchmarks), also gets each generate request's pre-upstream time
	// (the stockpot_router_overhead_seconds observation), for exact percentiles.
	onOverhead func(time.Duration)
	keys       *keyMetrics      // prompt_cache_key counts (cachekey.go)
	dash       *routerDashboard // GET /dashboard (dashboard.go)
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup

	// clientKeys, adminKeys, metricsKeys: see Config.
	clientKeys, adminKeys, metricsKeys, dashboardKeys apikey.Set

	// remote is the shared remote tier's blocks as every replica announced them
	// (sharedRemote): kv-aware scores them for each replica with the tier, including after
	// their writer is gone.
	remote *replicaIndex
	// tenants, limiter, tm: Config.Tenants, their quotas and series (tenants.go).
	tenants *tenant.Set
	limiter *tenant.Limiter
	tm      *routerTenantMetrics

	// list is the current backends, sorted by ID; replaced, never mutated,
	// so the request path reads it without a lock.
	list atomic.Pointer[[]*Backend]
	mu   sync.Mutex // serializes membership changes
	// zmq is the vLLM-format event SUB (Config.KVEventsListen); nil without one.
	zmq *zmqEvents
}

// New starts a Router: health checks and, for kv-aware, event subscribers.
// Close stops them.
func New(cfg Config) (*Router, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	p, err := NewPolicy(cfg.Policy, cfg.PolicyConfig)
	if err != nil {
		return nil, err
	}
	sp := newSwitchPolicy(p) // PUT /policy changes it at run time (policy_admin.go)
	r := &Router{cfg: cfg, policy: sp, client: &http.Client{Transport: cfg.Transport},
		own:        &http.Client{Transport: keyTransport{base: cfg.Transport, key: cfg.BackendKey}},
		events:     &http.Client{Transport: keyTransport{base: cfg.Transport, key: cfg.BackendEventsKey}},
		clientKeys: newKeySet(cfg.APIKeys), adminKeys: newKeySet(cfg.AdminKeys), metricsKeys: newKeySet(cfg.MetricsKeys),
		dashboardKeys: newKeySet(cfg.DashboardKeys),
		toks:          newTokenCache(), outliers: newOutliers(cfg.Outlier), remote: sharedRemote(cfg.IndexMaxBlocks), tenants: cfg.Tenants, limiter: tenant.NewLimiter()}
	r.needs = sp
	r.m = newMetrics(cfg.Registerer)
	r.pdm = newPDMetrics(cfg.Registerer)
	r.keys = newKeyMetrics(cfg.Registerer)
	r.tm = newRouterTenantMetrics(cfg.Registerer)
	r.dash = newRouterDashboard(r)
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(newBackendCollector(r))
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if cfg.KVEventsListen != "" {
		if r.zmq, err = newZMQEvents(r, cfg.KVEventsListen, cfg.KVEventsMaxRate); err != nil {
			r.Close()
			return nil, err
		}
	}
	empty := []*Backend{}
	r.list.Store(&empty)
	for _, set := range []struct {
		urls []string
		role Role
	}{{cfg.Backends, ""}, {cfg.PrefillBackends, RolePrefill}, {cfg.DecodeBackends, RoleDecode}} {
		for _, u := range set.urls {
			if _, err := r.AddBackendRole(u, set.role); err != nil {
				r.Close()
				return nil, err
			}
		}
	}
	r.wg.Add(1)
	go r.healthLoop()
	return r, nil
}

// Policy returns the routing policy.
func (r *Router) Policy() Policy { return r.policy }

// Close stops health checks and subscribers.
func (r *Router) Close() {
	r.dash.hub.Close()
	r.cancel()
	r.wg.Wait()
}

func (r *Router) backends() []*Backend { return *r.list.Load() }

// Backends returns the status of every backend.
func (r *Router) Backends() []BackendStatus {
	bs := r.backends()
	out := make([]BackendStatus, len(bs))
	now := time.Now()
	pools := r.poolNames()
	for i, b := range bs {
		out[i] = b.status()
		st, _ := r.outliers.state(b.ID, now)
		out[i].Passive = st.String()
		out[i].Pool = pools[b]
	}
	return out
}

// AddBackend adds a backend by URL (idempotent) and returns its ID. Its role is what its
// /health reports (both until it says).
func (r *Router) AddBackend(rawURL string) (string, error) { return r.AddBackendRole(rawURL, "") }

// AddBackendRole adds a backend of a fixed role in prefill/decode disaggregation ("": the role
// its /health reports) and returns its ID. Adding a known URL again with a role sets its role.
func (r *Router) AddBackendRole(rawURL string, role Role) (string, error) {
	if role != "" {
		if _, err := ParseRole(string(role)); err != nil {
			return "", err
		}
	}
	b, err := newBackend(rawURL)
	if err != nil {
		return "", err
	}
	if role != "" {
		b.fixedRole.Store(&role)
	}
	b.index.maxBlocks = r.cfg.IndexMaxBlocks
	b.index.remote = r.remote
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.backends()
	for _, o := range cur {
		if o.ID == b.ID {
			if role != "" {
				o.fixedRole.Store(&role)
			}
			return o.ID, nil
		}
	}
	if r.zmq != nil {
		r.zmq.attach(b)
	} else if *r.cfg.Events {
		sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{URL: b.URL.String(), Sink: backendSink{b.index, b}, // replica_load.go
			Client: r.events, Logger: r.cfg.Logger})
		if err != nil {
			return "", err
		}
		b.events = sub
		ctx, cancel := context.WithCancel(r.ctx)
		b.cancel, b.done = cancel, make(chan struct{})
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer close(b.done)
			_ = sub.Run(ctx)
		}()
	}
	next := append(slices.Clone(cur), b)
	slices.SortFunc(next, func(x, y *Backend) int { return cmpString(x.ID, y.ID) })
	r.list.Store(&next)
	r.cfg.Logger.Info("router: backend added", "id", b.ID, "url", b.URL, "role", role)
	return b.ID, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// RemoveBackend removes a backend by ID (or URL). In-flight requests on it
// finish; new ones go elsewhere.
func (r *Router) RemoveBackend(idOrURL string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.backends()
	i := slices.IndexFunc(cur, func(b *Backend) bool { return b.ID == idOrURL })
	if nb, err := newBackend(idOrURL); i < 0 && err == nil {
		i = slices.IndexFunc(cur, func(b *Backend) bool { return b.ID == nb.ID })
	}
	if i < 0 {
		return fmt.Errorf("%w %s", ErrUnknownBackend, api.Quote(idOrURL))
	}
	b := cur[i]
	next := slices.Delete(slices.Clone(cur), i, i+1)
	r.list.Store(&next)
	r.outliers.remove(b.ID)
	if b.cancel != nil {
		b.cancel()
	}
	r.cfg.Logger.Info("router: backend removed", "id", b.ID, "url", b.URL)
	return nil
}

// healthLoop checks every backend each HealthInterval. (A stale index is
// not dropped here: policies ignore it while stale, and the stream either
// resumes exactly where it stopped or resyncs from a snapshot.)
func (r *Router) healthLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.HealthInterval)
	defer t.Stop()
	for {
		var wg sync.WaitGroup
		for _, b := range r.backends() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.check(b)
			}()
		}
		wg.Wait()
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Router) check(b *Backend) {
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.HealthTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.URL.String()+"/health", nil)
	resp, err := r.own.Do(req)
	ok := err == nil && resp.StatusCode == http.StatusOK
	var hb []byte
	if resp != nil {
		hb, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
	}
	if r.ctx.Err() != nil {
		return
	}
	if ok {
		r.learnRole(b, hb)
		b.failures.Store(0)
		if !b.healthy.Swap(true) {
			r.cfg.Logger.Info("router: backend up", "id", b.ID)
		}
		r.outliers.healthPass(b.ID, time.Now())
	} else if int(b.failures.Add(1)) >= r.cfg.DownAfter {
		r.markDown(b, fmt.Sprintf("health check: %v", errOrStatus(err, resp)))
	}
}

func errOrStatus(err error, resp *http.Response) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

func (r *Router) markDown(b *Backend, why string) {
	b.lastErr.Store(&why)
	if b.healthy.Swap(false) {
		r.cfg.Logger.Warn("router: backend down", "id", b.ID, "why", why)
	}
}

// candidates returns the backends not in tried that may take a routed request: healthy
// (active health) and in service or half-open (passive health: an ejected backend is left
// out; a half-open one takes a probe once forward's outliers.start says it may).
func (r *Router) candidates(tried []*Backend) []*Backend {
	all := r.backends()
	out := make([]*Backend, 0, len(all))
	now := time.Now()
	for _, b := range all {
		if b.Healthy() && !slices.Contains(tried, b) && r.outliers.candidate(b.ID, now) {
			out = append(out, b)
		}
	}
	return out
}

// serving returns the healthy backends not in tried that are in service: the router's own
// calls (/tokenize, prewarm) never go to an ejected backend, nor take a half-open one's probe.
func (r *Router) serving(tried []*Backend) []*Backend {
	all := r.backends()
	out := make([]*Backend, 0, len(all))
	now := time.Now()
	for _, b := range all {
		if b.Healthy() && !slices.Contains(tried, b) && r.outliers.serving(b.ID, now) {
			out = append(out, b)
		}
	}
	return out
}

// passiveFailure counts a failed answer of b toward its ejection (outlier.go).
func (r *Router) passiveFailure(b *Backend, why string) {
	if r.outliers.failure(b.ID, time.Now(), len(r.backends())) == ejectedNow {
		r.m.ejections.WithLabelValues(b.ID).Inc()
		msg := "ejected (passive health): " + why
		b.lastErr.Store(&msg)
		r.cfg.Logger.Warn("router: backend ejected", "id", b.ID, "why", why)
	}
}

// passiveSuccess records an answer of b that was not a failure.
func (r *Router) passiveSuccess(b *Backend) {
	if r.outliers.success(b.ID, time.Now()) == returnedNow {
		r.cfg.Logger.Info("router: backend returned from ejection", "id", b.ID)
	}
}

// routes lists every path the router serves and its methods, for the JSON
// 404 and 405 answers (the mux's own are plain text).
var routes = map[string]string{
	"/v1/completions":           "POST",
	"/v1/chat/completions":      "POST",
	"/v1/responses":             "POST",
	"/v1/messages":              "POST",
	"/v1/messages/count_tokens": "POST",
	"/tokenize":                 "POST",
	"/detokenize":               "POST",
	"/v1/models":                "GET",
	"/health":                   "GET",
	"/metrics":                  "GET",
	"/backends":                 "GET, POST",
	"/policy":                   "GET, PUT",
	"/v1/cache":                 "GET, DELETE",
	"/v1/cache/prewarm":         "POST",
	"/dashboard":                "GET",
	"/dashboard/events":         "GET",
	"/dashboard/state":          "GET",
}

// Handler returns the router's HTTP API.
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", r.requireClient(r.serveGenerate))
	mux.HandleFunc("POST /v1/chat/completions", r.requireClient(r.serveGenerate))
	// The Responses and Anthropic Messages dialects are routed as chat is: by key, session or
	// the prompt as a replica renders it (dialect.go).
	mux.HandleFunc("POST /v1/responses", r.requireClient(r.serveGenerate))
	mux.HandleFunc("POST /v1/messages", r.requireClient(r.serveGenerate))
	mux.HandleFunc("POST /v1/messages/count_tokens", r.requireClient(r.servePassThrough))
	mux.HandleFunc("POST /tokenize", r.requireClient(r.servePassThrough))
	mux.HandleFunc("POST /detokenize", r.requireClient(r.servePassThrough))
	mux.HandleFunc("GET /v1/models", r.requireClient(r.servePassThrough))
	mux.HandleFunc("GET /v1/models/{name}", r.requireClient(r.servePassThrough))
	mux.HandleFunc("POST /v1/cache/prewarm", r.requireCacheAdmin(r.servePrewarm))
	mux.HandleFunc("GET /v1/cache", r.requireCacheAdmin(r.serveCacheFanout))
	mux.HandleFunc("DELETE /v1/cache", r.requireCacheAdmin(r.serveCacheFanout))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if len(r.candidates(nil)) == 0 {
			writeAPIError(w, api.Unavailable("no healthy backend"))
			return
		}
		writeJSONBody(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	if r.cfg.Gatherer != nil {
		mux.Handle("GET /metrics", r.requireMetrics(promhttp.HandlerFor(r.cfg.Gatherer, promhttp.HandlerOpts{})))
	}
	mux.HandleFunc("GET /backends", r.requireAdmin(func(w http.ResponseWriter, _ *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]any{"policy": r.policy.Name(), "backends": r.Backends()})
	}))
	mux.HandleFunc("POST /backends", r.requireAdmin(func(w http.ResponseWriter, req *http.Request) {
		var body struct {
			URL  string `json:"url"`
			Role string `json:"role"`
		}
		raw, ok := r.readBody(w, req, 64<<10)
		if !ok {
			return
		}
		if err := json.Unmarshal(raw, &body); err != nil || body.URL == "" {
			writeAPIError(w, api.Invalid("url", `want {"url": "http://host:port"}`))
			return
		}
		role, err := ParseRole(body.Role)
		if err != nil {
			writeAPIError(w, api.Invalid("role", "%v", err))
			return
		}
		id, err := r.AddBackendRole(body.URL, role)
		if err != nil {
			writeAPIError(w, api.Invalid("url", "%v", err))
			return
		}
		writeJSONBody(w, http.StatusCreated, map[string]string{"id": id})
	}))
	mux.HandleFunc("DELETE /backends/{id}", r.requireAdmin(func(w http.ResponseWriter, req *http.Request) {
		if err := r.RemoveBackend(req.PathValue("id")); err != nil {
			writeAPIError(w, &api.Error{Status: http.StatusNotFound, Type: api.TypeNotFound, Code: "backend_not_found", Message: err.Error()})
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	r.routeDashboard(mux)
	r.routePolicy(mux) // policy_admin.go
	// Everything else: the API's JSON 404 or 405, not the mux's plain text.
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		path := req.URL.Path
		allowed, ok := routes[path]
		switch {
		case strings.HasPrefix(path, "/v1/models/"):
			allowed, ok = "GET", true
		case strings.HasPrefix(path, "/backends/"):
			allowed, ok = "DELETE", true
		}
		if !ok {
			writeAPIError(w, api.NotFound(req.Method, path))
			return
		}
		w.Header().Set("Allow", allowed)
		writeAPIError(w, api.MethodNotAllowed(req.Method, path, allowed))
	})
	return mux
}

func writeJSONBody(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeAPIError writes e in the OpenAI error shape, as serve does.
func writeAPIError(w http.ResponseWriter, e *api.Error) {
	b, _ := json.Marshal(e.Body())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(b, '\n'))
}
