package router

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"stockpot/internal/api"
)

// The routing policy changes at run time through the admin API, without a restart:
//
//	GET /policy                     {"policy":"kv-aware","policies":[...],"events":true}
//	PUT /policy {"policy":"prefix"} {"policy":"prefix","previous":"kv-aware","events":true}
//
// Both need an admin key, as /backends does (403 without one configured, 401 for a wrong
// one). An unknown policy or a malformed body is a 400 in the API's error shape, and the
// policy stays. The new policy takes every request picked after the call; a request already
// picking finishes with the policy it started with. events says whether the router follows
// the replicas' block events (Config.Events: by default only a router started with
// kv-aware does): without them kv-aware has no index and places by prefix affinity, so
// start a router that may switch to kv-aware with kv-aware (or Events on).
//
// The policy's state starts afresh on each change (prefix's spill memory, kv-aware's hash
// cache); the replicas' block indexes and loads are the router's, and stay.

// switchPolicy is the Router's policy: the one configured, replaced by PUT /policy. It is
// a Policy, a tokenNeeder (asking the current policy) and safe for concurrent use.
type switchPolicy struct {
	cur atomic.Pointer[policyBox]
}

// policyBox holds a Policy for the atomic pointer (an interface cannot be stored directly).
type policyBox struct{ p Policy }

func newSwitchPolicy(p Policy) *switchPolicy {
	s := &switchPolicy{}
	s.cur.Store(&policyBox{p})
	return s
}

func (s *switchPolicy) current() Policy { return s.cur.Load().p }

// set replaces the policy and returns the previous one.
func (s *switchPolicy) set(p Policy) Policy { return s.cur.Swap(&policyBox{p}).p }

func (s *switchPolicy) Name() string { return s.current().Name() }

func (s *switchPolicy) Pick(req *Request, cands []*Backend) Decision {
	return s.current().Pick(req, cands)
}

func (s *switchPolicy) NeedsTokens(req *Request) bool {
	n, ok := s.current().(tokenNeeder)
	return ok && n.NeedsTokens(req)
}

// SetPolicy replaces the routing policy by name (PolicyNames), with the router's policy
// settings; it returns the previous policy's name.
func (r *Router) SetPolicy(name string) (previous string, err error) {
	p, err := NewPolicy(name, r.cfg.PolicyConfig)
	if err != nil {
		return "", err
	}
	sp := r.policy.(*switchPolicy)
	prev := sp.set(p).Name()
	r.cfg.Logger.Info("router: policy changed", "from", prev, "to", name)
	return prev, nil
}

func (r *Router) routePolicy(mux *http.ServeMux) {
	mux.HandleFunc("GET /policy", r.requireAdmin(func(w http.ResponseWriter, _ *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]any{"policy": r.policy.Name(), "policies": PolicyNames, "events": *r.cfg.Events})
	}))
	mux.HandleFunc("PUT /policy", r.requireAdmin(func(w http.ResponseWriter, req *http.Request) {
		raw, ok := r.readBody(w, req, 64<<10)
		if !ok {
			return
		}
		var body struct {
			Policy string `json:"policy"`
		}
		if err := json.Unmarshal(raw, &body); err != nil || body.Policy == "" {
			writeAPIError(w, api.Invalid("policy", `want {"policy": "<one of %v>"}`, PolicyNames))
			return
		}
		prev, err := r.SetPolicy(body.Policy)
		if err != nil {
			writeAPIError(w, api.Invalid("policy", "%v", err))
			return
		}
		writeJSONBody(w, http.StatusOK, map[string]any{"policy": body.Policy, "previous": prev, "events": *r.cfg.Events})
	}))
}
