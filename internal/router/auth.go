package router

import (
	"net/http"
	"strings"

	"stockpot/internal/api"
	"stockpot/internal/apikey"
)

// newKeySet is the set of keys, each trimmed of spaces, empty ones skipped. Keys are
// compared by digest, in constant time whatever their length (internal/apikey).
func newKeySet(keys []string) apikey.Set {
	var trimmed []string
	for _, k := range keys {
		trimmed = append(trimmed, strings.TrimSpace(k))
	}
	return apikey.NewSet(trimmed...)
}

// requestKey returns the key a request presents: "Authorization: Bearer K"
// (OpenAI clients) or, without an Authorization header, "x-api-key: K"
// (Anthropic clients). "" when it presents none.
func requestKey(req *http.Request) string {
	return apikey.FromRequest(req, apikey.Rule{AuthorizationDecides: true})
}

// keyVerdict names what a request presented, for logs (never the key).
func keyVerdict(ks apikey.Set, req *http.Request) (ok bool, verdict string) {
	switch key := requestKey(req); {
	case ks.Len() == 0:
		return false, "not-configured"
	case key == "":
		return false, "missing"
	case ks.Match(key):
		return true, "matched"
	default:
		return false, "wrong"
	}
}

// permissionError is the OpenAI type for an authenticated but forbidden call.
const permissionError = "permission_error"

// requireClient guards the OpenAI endpoints with the client keys (open when
// none are configured).
func (r *Router) requireClient(h http.HandlerFunc) http.HandlerFunc {
	if r.tenants != nil {
		return r.requireTenant(h)
	}
	if r.clientKeys.Len() == 0 {
		return h
	}
	return func(w http.ResponseWriter, req *http.Request) {
		if !r.clientKeys.Match(requestKey(req)) {
			r.m.unauthorized.WithLabelValues("client").Inc()
			writeAPIError(w, api.Unauthorized(`missing or invalid API key; send "Authorization: Bearer <key>" or "x-api-key: <key>"`))
			return
		}
		h(w, req)
	}
}

// requireMetrics guards /metrics with the metrics or admin keys (endpoint_auth.go): open
// while no key of any kind is configured, or with PublicMetrics.
func (r *Router) requireMetrics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		open := !r.anyKeys() || r.cfg.PublicMetrics
		if e := r.operatorCheck(requestKey(req), []apikey.Set{r.metricsKeys, r.adminKeys}, "/metrics", "--metrics-key or --admin-key (or --public-metrics)", open); e != nil {
			r.m.unauthorized.WithLabelValues("metrics").Inc()
			writeAPIError(w, e)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// requireAdmin guards the membership endpoints (every method of /backends):
// they need the admin key, and without one configured they are off, so a
// router can never be re-pointed by whoever reaches it. Every call, accepted
// or refused, is logged with the caller's address and whether its key
// matched.
func (r *Router) requireAdmin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		ok, verdict := keyVerdict(r.adminKeys, req)
		log := r.cfg.Logger.With("method", req.Method, "path", req.URL.Path, "remote", req.RemoteAddr, "admin_key", verdict)
		switch {
		case verdict == "not-configured":
			r.m.unauthorized.WithLabelValues("admin").Inc()
			log.Warn("router: membership call refused")
			writeAPIError(w, &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "admin_key_required",
				Message: "membership changes and the backend list need --admin-key; this router was started without one"})
			return
		case !ok:
			r.m.unauthorized.WithLabelValues("admin").Inc()
			log.Warn("router: membership call refused")
			if e := r.forbiddenKnown(requestKey(req), "/backends", "--admin-key"); e != nil {
				writeAPIError(w, e)
				return
			}
			writeAPIError(w, api.Unauthorized(`missing or invalid admin key; send "Authorization: Bearer <admin key>"`))
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		h(rec, req)
		if req.Method != http.MethodGet {
			log.Info("router: membership call accepted", "status", rec.status)
		}
	}
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (streams flush through it, and
// bodies get their read deadline).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

// setUpstreamAuth decides what credentials a forwarded request carries.
// When the router checks client keys it terminates auth: the client's key
// never leaves the router, and the backend key (if any) takes its place.
// Without client keys the router is transparent and the client's headers
// pass through as they came. body is up's body (the tenant header signs it).
func (r *Router) setUpstreamAuth(req, up *http.Request, body []byte) {
	h := up.Header
	r.setTenantHeader(req, up, body) // tenants.go: a client's is dropped, the router's signed
	if r.clientKeys.Len() == 0 && r.tenants == nil {
		return
	}
	h.Del("Authorization")
	h.Del("X-Api-Key")
	if r.cfg.BackendKey != "" {
		h.Set("Authorization", "Bearer "+r.cfg.BackendKey)
	}
}

// keyTransport adds the backend key to the router's own calls to replicas
// (health checks, /tokenize, /v1/kv-events and its snapshot).
type keyTransport struct {
	base http.RoundTripper
	key  string
}

func (t keyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.key == "" {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.key)
	return t.base.RoundTrip(req)
}
