package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"stockpot/internal/api"
	"stockpot/internal/apikey"
	"stockpot/internal/connlimit"
	"stockpot/internal/engine"
	"stockpot/internal/handoff"
	"stockpot/internal/membudget"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
	"stockpot/internal/tenant"
)

// Server serves the HTTP API on top of an engine.Generator.
type Server struct {
	cfg      Config
	gen      engine.Generator
	tok      pipeline.Tokenizer
	pipe     *pipeline.Pipeline // builds what the engine runs from a parsed request
	run      *runner.Runner     // runs it: the engine stream, stop strings, TTFT floor, misses
	metrics  *metrics
	gatherer prometheus.Gatherer // nil when the Registerer is not also a Gatherer
	handler  http.Handler
	// metricsHandler serves gatherer; nil when gatherer is.
	metricsHandler http.Handler
	routes         map[string]map[string]http.HandlerFunc // path -> method -> handler
	started        time.Time

	responses *pipeline.ResponseStore            // for /v1/responses' previous_response_id
	listener  atomic.Pointer[connlimit.Listener] // the one Serve accepts on, once it runs

	apiKeys     apikey.Set // Config.APIKeys
	adminKeys   apikey.Set // Config.AdminKeys: the cache admin API
	metricsKeys apikey.Set // Config.MetricsKey
	// eventsKeys, dashboardKeys: Config.EventsKeys, Config.DashboardKeys (endpoint_auth.go);
	// backendKeys: Config.BackendKey (the router's: it grants the block events too).
	eventsKeys, dashboardKeys, backendKeys apikey.Set
	// tenants authenticates requests (Config.Tenants, or Config.APIKeys as tenant.Single;
	// nil: open); limiter holds their quotas; replay remembers the router's signed
	// identities (tenants.go).
	tenants       *tenant.Set
	limiter       *tenant.Limiter
	replay        *tenant.ReplayGuard
	tenantMetrics *tenantMetrics

	dash   *dashboardState // GET /dashboard (dashboard.go)
	recent recentRing      // GET /v1/requests/recent (recent.go)

	// reqmem is the request memory budget every request with a body reserves from before it
	// is read (reqmem.go).
	reqmem        *membudget.Budget
	reqmemMetrics *reqmemMetrics

	draining atomic.Bool
	inflight sync.WaitGroup // handlers running; Serve waits for them after a forced drain
}

// New builds a Server. Metrics register on reg; when reg is also a prometheus.Gatherer (a
// *prometheus.Registry is) /metrics serves it, and with a nil reg the server makes its own
// registry.
func New(cfg Config, gen engine.Generator, tok pipeline.Tokenizer, reg prometheus.Registerer) (*Server, error) {
	c, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if gen == nil || tok == nil {
		return nil, errors.New("server: New needs a Generator and a Tokenizer")
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &Server{cfg: c, gen: gen, tok: tok, started: c.Now(),
		pipe:    pipeline.New(tok, pipeline.Config{ContextLength: c.ContextLength, MaxPromptTokens: c.MaxPromptTokens, Grammar: c.Grammar, Blend: c.Blend}),
		apiKeys: apikey.NewSet(c.APIKeys...), metricsKeys: apikey.NewSet(c.MetricsKey), adminKeys: apikey.NewSet(c.AdminKeys...),
		eventsKeys: apikey.NewSet(c.EventsKeys...), dashboardKeys: apikey.NewSet(c.DashboardKeys...), backendKeys: apikey.NewSet(c.BackendKey),
		tenants: c.Tenants, limiter: tenant.NewLimiter(), replay: tenant.NewReplayGuard(0), reqmem: membudget.New(c.RequestMemoryBytes),
		responses: pipeline.NewResponseStore(pipeline.ResponseStoreSize, c.ResponsesStoreBytes)}
	if s.tenants == nil {
		s.tenants = tenant.Single(c.APIKeys)
	}
	var errs [5]error // every series registers on reg
	s.metrics, errs[0] = newMetrics(reg, gen, c)
	s.run, errs[1] = runner.New(gen, tok, runner.Config{BlockSize: c.BlockSize, MaxPromptTokens: c.MaxPromptTokens, OnFloorPlan: c.onFloorPlan}, reg)
	s.tenantMetrics, errs[2] = newTenantMetrics(reg)
	s.reqmemMetrics, errs[3] = newReqmemMetrics(reg, s.reqmem)
	errs[4] = c.Handoff.Register(reg) // stockpot_kv_transfer_*
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("server: registering metrics: %w", err)
	}
	if g, ok := reg.(prometheus.Gatherer); ok {
		s.gatherer = g
		s.metricsHandler = promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	}
	s.routes = map[string]map[string]http.HandlerFunc{
		"/v1/completions":           {http.MethodPost: s.handleCompletions},
		"/v1/chat/completions":      {http.MethodPost: s.handleChat},
		"/v1/responses":             {http.MethodPost: s.handleResponses},
		"/v1/messages":              {http.MethodPost: s.handleMessages},
		"/v1/messages/count_tokens": {http.MethodPost: s.handleCountTokens},
		"/v1/models":                {http.MethodGet: s.handleModels},
		"/tokenize":                 {http.MethodPost: s.handleTokenize},
		renderPath:                  {http.MethodPost: s.handleTokenizeRender}, // render.go
		"/detokenize":               {http.MethodPost: s.handleDetokenize},
		"/health":                   {http.MethodGet: s.handleHealth},
		"/metrics":                  {http.MethodGet: s.handleMetrics},
		"/dashboard":                {http.MethodGet: s.handleDashboard},
		"/dashboard/events":         {http.MethodGet: s.handleDashboardEvents},
		"/dashboard/state":          {http.MethodGet: s.handleDashboardState},
		recentRequestsPath:          {http.MethodGet: s.handleRecentRequests},
	}
	for p, m := range s.cacheAdminRoutes() {
		s.routes[p] = m
	}
	s.dash = newDashboardState(s)
	s.handler = http.HandlerFunc(s.serveHTTP)
	return s, nil
}

// Handler returns the server's http.Handler (for httptest or another http.Server).
func (s *Server) Handler() http.Handler { return s.handler }

// Config returns the effective configuration, defaults filled in.
func (s *Server) Config() Config { return s.cfg }

// Serve serves on ln until ctx ends, then drains: /health turns 503, the listener closes,
// running requests get up to DrainTimeout to finish, and the ones still running after that are
// cancelled (freeing their engine blocks). It returns nil after a drain, or the error that
// stopped serving.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return s.ServeHandler(ctx, ln, s.handler)
}

// ServeHandler is Serve with h in front of Handler (h usually wraps it with extra routes,
// such as the replica's block events); draining works the same.
func (s *Server) ServeHandler(ctx context.Context, ln net.Listener, h http.Handler) error {
	baseCtx, cancelBase := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelBase()
	// No ReadTimeout or WriteTimeout here: net/http's would stay armed while a handler runs,
	// cancelling (ReadTimeout, through the connection's background read) or cutting
	// (WriteTimeout) every stream longer than it. The body's read time is bounded per request
	// instead (bodyDeadline).
	if s.cfg.TLS != nil {
		// TLS under the limit listener: the slot is taken before the handshake, and the
		// rewrite of net/http's plain-text answers (internal/connlimit) sees the plaintext. The
		// handshake runs on the first read, inside ReadHeaderTimeout; a client without a valid
		// certificate (mutual TLS) fails there and its connection closes.
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	cl := connlimit.New(ln, connlimit.Config{Max: s.cfg.MaxConnections, PerClient: s.cfg.MaxConnectionsPerClient, Reserve: connlimit.HealthReserve,
		HeaderTimeout: s.cfg.ReadHeaderTimeout, IdleTimeout: s.cfg.IdleTimeout, MaxHeaderBytes: s.cfg.MaxHeaderBytes})
	s.listener.Store(cl)
	ln = cl
	hs := &http.Server{
		Handler:           healthGate(h),
		ConnContext:       connlimit.ConnContext,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return baseCtx },
		ErrorLog:          slog.NewLogLogger(s.cfg.Logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.dash.hub.Close() // the dashboard's streams never end on their own
	s.cfg.Logger.Info("server draining", "timeout", s.cfg.DrainTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.DrainTimeout)
	err := hs.Shutdown(sctx)
	cancel()
	if err != nil {
		s.cfg.Logger.Warn("drain timeout; cancelling running requests", "timeout", s.cfg.DrainTimeout)
		cancelBase()
		_ = hs.Close()
	}
	<-errc // http.ErrServerClosed
	s.inflight.Wait()
	return nil
}

// serveHTTP is the outermost handler: panic recovery, routing, auth, body limit.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	rw := &responseWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.cfg.Logger.Error("panic in handler", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			if !rw.wroteHeader {
				writeError(rw, api.Internal("internal server error (recovered panic; see the server log)"))
			}
		}
	}()
	if r.Body != nil && r.Body != http.NoBody {
		// Armed before any check: net/http reads what a handler left of a body after it
		// returns, so a slow body answered 401 would hold its connection too.
		r.Body = newBodyDeadline(w, r.Body, time.Now().Add(s.cfg.ReadTimeout))
	}
	path := r.URL.Path
	writeError := writeError
	if isMessagesPath(path) {
		writeError = writeAnthropicError // Anthropic's clients read their own error shape
	}
	if need, here := endpointRight(path); here { // endpoint_auth.go
		if need == rightAPI {
			// Authenticated once (a router's signed identity is single-use): admitTenant
			// answers a refusal, a 403 for a key held for another endpoint (apiRefusal).
			var release func()
			var ok bool
			if r, release, ok = s.admitTenant(rw, r, writeError); !ok {
				return
			}
			defer release()
			r = s.withPrincipal(r) // the TTFT floor's (principal.go)
		} else if e := s.checkRight(r, need, need == rightDashboard); e != nil {
			writeError(rw, e)
			return
		}
	}
	methods, ok := s.routes[path]
	if !ok {
		if name, found := strings.CutPrefix(path, "/v1/models/"); found && name != "" {
			methods = map[string]http.HandlerFunc{http.MethodGet: s.modelHandler(name)}
		} else if strings.HasPrefix(path, handoff.TransferPath) && len(path) > len(handoff.TransferPath) {
			methods = map[string]http.HandlerFunc{http.MethodGet: s.handleTransfer}
		} else {
			writeError(rw, api.NotFound(r.Method, path))
			return
		}
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	h, ok := methods[method]
	if !ok {
		allowed := make([]string, 0, len(methods))
		for m := range methods {
			allowed = append(allowed, m)
		}
		sort.Strings(allowed)
		rw.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(rw, api.MethodNotAllowed(r.Method, path, strings.Join(allowed, ", ")))
		return
	}
	if r.ContentLength > s.cfg.MaxBodyBytes {
		writeError(rw, api.TooLarge(s.cfg.MaxBodyBytes))
		return
	}
	r.Body = http.MaxBytesReader(rw, r.Body, s.cfg.MaxBodyBytes)
	release, e := s.reserveRequest(r) // reqmem.go
	if e != nil {
		rw.Header().Set("Retry-After", retryAfterSeconds)
		writeError(rw, e)
		return
	}
	defer release()
	h(rw, r)
}

// bodyDeadline bounds the time to read a request body with a read deadline on the connection,
// cleared once the whole body has been read, so that the connection's background read, which
// notices a client hanging up during a long stream, runs without one. After a failed read the
// deadline stays: net/http's read of what is left of the body then fails at once and the
// connection is closed, instead of waiting on a slow client without a bound.
type bodyDeadline struct {
	io.ReadCloser
	rc      *http.ResponseController
	cleared bool
}

func newBodyDeadline(w http.ResponseWriter, body io.ReadCloser, deadline time.Time) io.ReadCloser {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(deadline) != nil {
		return body // not a net/http connection (httptest.ResponseRecorder): nothing to bound
	}
	return &bodyDeadline{ReadCloser: body, rc: rc}
}

func (b *bodyDeadline) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.cleared {
		b.cleared = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// readBody reads the request body, mapping the size limit to a 413. A body of declared
// length is read into one buffer of that size (io.ReadAll's doubling would hold up to twice
// it); a body that is not UTF-8 is refused, as JSON text must be (RFC 8259 section 8.1):
// json.Unmarshal would turn each bad byte into U+FFFD, three bytes and three byte-level BPE
// characters, and so triple what tokenizing it costs past what reqmem.go reserved for it.
func (s *Server) readBody(r *http.Request) ([]byte, error) {
	var b []byte
	var err error
	if n := r.ContentLength; n > 0 && n <= s.cfg.MaxBodyBytes {
		var buf bytes.Buffer
		buf.Grow(int(n) + bytes.MinRead) // ReadFrom wants MinRead free to see EOF without growing
		_, err = buf.ReadFrom(r.Body)
		b = buf.Bytes()
	} else {
		b, err = io.ReadAll(r.Body)
	}
	if err == nil && !utf8.Valid(b) {
		return nil, api.Invalid("", "the request body is not valid UTF-8 (JSON text must be, RFC 8259)")
	}
	if err != nil {
		var ae *api.Error // a chunked body the request memory budget could not cover (reqmem.go)
		if errors.As(err, &ae) {
			return nil, ae
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, api.TooLarge(mbe.Limit)
		}
		if errors.Is(err, tenant.ErrHeaderBody) {
			return nil, api.Unauthorized("the " + tenant.Header + " header does not verify (" + err.Error() + "); only the router, holding --backend-key, may send it")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &api.Error{Status: http.StatusRequestTimeout, Type: api.TypeInvalidRequest, Code: "request_timeout",
				Message: fmt.Sprintf("the request body did not arrive within %v (--read-timeout)", s.cfg.ReadTimeout)}
		}
		return nil, api.Invalid("", "reading request body: %v", err)
	}
	return b, nil
}

// responseWriter remembers whether the header went out (for panic recovery) and the status.
type responseWriter struct {
	http.ResponseWriter
	wroteHeader bool
	status      int
}

func (w *responseWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.wroteHeader, w.status = true, code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.wroteHeader, w.status = true, http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// FlushError lets streaming handlers flush through the wrapper and learn that the client is
// gone (http.ResponseController.Flush prefers it to Flush).
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.wroteHeader, w.status = true, http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush is FlushError for callers that use http.Flusher; they cannot see the error.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// Unwrap serves http.ResponseController.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(api.Internal("encoding response: %v", err))
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError writes err (an *api.Error, or any error as a 500) in OpenAI shape.
func writeError(w http.ResponseWriter, err error) {
	e := api.AsError(err)
	writeJSON(w, e.Status, e)
}

// newID returns prefix followed by 24 random hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
