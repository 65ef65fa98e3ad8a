package server

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/apikey"
	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
	"stockpot/internal/tenant"
)

// Tenants: who a request belongs to (tenant.go's package doc says why salts are derived here).
//
//   - With Config.Tenants, a request's key (Bearer or x-api-key) names its tenant; a request
//     from the router names it in the signed tenant.Header instead, which is trusted only when
//     it verifies with Config.BackendKey for this request's method, target and body (a header
//     that does not verify is a 401, never a fallback to the key; a body other than the
//     signed one is a 401 when readBody reaches its end). The backend key alone
//     authenticates the router's own calls (/tokenize, the block events) but no generation:
//     those need a tenant.
//   - Without a tenants file, Config.APIKeys are the single tenant "default" in the legacy
//     namespace (tenant.Single): salts as the client sends them, as before tenants existed.
//   - The tenant rides on the request's context (tenant.FromContext); generate derives the
//     cache salt from it, and the generation routes take a slot of its quotas first.

// errNeedsTenant refuses a generation that authenticated as no tenant on a server that has
// tenants (the router's own key without a signed identity).
var errNeedsTenant = &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "tenant_required",
	Message: "this server serves tenants (--tenants): generation needs a tenant's key, or the router's signed identity header"}

// authenticate names the tenant of r: nil with no error for an anonymous request (no keys at
// all) and for the router's own calls, an *api.Error 401 for a missing or wrong key or an
// identity header that does not verify.
func (s *Server) authenticate(r *http.Request) (*tenant.Tenant, error) {
	if h := r.Header.Get(tenant.Header); h != "" {
		c, err := tenant.Verify(s.cfg.BackendKey, h, tenant.RequestBinding(r.Method, r.URL.RequestURI()), s.cfg.Now(), s.replay)
		if err == nil && r.ContentLength == 0 && c.Body != tenant.BodyDigest(nil) {
			err = tenant.ErrHeaderBody // no body, signed with one: refused before any handler runs
		}
		if err != nil {
			return nil, api.Unauthorized("the " + tenant.Header + " header does not verify (" + err.Error() + "); only the router, holding --backend-key, may send it")
		}
		// The body is checked against the signed digest as it is read (readBody: a 401).
		r.Body = c.CheckBody(r.Body)
		if s.tenants == nil {
			return c.Tenant(), nil
		}
		t := s.tenants.Lookup(c.Name)
		if t == nil || t.Namespace != c.Namespace {
			return nil, &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "unknown_tenant",
				Message: "the router names tenant " + strconv.Quote(c.Name) + ", which this server's --tenants file does not have (with that namespace)"}
		}
		return t, nil
	}
	if s.tenants == nil {
		return nil, nil // no keys configured: open, anonymous
	}
	// "Authorization: Bearer KEY" (OpenAI clients, the router), then "x-api-key: KEY"
	// (Anthropic clients): either may carry the key.
	keys := make([]string, 0, 2)
	if key, ok := apikey.Bearer(r); ok {
		keys = append(keys, key)
	}
	if key := strings.TrimSpace(r.Header.Get("X-Api-Key")); key != "" {
		keys = append(keys, key)
	}
	for _, key := range keys {
		if t := s.tenants.Authenticate(key); t != nil {
			return t, nil
		}
		if s.backendKeys.Match(key) { // Config.BackendKey, compared as every key is (internal/apikey)
			return nil, nil // the router's own calls
		}
	}
	return nil, errUnauthorized
}

// isGenerationPath reports whether path runs the engine (and so takes a quota slot).
func isGenerationPath(p string) bool {
	switch p {
	case pipeline.PathCompletions, pipeline.PathChat, pipeline.PathResponses, pipeline.PathMessages:
		return true
	}
	return false
}

// quotaError is the 429 of a breached quota; Retry-After goes in the header.
func quotaError(t *tenant.Tenant, b tenant.Breach) *api.Error {
	what := "requests per second"
	if b.Quota == tenant.QuotaConcurrent {
		what = "concurrent requests"
	}
	return &api.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "rate_limit_exceeded", Param: b.Quota,
		Message: "tenant " + strconv.Quote(t.Name) + " is over its quota of " + strconv.FormatFloat(b.Limit, 'g', -1, 64) + " " + what +
			"; retry after " + b.RetryAfter.String()}
}

// retryAfter is the Retry-After header value for d: whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) string {
	sec := (d + time.Second - 1) / time.Second
	return strconv.Itoa(max(1, int(sec)))
}

// admitTenant attaches r's tenant to its context and, on a generation route, takes a quota
// slot. On refusal it has answered the client (in the route's dialect) and returns ok false;
// otherwise release must be called when the request ends.
func (s *Server) admitTenant(w http.ResponseWriter, r *http.Request, writeErr func(http.ResponseWriter, error)) (_ *http.Request, release func(), ok bool) {
	t, err := s.authenticate(r)
	if err != nil {
		if err == errUnauthorized {
			err = s.apiRefusal(r) // a 403 for a key this server holds for another endpoint
		}
		writeErr(w, err)
		return r, nil, false
	}
	if t != nil {
		r = r.WithContext(tenant.WithContext(r.Context(), t))
	}
	if !isGenerationPath(r.URL.Path) {
		return r, func() {}, true
	}
	if t == nil && s.tenants.Len() > 0 && s.cfg.Tenants != nil {
		writeErr(w, errNeedsTenant)
		return r, nil, false
	}
	b, admitted := s.limiter.Acquire(t, s.cfg.Now())
	if !admitted {
		s.tenantMetrics.rejected.WithLabelValues(tenant.NameOf(t), b.Quota).Inc()
		w.Header().Set("Retry-After", retryAfter(b.RetryAfter))
		writeErr(w, quotaError(t, b))
		return r, nil, false
	}
	return r, func() { s.limiter.Release(t) }, true
}

// tenantMetrics are the per-tenant series. The tenant label takes the names of the tenants
// file (bounded by it), or those the router signs, "default" for anonymous requests.
type tenantMetrics struct {
	requests *prometheus.CounterVec // stockpot_tenant_requests_total{tenant,status}
	tokens   *prometheus.CounterVec // stockpot_tenant_prompt_tokens_total{tenant,source="reused|computed"}
	rejected *prometheus.CounterVec // stockpot_tenant_quota_rejections_total{tenant,quota}
	cross    *prometheus.CounterVec // stockpot_tenant_cross_reuse_tokens_total{tenant}
	// stockpot_tenant_pins_limited_total{tenant,reason}: requests whose pin held less than
	// asked, by the limit (engine.PinLimit*).
	pinsLimited *prometheus.CounterVec
}

func newTenantMetrics(reg prometheus.Registerer) (*tenantMetrics, error) {
	m := &tenantMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_tenant_requests_total", Help: "Generation requests by tenant and HTTP status (499: the client went away)."},
			[]string{"tenant", "status"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_tenant_prompt_tokens_total", Help: "Prompt tokens of finished generations by tenant: reused from a cache tier, or computed."},
			[]string{"tenant", "source"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_tenant_quota_rejections_total", Help: "Requests answered 429 by tenant and the quota they breached."},
			[]string{"tenant", "quota"}),
		cross: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_tenant_cross_reuse_tokens_total", Help: "Prompt tokens a tenant reused from blocks another tenant's request committed to the working pool (only public blocks can be: the audit of isolation)."},
			[]string{"tenant"}),
		pinsLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stockpot_tenant_pins_limited_total", Help: "Requests (and prewarms) whose pin held less than asked, by tenant and the limit: pin_budget, tenant_quota (its cache_bytes), other_tenants_shares (what was free is other tenants' guaranteed shares)."},
			[]string{"tenant", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.tokens, m.rejected, m.cross, m.pinsLimited} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe counts one finished generation of t.
func (m *tenantMetrics) observe(t *tenant.Tenant, res *runner.Result, err error) {
	name := tenant.NameOf(t)
	switch {
	case err == nil:
		m.requests.WithLabelValues(name, "200").Inc()
		m.tokens.WithLabelValues(name, "reused").Add(float64(res.Usage.CachedTokens()))
		m.tokens.WithLabelValues(name, "computed").Add(float64(res.Usage.ComputedTokens))
		if n := res.Usage.CrossTenantTokens; n > 0 {
			m.cross.WithLabelValues(name).Add(float64(n))
		}
		if why := pinLimit(res.Usage.Pins); why != "" {
			m.pinsLimited.WithLabelValues(name, why).Inc()
		}
	case errors.Is(err, runner.ErrClientGone):
		m.requests.WithLabelValues(name, "499").Inc()
	default:
		m.requests.WithLabelValues(name, strconv.Itoa(api.AsError(err).Status)).Inc()
	}
}

// tenantRequest fills the tenant's part of an engine request: the salt derived from its
// namespace (the client's cache_salt only subdivides it), and its principal for the engine's
// cross-tenant audit and cache quotas.
func tenantRequest(t *tenant.Tenant, req *engine.Request) {
	req.CacheSalt = t.Salt(req.CacheSalt)
	if t != nil {
		req.Tenant = t.Name
		req.PublicReads = t.PublicReads && t.Namespace != ""
		req.Owner, req.DeviceQuotaBytes = t.Owner(), t.Quotas.CacheBytes[kvtier.Device] // and its pins' cap and share (the engine's PinOwnerBytes)
	}
}

// publicMarker is the optional ability of a CacheAdmin to mark blocks public (the engine).
type publicMarker interface {
	MarkPublic(salt string, tokens []int32) (int, error)
}

// operatorTenant is the audit's name for the operator's own prewarms: outside the tenants
// file's names (which have no parentheses), so its blocks count as another tenant's for all.
const operatorTenant = "(operator)"

// prewarmNamespace puts an admin prewarm in its namespace: public (marked public, in the
// public namespace), a named tenant's (its derived salt), or, without either, the salt as
// given (the legacy namespace).
func (s *Server) prewarmNamespace(req *api.PrewarmRequest, ereq *engine.Request) error {
	switch {
	case req.Public:
		pm, ok := s.cfg.CacheAdmin.(publicMarker)
		if !ok {
			return &api.Error{Status: http.StatusNotImplemented, Type: api.TypeInvalidRequest, Code: "not_implemented", Param: "public",
				Message: "this server's cache cannot mark public prefixes"}
		}
		ereq.CacheSalt, ereq.Tenant = tenant.PublicSalt(), operatorTenant
		if _, err := pm.MarkPublic(ereq.CacheSalt, ereq.Prompt); err != nil {
			return api.Invalid("public", "%v", err)
		}
	case req.Tenant != "":
		t := s.cfg.Tenants.Lookup(req.Tenant)
		if t == nil {
			return api.Invalid("tenant", "no tenant %s in this server's --tenants file", api.Quote(req.Tenant))
		}
		tenantRequest(t, ereq)
	}
	return nil
}

// responseKey is where a stored Responses answer is kept: under its tenant, so that
// previous_response_id never continues another tenant's conversation (its items would become
// this tenant's prompt).
func responseKey(r *http.Request, id string) string {
	t := tenant.FromContext(r.Context())
	if t == nil {
		return id
	}
	return t.Name + "\x00" + t.Namespace + "\x00" + id
}
