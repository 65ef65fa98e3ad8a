package router

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/tenant"
)

// Tenants at the router (Config.Tenants, --tenants). The router terminates client
// authentication: a client's key names its tenant here, the tenant's quotas are taken here
// (the router sees all of its traffic, so its limits are the tenant's global ones), the
// request is routed by the salt the replica will derive (the namespace is in every prefix
// hash and affinity key, so one tenant's prefix never steers another's traffic), and the
// identity goes on to the replica in tenant.Header, signed with the backend key per attempt.
// A tenant.Header a client sent is dropped, whether or not tenants are configured: only the
// router signs it.

// tenantOf returns the tenant requireClient attached to req, or nil.
func tenantOf(req *http.Request) *tenant.Tenant { return tenant.FromContext(req.Context()) }

// routingSalt is the salt a replica will hash req's prompt under: the tenant's namespace
// with the client's cache_salt inside it, or the client's salt without tenants.
func routingSalt(req *http.Request, client string) string { return tenantOf(req).Salt(client) }

// isRouterGeneration reports whether path generates (and so takes a quota slot).
func isRouterGeneration(path string) bool {
	switch path {
	case "/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages":
		return true
	}
	return false
}

// writeDialectError writes e in the error shape of the route's dialect (Anthropic's on
// /v1/messages, OpenAI's elsewhere).
func writeDialectError(w http.ResponseWriter, path string, e *api.Error) {
	if strings.HasPrefix(path, "/v1/messages") {
		status, body := api.AnthropicError(e)
		b, _ := json.Marshal(body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(append(b, '\n'))
		return
	}
	writeAPIError(w, e)
}

// requireTenant is requireClient with Config.Tenants: the key names the tenant, which rides
// on the request's context; a generation takes a slot of its quotas first (429 with
// Retry-After past one).
func (r *Router) requireTenant(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		t := r.tenants.Authenticate(requestKey(req))
		if t == nil {
			r.m.unauthorized.WithLabelValues("client").Inc()
			writeDialectError(w, req.URL.Path, api.Unauthorized(`missing or invalid API key; send "Authorization: Bearer <key>" or "x-api-key: <key>"`))
			return
		}
		req = req.WithContext(tenant.WithContext(req.Context(), t))
		if isRouterGeneration(req.URL.Path) {
			b, ok := r.limiter.Acquire(t, time.Now())
			if !ok {
				r.tm.rejected.WithLabelValues(t.Name, b.Quota).Inc()
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int((b.RetryAfter+time.Second-1)/time.Second))))
				writeDialectError(w, req.URL.Path, &api.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded",
					Param: b.Quota, Message: "tenant " + strconv.Quote(t.Name) + " is over its " + b.Quota + " quota of " +
						strconv.FormatFloat(b.Limit, 'g', -1, 64) + "; retry after " + b.RetryAfter.String()})
				return
			}
			defer r.limiter.Release(t)
			rec := &statusRecorder{ResponseWriter: w}
			h(rec, req)
			r.tm.requests.WithLabelValues(t.Name, strconv.Itoa(cmpStatus(rec.status))).Inc()
			return
		}
		h(w, req)
	}
}

func cmpStatus(s int) int {
	if s == 0 {
		return http.StatusOK
	}
	return s
}

// setTenantHeader drops any tenant.Header the client sent and, for a tenant's request, signs
// a fresh one for the upstream request up, whose body is body (a fresh nonce per attempt: a
// retry is a new statement, the replica's replay guard accepts each once). The signature
// binds the header to up's method, target (path and query, as up writes them on the wire)
// and body: the body was buffered whole to be routed, so its digest costs one pass.
func (r *Router) setTenantHeader(req, up *http.Request, body []byte) {
	up.Header.Del(tenant.Header)
	if t := tenantOf(req); t != nil && r.cfg.BackendKey != "" {
		b := tenant.Binding{Method: up.Method, Target: up.URL.RequestURI(), Body: tenant.BodyDigest(body)}
		up.Header.Set(tenant.Header, tenant.Sign(r.cfg.BackendKey, t, b, time.Now()))
	}
}

// routerTenantMetrics are the router's per-tenant series.
type routerTenantMetrics struct {
	requests *prometheus.CounterVec // stockpot_router_tenant_requests_total{tenant,status}
	rejected *prometheus.CounterVec // stockpot_router_tenant_quota_rejections_total{tenant,quota}
}

func newRouterTenantMetrics(reg prometheus.Registerer) *routerTenantMetrics {
	m := &routerTenantMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_tenant_requests_total",
			Help: "Generation requests the router forwarded (or answered), by tenant and status."}, []string{"tenant", "status"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_tenant_quota_rejections_total",
			Help: "Requests the router answered 429, by tenant and the quota they breached."}, []string{"tenant", "quota"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.rejected)
	}
	return m
}

// prewarmNamespace is what the router reads of a prewarm beside its prompt: whether it is a
// public prefix, or which tenant's namespace it is for.
type prewarmNamespace struct {
	Public bool   `json:"public"`
	Tenant string `json:"tenant"`
}

// prewarmTenant routes an admin prewarm by its namespace: a tenant's prewarm by the salt its
// replica will derive (rq.Salt), and a public prefix to every replica, since each marks its
// own blocks public (the answer is the fan-out's, as GET /v1/cache's). It reports whether it
// answered.
func (r *Router) prewarmTenant(w http.ResponseWriter, req *http.Request, body []byte, rq *Request) bool {
	var ns prewarmNamespace
	_ = json.Unmarshal(body, &ns) // malformed: the replica answers the 400
	if t := r.tenants.Lookup(ns.Tenant); t != nil {
		rq.Salt, rq.Namespace = t.Salt(rq.Salt), t.Salt("")
	}
	if !ns.Public {
		return false
	}
	bs := r.backends()
	if len(bs) == 0 {
		writeAPIError(w, api.Unavailable("%v", ErrNoBackend))
		return true
	}
	out := CacheFanout{Object: "cache.prewarm", Replicas: make([]ReplicaCache, len(bs))}
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc := ReplicaCache{Backend: b.ID, URL: b.URL.String()}
			code, _, rb, err := r.adminCall(req.Context(), b, http.MethodPost, "/v1/cache/prewarm", "", body)
			switch {
			case err != nil:
				rc.Error = err.Error()
			case !json.Valid(rb):
				rc.Status, rc.Error = code, "answer is not JSON"
			default:
				rc.Status, rc.Answer = code, rb
			}
			out.Replicas[i] = rc
		}()
	}
	wg.Wait()
	status := http.StatusOK
	for _, rc := range out.Replicas {
		if rc.Status != http.StatusOK {
			out.Failed++
		}
	}
	if out.Failed > 0 {
		status = http.StatusBadGateway
		if first := out.Replicas[0]; first.Status >= 400 && first.Status < 500 && out.Failed == len(out.Replicas) {
			status = first.Status // every replica refused it: a bad body
		}
	}
	writeJSONBody(w, status, out)
	return true
}
