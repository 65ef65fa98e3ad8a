package router

import (
	"encoding/json"
	"errors"
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
// the replicas' block events and loads (Config.Events: by default only a router started with
// kv-aware does; or a vLLM-format ZeroMQ listener). A switch to kv-aware on a router without
// them is refused, 409 (code "events_off"), and the policy stays: kv-aware there would have
// no index and no replica loads, and place by prefix affinity under its own name. Start a
// router that may switch to kv-aware with kv-aware (or Events on). A switch away from
// kv-aware keeps the subscriptions running (the indexes stay current, GET /backends shows the
// replicas' loads, least-loaded and every policy's fallback read them), so a switch back is
// a cache decision at once.
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
	if name == "kv-aware" && !r.followsEvents() {
		return "", errEventsOff
	}
	sp := r.policy.(*switchPolicy)
	prev := sp.set(p).Name()
	r.cfg.Logger.Info("router: policy changed", "from", prev, "to", name)
	return prev, nil
}

// errEventsOff refuses a switch to kv-aware on a router that follows no replica events.
var errEventsOff = errors.New("router: kv-aware needs the replicas' events, and this router follows none " +
	"(start it with --policy kv-aware, or events on, to switch to kv-aware at run time)")

// followsEvents reports whether the router subscribes to the replicas' events (their block
// indexes and loads): Config.Events or a ZeroMQ listener.
func (r *Router) followsEvents() bool { return *r.cfg.Events || r.zmq != nil }

func (r *Router) routePolicy(mux *http.ServeMux) {
	mux.HandleFunc("GET /policy", r.requireAdmin(func(w http.ResponseWriter, _ *http.Request) {
		writeJSONBody(w, http.StatusOK, map[string]any{"policy": r.policy.Name(), "policies": PolicyNames, "events": r.followsEvents()})
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
		switch {
		case errors.Is(err, errEventsOff):
			e := api.Invalid("policy", "%v", err)
			e.Status, e.Code = http.StatusConflict, "events_off"
			writeAPIError(w, e)
			return
		case err != nil:
			writeAPIError(w, api.Invalid("policy", "%v", err))
			return
		}
		writeJSONBody(w, http.StatusOK, map[string]any{"policy": body.Policy, "previous": prev, "events": r.followsEvents()})
	}))
}
