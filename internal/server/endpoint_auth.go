package server

import (
	"net/http"
	"strings"

	"stockpot/internal/api"
	"stockpot/internal/apikey"
	"stockpot/internal/handoff"
)

// Endpoint keys. Besides the API (APIKeys), four kinds of endpoint show what every tenant
// does, and each takes its own keys:
//
//	right      endpoints                                          keys that grant it
//	admin      /v1/cache, /v1/cache/prewarm, pins, /v1/requests/recent   AdminKeys
//	events     /v1/kv-events and /v1/kv-events/snapshot          EventsKeys, AdminKeys, BackendKey
//	dashboard  /dashboard, /dashboard/events, /dashboard/state   DashboardKeys, AdminKeys
//	metrics    /metrics                                          MetricsKey, AdminKeys
//
// An admin key is the operator's: it grants every right but the API's. An API key grants the
// API only. /health is always open (load balancers probe it).
//
// Defaults, so that nothing that shows other tenants' prompts is open by accident:
//   - With no key of any kind configured (a laptop), the events, the dashboard and /metrics
//     are open, and the admin API is off (403).
//   - Once any key is configured, every endpoint but /health needs a key that grants it; an
//     endpoint whose right no configured key grants answers 403 naming the flag to set.
//     /metrics can be opened on purpose with PublicMetrics (--public-metrics).
//   - The API stays open while no API key is configured (single-user serving behind an
//     operator's own keys).
//
// Answers: 401 when no key or an unknown key is presented; 403 (permission_error) when the
// key is known (it grants something) but not this right, and when no key grants it at all.
// Keys come as "Authorization: Bearer KEY" or "x-api-key: KEY"; the dashboard also takes
// ?key= (browsers' EventSource sends no headers).

// right is what an endpoint needs.
type right uint8

const (
	rightAPI right = iota
	rightAdmin
	rightEvents
	rightDashboard
	rightMetrics
	rightTransfer
)

// rightNames: the error messages' names of each right and the flags that grant it.
var rightNames = [...]struct{ name, flags string }{
	rightAPI:       {"the API", "--api-key"},
	rightAdmin:     {"the admin API", "--admin-key"},
	rightEvents:    {"the block events", "--events-key or --admin-key"},
	rightDashboard: {"the dashboard", "--dashboard-key or --admin-key"},
	rightMetrics:   {"/metrics", "--metrics-key or --admin-key (or --public-metrics)"},
	rightTransfer:  {"the KV transfers", "--backend-key or --admin-key"},
}

// grants returns the key sets that grant need.
func (s *Server) grants(need right) []apikey.Set {
	switch need {
	case rightAPI:
		return []apikey.Set{s.apiKeys}
	case rightAdmin:
		return []apikey.Set{s.adminKeys}
	case rightEvents:
		return []apikey.Set{s.eventsKeys, s.adminKeys, s.backendKeys}
	case rightDashboard:
		return []apikey.Set{s.dashboardKeys, s.adminKeys}
	case rightMetrics:
		return []apikey.Set{s.metricsKeys, s.adminKeys}
	case rightTransfer:
		return []apikey.Set{s.backendKeys, s.adminKeys}
	}
	return nil
}

// anyKeys reports whether the server holds a key of any kind: then no operator endpoint is
// open unless its right is granted (or /metrics is public on purpose).
func (s *Server) anyKeys() bool {
	return s.cfg.TenantKey != nil || s.cfg.Tenants != nil || s.apiKeys.Len()+s.adminKeys.Len()+s.eventsKeys.Len()+s.dashboardKeys.Len()+s.metricsKeys.Len()+s.backendKeys.Len() > 0
}

// presentedKey is the key r carries: a bearer token, else x-api-key, else (query: the
// dashboard's paths) ?key=. "" when none.
func presentedKey(r *http.Request, query bool) string {
	return apikey.FromRequest(r, apikey.Rule{Query: query})
}

// knownKey reports whether key is any key this server holds (it then deserves a 403, not a
// 401, on an endpoint it does not grant). Every set is compared, in constant time per key.
func (s *Server) knownKey(key string) bool {
	m := false
	for _, ks := range []apikey.Set{s.apiKeys, s.adminKeys, s.eventsKeys, s.dashboardKeys, s.metricsKeys, s.backendKeys} {
		m = ks.Match(key) || m
	}
	if s.cfg.Tenants != nil && s.cfg.Tenants.Authenticate(key) != nil {
		m = true
	}
	if s.cfg.TenantKey != nil {
		m = s.cfg.TenantKey(key) || m
	}
	return m
}

// checkRight returns nil when r may call an endpoint that needs need, else the error to
// answer (a refusal is logged with the caller's address, never the key).
func (s *Server) checkRight(r *http.Request, need right, query bool) *api.Error {
	sets := s.grants(need)
	configured := false
	for _, ks := range sets {
		configured = configured || ks.Len() > 0
	}
	n := rightNames[need]
	if need == rightMetrics && s.cfg.PublicMetrics {
		return nil
	}
	if !configured {
		if need != rightAdmin && (need == rightAPI || !s.anyKeys()) {
			return nil
		}
		s.cfg.Logger.Warn("call refused: no key grants it", "right", n.name, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		code := "admin_key_required"
		if need != rightAdmin {
			code = "key_required"
		}
		return &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: code,
			Message: n.name + " (" + r.URL.Path + ") needs " + n.flags + "; this server was started without one"}
	}
	key := presentedKey(r, query)
	if key != "" {
		ok := false
		for _, ks := range sets {
			ok = ks.Match(key) || ok
		}
		if ok {
			return nil
		}
	}
	if key != "" && s.knownKey(key) {
		s.cfg.Logger.Warn("call refused: the key does not grant it", "right", n.name, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		return &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "forbidden",
			Message: "this key may not call " + n.name + " (" + r.URL.Path + "); it needs a key from " + n.flags}
	}
	s.cfg.Logger.Warn("call refused: missing or unknown key", "right", n.name, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	return api.Unauthorized("missing or invalid key for " + n.name + "; send \"Authorization: Bearer <key>\" with a key from " + n.flags)
}

// apiRefusal is the answer to a request on the API that s.authorized refused: a 403 when it
// carries a key this server holds for something else (an events or admin key), else the 401.
func (s *Server) apiRefusal(r *http.Request) *api.Error {
	if key := presentedKey(r, false); key != "" && s.knownKey(key) {
		return &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "forbidden",
			Message: "this key may not call the API (" + r.URL.Path + "); it needs an API key (--api-key)"}
	}
	return errUnauthorized
}

// endpointRight is the right path needs before routing, and whether the check happens here
// (false: /health, open; and the admin API, checked by its handlers with adminAllowed).
func endpointRight(path string) (right, bool) {
	switch {
	case path == "/health":
		return 0, false
	case path == cachePath || path == cachePrewarmPath || path == cacheProbePath || path == recentRequestsPath:
		return rightAdmin, false
	case path == "/metrics":
		return rightMetrics, true
	case isDashboardPath(path):
		return rightDashboard, true
	case path == eventsPath || strings.HasPrefix(path, eventsPath+"/"):
		return rightEvents, true
	case strings.HasPrefix(path, handoff.TransferPath):
		return rightTransfer, true
	}
	return rightAPI, true
}

// eventsPath is where cmd/stockpot serves the replica's block events (beside Handler).
const eventsPath = "/v1/kv-events"

// RequireEventsKey wraps h, the replica's block events, with the events right: they name every
// cached block of every tenant, so once any key is configured they need an events key
// (--events-key, what the router sends as --backend-events-key) or an admin key.
func (s *Server) RequireEventsKey(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := s.checkRight(r, rightEvents, false); e != nil {
			writeError(w, e)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// errUnauthorized is the answer to a missing or wrong API key.
var errUnauthorized = api.Unauthorized("missing or invalid API key; send \"Authorization: Bearer <key>\" or \"x-api-key: <key>\"")
