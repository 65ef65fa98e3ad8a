package router

import (
	"net/http"
	"time"

	"stockpot/internal/apikey"
	"stockpot/internal/dashboard"
)

// The router's dashboard (GET /dashboard, /dashboard/events, /dashboard/state): per-replica
// load, index size and event lag, decisions by reason (its registry's series), and each recent
// decision's predicted cached tokens against what the backend's usage then delivered.

// recentDecisions is how many decisions the dashboard's ring keeps.
const recentDecisions = 64

// DecisionRecord is one answered generate request: what the policy predicted the chosen
// backend held, and what it reported cached.
type DecisionRecord struct {
	Seq       uint64    `json:"seq"`
	At        time.Time `json:"at"`
	Backend   string    `json:"backend"`
	Reason    string    `json:"reason"`
	Status    int       `json:"status"`
	Predicted int       `json:"predicted_tokens"`
	// Delivered is usage.prompt_tokens_details.cached_tokens; -1 when the answer had no usage.
	Delivered int `json:"delivered_tokens"`
	Prompt    int `json:"prompt_tokens"`
	// Transferred is usage.cache.transfer_tokens: the prompt tokens a decode replica pulled
	// from its prefill replica (pd.go); absent on other answers.
	Transferred int `json:"transfer_tokens,omitempty"`
}

type routerDashboard struct {
	hub  *dashboard.Hub
	page []byte
	feed *dashboard.Feed[DecisionRecord]
}

func newRouterDashboard(r *Router) *routerDashboard {
	d := &routerDashboard{page: dashboard.Page(dashboard.RoleRoute)}
	cfg := dashboard.DefaultConfig()
	cfg.Sample = func() dashboard.Event { return dashboard.JSONEvent("snapshot", r.dashboardSnapshot()) }
	cfg.Hello = func() []dashboard.Event {
		return []dashboard.Event{dashboard.JSONEvent("snapshot", r.dashboardSnapshot()), dashboard.JSONEvent("decisions", d.feed.Recent())}
	}
	d.hub = dashboard.NewHub(cfg)
	d.feed = dashboard.NewFeed[DecisionRecord](d.hub, "decision", recentDecisions)
	return d
}

// record adds an answered decision (u: the backend's usage, if any).
func (d *routerDashboard) record(b *Backend, dec Decision, status int, u usageInfo) {
	rec := DecisionRecord{At: time.Now(), Backend: b.ID, Reason: dec.Reason, Status: status, Predicted: dec.PredictedTokens, Delivered: -1}
	if u.ok {
		rec.Delivered, rec.Prompt, rec.Transferred = u.cached, u.prompt, u.transfer
	}
	d.feed.Add(rec, func(r *DecisionRecord, seq uint64) { r.Seq = seq })
}

// RouterSnapshot is one sample of the router's evidence.
type RouterSnapshot struct {
	TimeMs   int64              `json:"t"`
	Role     string             `json:"role"`
	Policy   string             `json:"policy"`
	Metrics  map[string]any     `json:"metrics"`
	Backends []BackendStatus    `json:"backends"`
	Stream   dashboard.HubStats `json:"stream"`
}

func (r *Router) dashboardSnapshot() RouterSnapshot {
	s := RouterSnapshot{TimeMs: time.Now().UnixMilli(), Role: "route", Policy: r.policy.Name(), Backends: r.Backends(), Stream: r.dash.hub.Stats()}
	if r.cfg.Gatherer != nil {
		s.Metrics, _ = dashboard.Flatten(r.cfg.Gatherer)
	}
	return s
}

// requireDashboard: the dashboard names the backends and their traffic, so it takes a
// dashboard or admin key (endpoint_auth.go), open only while no key of any kind is configured.
// The key may also come as ?key= (browsers' EventSource sends no headers; the page passes its
// own on).
func (r *Router) requireDashboard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		key := apikey.FromRequest(req, apikey.Rule{AuthorizationDecides: true, Query: true})
		if e := r.operatorCheck(key, []apikey.Set{r.dashboardKeys, r.adminKeys}, "the dashboard", "--dashboard-key or --admin-key", !r.anyKeys()); e != nil {
			r.m.unauthorized.WithLabelValues("admin").Inc()
			writeAPIError(w, e)
			return
		}
		h(w, req)
	}
}

func (r *Router) routeDashboard(mux *http.ServeMux) {
	mux.HandleFunc("GET /dashboard", r.requireDashboard(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
		_, _ = w.Write(r.dash.page)
	}))
	mux.HandleFunc("GET /dashboard/events", r.requireDashboard(r.dash.hub.ServeHTTP))
	mux.HandleFunc("GET /dashboard/state", r.requireDashboard(func(w http.ResponseWriter, _ *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]any{"snapshot": r.dashboardSnapshot(), "decisions": r.dash.feed.Recent()})
	}))
}
