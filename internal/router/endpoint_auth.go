package router

import (
	"net/http"

	"stockpot/internal/api"
	"stockpot/internal/apikey"
)

// The router's operator endpoints and who may call them (as serve's, internal/server's
// endpoint_auth.go):
//
//	endpoint                         keys that grant it
//	/backends (every method)         AdminKeys (none configured: off, 403)
//	/v1/cache, /v1/cache/prewarm     AdminKeys (none configured: off, 403)
//	/dashboard, /events, /state      DashboardKeys, AdminKeys
//	/metrics                         MetricsKeys, AdminKeys
//
// With no key of any kind the dashboard and /metrics are open; once any key is configured
// they need a key that grants them (403 naming the flag when none does), except /metrics with
// PublicMetrics. A known key without the right gets a 403, a missing or unknown key a 401.

// anyKeys reports whether the router holds a key of any kind.
func (r *Router) anyKeys() bool {
	return r.clientKeys.Len()+r.adminKeys.Len()+r.metricsKeys.Len()+r.dashboardKeys.Len() > 0 || r.tenants != nil
}

// knownKey reports whether key is any key the router holds.
func (r *Router) knownKey(key string) bool {
	m := false
	if r.tenants != nil && r.tenants.Authenticate(key) != nil {
		m = true
	}
	for _, ks := range []apikey.Set{r.clientKeys, r.adminKeys, r.metricsKeys, r.dashboardKeys} {
		m = ks.Match(key) || m
	}
	return m
}

// operatorCheck returns nil when key may call an endpoint granted by sets, else the refusal.
// name and flags word the messages; open says whether the endpoint is open while no key
// grants it.
func (r *Router) operatorCheck(key string, sets []apikey.Set, name, flags string, open bool) *api.Error {
	configured := false
	for _, ks := range sets {
		configured = configured || ks.Len() > 0
	}
	if !configured {
		if open {
			return nil
		}
		return &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "key_required",
			Message: name + " needs " + flags + "; this router was started without one"}
	}
	ok := false
	for _, ks := range sets {
		ok = ks.Match(key) || ok
	}
	switch {
	case ok:
		return nil
	case key != "" && r.knownKey(key):
		return &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "forbidden",
			Message: "this key may not call " + name + "; it needs a key from " + flags}
	}
	return api.Unauthorized("missing or invalid key for " + name + "; send \"Authorization: Bearer <key>\" with a key from " + flags)
}

// forbiddenKnown is the 403 for a key the router holds for something else (a client key on
// /backends), nil for an unknown one.
func (r *Router) forbiddenKnown(key, name, flag string) *api.Error {
	if key == "" || !r.knownKey(key) {
		return nil
	}
	return &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "forbidden",
		Message: "this key may not call " + name + "; it needs a key from " + flag}
}
