package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"stockpot/internal/api"
)

// The cache admin API through the router (serve's POST /v1/cache/prewarm, GET /v1/cache and
// DELETE /v1/cache):
//
//   - a prewarm goes to the one replica the policy picks for its prompt, as a completion with
//     that prompt would (its tokens, salt and prompt_cache_key): the replica that will serve
//     the requests sharing the prefix is the one that should hold it;
//   - GET and DELETE go to every backend (healthy or not: a drop must reach them all, and a
//     replica that does not answer is reported as such) and the answers are aggregated, each
//     replica's in its own section, with the drop's totals summed.
//
// They take the router's admin key (403 without one configured, 401 for a missing or wrong
// one) and reach the replicas with --backend-key only: the caller's key never leaves the
// router. A replica behind the router therefore lists the router's --backend-key among its
// --admin-key values.

// cacheFanoutTimeout bounds one replica's GET or DELETE: a drop lists and deletes a tier's
// keys (a SCAN of Redis), which takes seconds at most; a replica slower than this is reported
// as failed, the others still answer.
const cacheFanoutTimeout = 30 * time.Second

// maxReplicaAnswer bounds one replica's answer kept in the aggregate (GET /v1/cache is a few
// KiB at its default limit and well under this at its largest).
const maxReplicaAnswer = 4 << 20

// requireCacheAdmin guards the cache admin routes with the admin keys.
func (r *Router) requireCacheAdmin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		ok, verdict := keyVerdict(r.adminKeys, req)
		if ok {
			h(w, req)
			return
		}
		r.m.unauthorized.WithLabelValues("admin").Inc()
		r.cfg.Logger.Warn("router: cache admin call refused", "method", req.Method, "path", req.URL.Path, "remote", req.RemoteAddr, "admin_key", verdict)
		if verdict == "not-configured" {
			writeAPIError(w, &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "admin_key_required",
				Message: "the cache admin API needs --admin-key; this router was started without one"})
			return
		}
		if e := r.forbiddenKnown(requestKey(req), "the cache admin API", "--admin-key"); e != nil {
			writeAPIError(w, e)
			return
		}
		writeAPIError(w, api.Unauthorized(`missing or invalid admin key; send "Authorization: Bearer <admin key>"`))
	}
}

// servePrewarm sends a prewarm to the replica the policy picks for its prompt, retrying on
// another while none answered (a connection error or a 5xx).
func (r *Router) servePrewarm(w http.ResponseWriter, req *http.Request) {
	body, ok := r.readBody(w, req, r.cfg.MaxBodyBytes)
	if !ok {
		return
	}
	var pb generateBody           // a prewarm's prompt, messages, salt and key read as a completion's
	_ = json.Unmarshal(body, &pb) // a malformed body is routed anyway; the replica answers the 400
	rq := &Request{Salt: pb.CacheSalt, CacheKey: pb.PromptCacheKey, SessionID: req.Header.Get("X-Session-ID"), peers: r.backends(), remote: r.remote}
	defer rq.release()
	if r.prewarmTenant(w, req, body, rq) {
		return // a public prefix went to every replica
	}
	if r.needs != nil && r.needs.NeedsTokens(rq) {
		rq.Tokens, rq.pooledTokens = r.promptTokens(req.Context(), &pb)
	}
	var tried []*Backend
	var last *failedResp
	var lastErr error
	for attempt := 0; attempt < r.cfg.MaxAttempts; attempt++ {
		cands := r.serving(tried) // never an ejected backend (passive health)
		if len(cands) == 0 {
			break
		}
		b := r.policy.Pick(rq, cands).Backend
		tried = append(tried, b)
		b.inflight.Add(1)
		code, hdr, rb, err := r.adminCall(req.Context(), b, http.MethodPost, "/v1/cache/prewarm", "", body)
		b.inflight.Add(-1)
		switch {
		case err != nil:
			lastErr = err
			if req.Context().Err() != nil {
				return
			}
			r.markDown(b, err.Error())
			continue
		case code >= 500:
			last = &failedResp{code: code, header: hdr, body: rb}
			continue
		}
		copyHeader(w.Header(), hdr)
		w.Header().Set("X-Stockpot-Backend", b.ID)
		w.WriteHeader(code)
		_, _ = w.Write(rb)
		return
	}
	switch {
	case last != nil:
		copyHeader(w.Header(), last.header)
		w.WriteHeader(last.code)
		_, _ = w.Write(last.body)
	case lastErr != nil:
		writeAPIError(w, &api.Error{Status: http.StatusBadGateway, Type: api.TypeServer, Code: "bad_gateway",
			Message: "every backend failed; last error: " + lastErr.Error()})
	default:
		writeAPIError(w, api.Unavailable("%v", ErrNoBackend))
	}
}

// ReplicaCache is one replica's section of an aggregated GET or DELETE /v1/cache.
type ReplicaCache struct {
	Backend string `json:"backend"`
	URL     string `json:"url"`
	// Status is the replica's HTTP status (0 when it did not answer); Answer its JSON body
	// (its error body for a 4xx or 5xx); Error why it did not answer.
	Status int             `json:"status"`
	Answer json.RawMessage `json:"answer,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// CacheFanout is the router's answer to GET and DELETE /v1/cache.
type CacheFanout struct {
	Object   string         `json:"object"` // "cache" or "cache.dropped"
	Replicas []ReplicaCache `json:"replicas"`
	// Failed counts replicas that did not answer 200.
	Failed int `json:"failed"`
	// DELETE only: the replicas' dropped_blocks and busy_blocks summed.
	DroppedBlocks *int `json:"dropped_blocks,omitempty"`
	BusyBlocks    *int `json:"busy_blocks,omitempty"`
}

// serveCacheFanout sends GET or DELETE /v1/cache (query included) to every backend at once
// and aggregates. The status is 200 when every replica answered 200, the first replica's
// 4xx when every one refused the request alike (a bad query), else 502.
func (r *Router) serveCacheFanout(w http.ResponseWriter, req *http.Request) {
	bs := r.backends()
	if len(bs) == 0 {
		writeAPIError(w, api.Unavailable("%v", ErrNoBackend))
		return
	}
	out := CacheFanout{Object: "cache", Replicas: make([]ReplicaCache, len(bs))}
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(req.Context(), cacheFanoutTimeout)
			defer cancel()
			rc := ReplicaCache{Backend: b.ID, URL: b.URL.String()}
			code, _, body, err := r.adminCall(ctx, b, req.Method, "/v1/cache", req.URL.RawQuery, nil)
			switch {
			case err != nil:
				rc.Error = err.Error()
			case !json.Valid(body):
				rc.Status, rc.Error = code, fmt.Sprintf("answer is not JSON (%d bytes)", len(body))
			default:
				rc.Status, rc.Answer = code, body
			}
			out.Replicas[i] = rc
		}()
	}
	wg.Wait()
	status, all4xx := http.StatusOK, true
	for _, rc := range out.Replicas {
		if rc.Status != http.StatusOK {
			out.Failed++
		}
		if rc.Status < 400 || rc.Status >= 500 {
			all4xx = false
		}
	}
	switch {
	case out.Failed == 0:
	case all4xx:
		// Every replica refused alike (a bad query, a wrong backend key): pass the first
		// refusal through, as one replica would answer.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(out.Replicas[0].Status)
		_, _ = w.Write(append(out.Replicas[0].Answer, '\n'))
		return
	default:
		status = http.StatusBadGateway
	}
	if req.Method == http.MethodDelete {
		out.Object = "cache.dropped"
		var dropped, busy int
		for _, rc := range out.Replicas {
			var d struct {
				Dropped int `json:"dropped_blocks"`
				Busy    int `json:"busy_blocks"`
			}
			if rc.Status == http.StatusOK && json.Unmarshal(rc.Answer, &d) == nil {
				dropped += d.Dropped
				busy += d.Busy
			}
		}
		out.DroppedBlocks, out.BusyBlocks = &dropped, &busy
	}
	if status != http.StatusOK {
		r.cfg.Logger.Warn("router: cache admin fan-out: some replicas failed", "method", req.Method, "failed", out.Failed, "of", len(bs))
	}
	writeJSONBody(w, status, out)
}

// adminCall makes one cache admin request to b with the router's own client (the backend
// key, never the caller's).
func (r *Router) adminCall(ctx context.Context, b *Backend, method, path, query string, body []byte) (int, http.Header, []byte, error) {
	u := b.URL.String() + path
	if query != "" {
		u += "?" + query
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	up, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		up.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.own.Do(up)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxReplicaAnswer+1))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("reading answer: %w", err)
	}
	if len(rb) > maxReplicaAnswer {
		return 0, nil, nil, fmt.Errorf("answer over %d bytes", maxReplicaAnswer)
	}
	return resp.StatusCode, resp.Header.Clone(), rb, nil
}
