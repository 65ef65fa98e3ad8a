package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Prefill/decode disaggregation: the router as the orchestrator of vLLM's protocol (what its
// toy proxy does, with cache affinity, load and failures taken into account).
//
// Pools. Each backend has a role: the one given by --prefill-backend / --decode-backend (or
// POST /backends with "role"), else the one its /health reports, else both. The prefill pool
// is the healthy, in-service prefill backends; the decode pool the decode ones. A backend of
// role both stands in for a pool only while that pool has no dedicated member left (healthy,
// in service, not yet tried by this request). The router disaggregates only while some
// backend in its membership has a dedicated role; with none everything is routed as before.
//
// A completion or chat request, while both pools have a member and at least one of them is
// dedicated:
//  1. the decode is chosen by load (fewest in flight; ties to the one whose index holds more
//     of the prompt, then at random), and the prompt's tokens predicted cached there counted
//     (its index, in whole reuse units, any tier);
//  2. when the prompt's tokens (the router's count: a token-array prompt as sent, else a
//     replica's /tokenize of the prompt or of the chat messages, template applied) minus
//     those is below MinPrefillTokens, the request goes straight to the decode (short_tail);
//  3. else the prefill is chosen by the routing policy over the prefill pool (kv-aware: the
//     prefix each prefill's index holds) and sent the request as vLLM's proxy sends it
//     (kv_transfer_params do_remote_decode, stream false, max_tokens 1, max_completion_tokens
//     1 when present, no stream_options, min_tokens or min_completion_tokens), with the
//     client's headers as any forwarded request carries them. Its answer's kv_transfer_params
//     go verbatim into the original request, which goes to the decode; the decode's answer
//     (stream or not) reaches the client as any forwarded answer does.
//
// A prefill that fails (connection error, 5xx, a timeout, a 200 without kv_transfer_params)
// is retried on another prefill backend, up to MaxAttempts; the whole hop is bounded by
// PrefillTimeout. When none is left the request goes to the decode without params and the
// decode computes the prompt (prefill_failed). A prefill that refuses the request (4xx) is
// not retried: the decode gets the request as the client sent it and gives the answer the
// API gives (prefill_refused). Every decode, and every both backend that may stand in as
// one, must list every prefill backend as --prefill-peer at the address the router reaches it.
//
// Other endpoints (/v1/messages, /v1/responses, /tokenize, /v1/models, ...) go to the decode
// pool, or to every healthy backend when it is empty, as ordinary requests. A completion or
// chat request that already carries kv_transfer_params (a client orchestrating itself) is
// routed by the policy over every backend, as without disaggregation (client_params).

// Role is a backend's part in prefill/decode disaggregation, as serve's --role names it.
type Role string

// The roles.
const (
	RoleBoth    Role = "both"
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
)

// ParseRole reads a role; "" is no role given (the backend's /health decides).
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case "", RoleBoth, RolePrefill, RoleDecode:
		return r, nil
	}
	return "", fmt.Errorf("unknown role %q (want both, prefill or decode)", s)
}

// Role returns the backend's role: the one it was given, else what its /health reports, else
// both.
func (b *Backend) Role() Role {
	r, _ := b.roleFrom()
	return r
}

func (b *Backend) roleFrom() (Role, string) {
	if p := b.fixedRole.Load(); p != nil {
		return *p, "flag"
	}
	if p := b.reportedRole.Load(); p != nil && *p != "" {
		return *p, "health"
	}
	return RoleBoth, "default"
}

// learnRole records the role a passing /health answer names (body: {"status":"ok","role":R});
// an answer without one (an older replica) reports none.
func (r *Router) learnRole(b *Backend, body []byte) {
	var h struct {
		Role string `json:"role"`
	}
	_ = json.Unmarshal(body, &h)
	role, err := ParseRole(h.Role)
	if err != nil {
		role = ""
	}
	if prev := b.reportedRole.Load(); prev != nil && *prev == role {
		return
	}
	b.reportedRole.Store(&role)
	r.cfg.Logger.Info("router: backend reports its role", "id", b.ID, "role", role)
	if fixed := b.fixedRole.Load(); fixed != nil && role != "" && role != *fixed {
		r.cfg.Logger.Warn("router: backend reports another role than it was given; the given one holds", "id", b.ID, "given", *fixed, "reported", role)
	}
}

// PDConfig configures prefill/decode disaggregation.
type PDConfig struct {
	// MinPrefillTokens: a request whose prompt tokens, less those predicted cached on the
	// chosen decode, are fewer than this goes straight to the decode. Default 256; negative:
	// every request with a known prompt is handed off.
	MinPrefillTokens int
	// PrefillTimeout bounds the whole prefill hop (every attempt); past it the decode
	// computes the prompt. Default 60s.
	PrefillTimeout time.Duration
}

// DefaultPDConfig returns the defaults.
func DefaultPDConfig() PDConfig {
	return PDConfig{MinPrefillTokens: 256, PrefillTimeout: 60 * time.Second}
}

func (c PDConfig) validate() (PDConfig, error) {
	d := DefaultPDConfig()
	if c.MinPrefillTokens == 0 {
		c.MinPrefillTokens = d.MinPrefillTokens
	}
	if c.PrefillTimeout < 0 {
		return c, fmt.Errorf("router: PD.PrefillTimeout %v is negative", c.PrefillTimeout)
	}
	if c.PrefillTimeout == 0 {
		c.PrefillTimeout = d.PrefillTimeout
	}
	return c, nil
}

// disaggregated reports whether some backend in the membership has a dedicated role.
func (r *Router) disaggregated() bool {
	for _, b := range r.backends() {
		if b.Role() != RoleBoth {
			return true
		}
	}
	return false
}

// splitPools returns the prefill and decode pools of cands (see the rule above) and whether
// either has a dedicated member (else disaggregating would hand off between both backends,
// which need not be each other's peers).
func splitPools(cands []*Backend) (prefill, decode []*Backend, dedicated bool) {
	var both []*Backend
	for _, b := range cands {
		switch b.Role() {
		case RolePrefill:
			prefill = append(prefill, b)
		case RoleDecode:
			decode = append(decode, b)
		default:
			both = append(both, b)
		}
	}
	dedicated = len(prefill) > 0 || len(decode) > 0
	if len(prefill) == 0 {
		prefill = both
	}
	if len(decode) == 0 {
		decode = both
	}
	return prefill, decode, dedicated
}

// decodeOrAll keeps the decode pool of cands, or all of them when it is empty (a prefill
// replica answers an ordinary request too).
func decodeOrAll(cands []*Backend) []*Backend {
	if _, d, _ := splitPools(cands); len(d) > 0 {
		return d
	}
	return cands
}

// decodeOnly keeps the decode pool of cands: a request carrying a prefill's params is for a
// decode alone.
func decodeOnly(cands []*Backend) []*Backend {
	_, d, _ := splitPools(cands)
	return d
}

// ordinaryPool is the pool of a request that is not handed off: the decode pool while
// disaggregating, nil (everything) otherwise.
func (r *Router) ordinaryPool() func([]*Backend) []*Backend {
	if !r.disaggregated() {
		return nil
	}
	return decodeOrAll
}

// poolNames says which pool each backend serves now (BackendStatus.Pool); empty while the
// router does not disaggregate.
func (r *Router) poolNames() map[*Backend]string {
	if !r.disaggregated() {
		return nil
	}
	pre, dec, _ := splitPools(r.candidates(nil))
	out := map[*Backend]string{}
	for _, b := range r.backends() {
		switch inP, inD := slices.Contains(pre, b), slices.Contains(dec, b); {
		case b.Role() == RolePrefill:
			out[b] = "prefill"
		case b.Role() == RoleDecode:
			out[b] = "decode"
		case inP && inD:
			out[b] = "prefill,decode"
		case inP:
			out[b] = "prefill"
		case inD:
			out[b] = "decode"
		default:
			out[b] = "standby"
		}
	}
	return out
}

// pdMetrics are stockpot_router_pd_*.
type pdMetrics struct {
	requests *prometheus.CounterVec   // path
	retries  prometheus.Counter       // prefill attempts after a failed one
	failures *prometheus.CounterVec   // reason
	seconds  *prometheus.HistogramVec // outcome
}

// The values of stockpot_router_pd_requests_total's path label.
const (
	pdHandoff        = "handoff"         // prefill, then the decode with its params
	pdShortTail      = "short_tail"      // straight to a decode: the uncached tail was short
	pdPrefillFailed  = "prefill_failed"  // every prefill tried failed: the decode computed
	pdPrefillRefused = "prefill_refused" // a prefill answered 4xx: the decode got the request as sent
	pdNoPools        = "no_pools"        // a pool had no member: routed as an ordinary request
	pdClientParams   = "client_params"   // the client sent kv_transfer_params itself
)

func newPDMetrics(reg prometheus.Registerer) *pdMetrics {
	m := &pdMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_pd_requests_total",
			Help: "Completion and chat requests while disaggregating, by path: handoff (prefill, then decode with its kv_transfer_params), short_tail (straight to a decode: the uncached tail was below --pd-min-prefill-tokens), prefill_failed (every prefill tried failed; the decode computed the prompt), prefill_refused (a prefill answered 4xx; the decode got the request as sent), no_pools (a pool had no healthy member), client_params (the client sent kv_transfer_params)."},
			[]string{"path"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "stockpot_router_pd_prefill_retries_total",
			Help: "Prefill requests retried on another prefill backend after one failed."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_pd_prefill_failures_total",
			Help: "Failed prefill attempts, by reason (connect, timeout, 5xx, no_params)."}, []string{"reason"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "stockpot_router_pd_prefill_seconds",
			Help:    "The prefill hop's time, every attempt included, by outcome (ok: params in hand; failed; refused).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)}, []string{"outcome"}),
	}
	for _, p := range []string{pdHandoff, pdShortTail, pdPrefillFailed, pdPrefillRefused, pdNoPools, pdClientParams} {
		m.requests.WithLabelValues(p)
	}
	for _, f := range []string{"connect", "timeout", "5xx", "no_params"} {
		m.failures.WithLabelValues(f)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.retries, m.failures, m.seconds)
	}
	return m
}

// serveDisaggregated routes a completion or chat request while disaggregating (see above). rq
// carries the prompt's tokens when the router could count them.
func (r *Router) serveDisaggregated(w http.ResponseWriter, req *http.Request, body []byte, start time.Time, rq *Request) {
	policyPick := func(c []*Backend) Decision { return r.policy.Pick(rq, c) }
	if hasClientParams(body) {
		r.pdm.requests.WithLabelValues(pdClientParams).Inc()
		r.forward(w, req, body, start, true, policyPick)
		return
	}
	pre, dec, dedicated := splitPools(r.candidates(nil))
	if !dedicated || len(pre) == 0 || len(dec) == 0 {
		r.pdm.requests.WithLabelValues(pdNoPools).Inc()
		r.forwardPool(w, req, body, start, true, decodeOrAll, policyPick)
		return
	}
	decode, cached := r.pickDecode(rq, dec)
	if n := len(rq.Tokens); n > 0 && n-cached < r.cfg.PD.MinPrefillTokens {
		r.pdm.requests.WithLabelValues(pdShortTail).Inc()
		r.toDecode(w, req, body, start, decodeOrAll, Decision{Backend: decode, PredictedTokens: cached, Reason: "decode-short-tail"})
		return
	}
	r.observeOverhead(start) // the prefill is the request's first upstream call
	kv, prefilled, path := r.prefillHop(req, body, rq)
	if path == "" {
		return // the client left
	}
	r.pdm.requests.WithLabelValues(path).Inc()
	if prefilled != nil {
		w.Header().Set("X-Stockpot-Prefill-Backend", prefilled.ID)
	}
	d := Decision{Backend: decode, PredictedTokens: cached, Reason: "decode-" + path}
	if kv == nil {
		r.toDecode(w, req, body, time.Time{}, decodeOrAll, d)
		return
	}
	db, err := withField(body, "kv_transfer_params", kv)
	if err != nil { // the prefill took the body, so this does not happen; the decode computes
		r.toDecode(w, req, body, time.Time{}, decodeOrAll, d)
		return
	}
	r.toDecode(w, req, db, time.Time{}, decodeOnly, d)
}

// toDecode forwards body over pool, to d.Backend first while it is a candidate, then to the
// least loaded. A zero start records no overhead (the prefill hop did).
func (r *Router) toDecode(w http.ResponseWriter, req *http.Request, body []byte, start time.Time, pool func([]*Backend) []*Backend, d Decision) {
	first := true
	r.forwardPool(w, req, body, start, true, pool, func(c []*Backend) Decision {
		if first {
			first = false
			if slices.Contains(c, d.Backend) {
				return d
			}
		}
		return Decision{Backend: pickLeastLoaded(c), Reason: d.Reason}
	})
}

// observeOverhead records a generate request's time before its first upstream call.
func (r *Router) observeOverhead(start time.Time) {
	d := time.Since(start)
	r.m.overhead.Observe(d.Seconds())
	if r.onOverhead != nil {
		r.onOverhead(d)
	}
}

// pickDecode returns the decode with the fewest requests in flight (ties: the one predicted
// to hold more of the prompt, then at random) and the prompt tokens predicted cached on it.
func (r *Router) pickDecode(rq *Request, pool []*Backend) (*Backend, int) {
	var best *Backend
	bestLoad, bestCached, ties := math.MaxInt, -1, 0
	for _, b := range pool {
		l, c := b.Load(), r.predictedOn(rq, b)
		switch {
		case l < bestLoad || l == bestLoad && c > bestCached:
			best, bestLoad, bestCached, ties = b, l, c, 1
		case l == bestLoad && c == bestCached:
			ties++
			if rand.IntN(ties) == 0 {
				best = b
			}
		}
	}
	return best, bestCached
}

// predictedOn is the prompt tokens b's index holds, in whole reuse units, in any tier (the
// shared remote tier's blocks too when b has it), as kv-aware counts them; 0 without tokens
// or a live index.
func (r *Router) predictedOn(rq *Request, b *Backend) int {
	if len(rq.Tokens) == 0 || !b.liveIndex(r.cfg.StaleAfter) {
		return 0
	}
	id, bs, ok := b.index.chain()
	if !ok {
		return 0
	}
	var cache *hashCache
	if kv, ok := r.policy.(*kvAware); ok {
		cache = kv.hashes
	}
	weights, hasRemote := b.index.weights(&r.cfg.TierWeights)
	var shared []*replicaIndex
	if hasRemote {
		shared = []*replicaIndex{r.remote}
	}
	n, _ := b.index.matchChain(rq.chain(id, bs, cache), &weights, shared)
	return n * bs
}

// prefillParams are the kv_transfer_params of a prefill request, as vLLM's proxy sends them.
var prefillParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// maxPrefillAnswer bounds the prefill's answer the router reads (one token, plus whatever
// echo or logprobs the request asked for).
const maxPrefillAnswer = 64 << 20

// prefillFailure is a failed prefill attempt; reason labels
// stockpot_router_pd_prefill_failures_total.
type prefillFailure struct {
	reason string
	err    error
}

func (e *prefillFailure) Error() string { return e.reason + ": " + e.err.Error() }

// prefillHop sends the prefill request to the prefill pool until one answers with
// kv_transfer_params. It returns them and the backend that answered (nil when none came), and
// the path the request takes: handoff, prefill_failed, prefill_refused (also a body that is
// not a JSON object: the decode answers its 400), or "" when the client left.
func (r *Router) prefillHop(req *http.Request, body []byte, rq *Request) (json.RawMessage, *Backend, string) {
	pbody, err := prefillBody(body)
	if err != nil {
		return nil, nil, pdPrefillRefused
	}
	start := time.Now()
	outcome := "failed"
	defer func() { r.pdm.seconds.WithLabelValues(outcome).Observe(since(start)) }()
	ctx, cancel := context.WithTimeout(req.Context(), r.cfg.PD.PrefillTimeout)
	defer cancel()
	var tried []*Backend
	failed := false
	for attempt := 0; attempt < r.cfg.MaxAttempts; attempt++ {
		pool, _, _ := splitPools(r.candidates(tried))
		if len(pool) == 0 {
			break
		}
		d := r.policy.Pick(rq, pool)
		b := d.Backend
		tried = append(tried, b)
		if !r.outliers.start(b.ID, time.Now()) {
			attempt-- // a half-open backend whose probe another request took: pick again
			continue
		}
		if failed {
			r.pdm.retries.Inc()
		}
		load := b.inflight.Add(1) - 1
		kv, usage, code, err := r.prefillOn(ctx, req, b, pbody)
		b.inflight.Add(-1)
		var pf *prefillFailure
		switch {
		case err == nil && kv != nil:
			r.passiveSuccess(b)
			d.Reason = "prefill-" + d.Reason
			r.decided(b, d, load, true)
			r.m.requests.WithLabelValues(b.ID, strconv.Itoa(code)).Inc()
			if usage.ok {
				r.m.cached.WithLabelValues(b.ID).Add(float64(usage.cached))
				r.m.prompt.WithLabelValues(b.ID).Add(float64(usage.prompt))
				r.m.cacheHist.Observe(float64(usage.cached))
			}
			r.dash.record(b, d, code, usage)
			outcome = "ok"
			return kv, b, pdHandoff
		case req.Context().Err() != nil:
			r.outliers.abandon(b.ID)
			outcome = "client_gone"
			return nil, nil, ""
		case err == nil:
			r.passiveSuccess(b) // it answered: the request is refused, not the backend broken
			r.m.requests.WithLabelValues(b.ID, strconv.Itoa(code)).Inc()
			outcome = "refused"
			return nil, nil, pdPrefillRefused
		case !errors.As(err, &pf):
			pf = &prefillFailure{reason: "connect", err: err}
		}
		failed = true
		b.errors.Add(1)
		r.pdm.failures.WithLabelValues(pf.reason).Inc()
		msg := "prefill: " + pf.Error()
		if pf.reason == "connect" {
			r.markDown(b, msg)
		} else {
			b.lastErr.Store(&msg)
		}
		r.passiveFailure(b, msg)
		r.cfg.Logger.Warn("router: prefill failed", "backend", b.ID, "err", msg)
		if ctx.Err() != nil {
			break // the hop's time is spent
		}
	}
	return nil, nil, pdPrefillFailed
}

// prefillOn sends the prefill request to b. kv is its answer's kv_transfer_params; err a
// *prefillFailure; neither (kv nil, err nil): b refused the request (code, a 4xx).
func (r *Router) prefillOn(ctx context.Context, req *http.Request, b *Backend, pbody []byte) (kv json.RawMessage, u usageInfo, code int, err error) {
	url := b.URL.String() + req.URL.Path
	if req.URL.RawQuery != "" {
		url += "?" + req.URL.RawQuery
	}
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(pbody))
	if err != nil {
		return nil, u, 0, &prefillFailure{"connect", err}
	}
	copyHeader(up.Header, req.Header)
	r.setUpstreamAuth(req, up, pbody)
	up.ContentLength = int64(len(pbody))
	fail := func(err error) (json.RawMessage, usageInfo, int, error) {
		reason := "connect"
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			reason = "timeout"
		}
		return nil, u, code, &prefillFailure{reason, err}
	}
	resp, err := r.client.Do(up)
	if err != nil {
		return fail(err)
	}
	defer resp.Body.Close()
	code = resp.StatusCode
	if code >= 500 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, u, code, &prefillFailure{"5xx", errors.New(resp.Status)}
	}
	if code != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, u, code, nil
	}
	rb, err := io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer+1))
	if err != nil {
		return fail(fmt.Errorf("reading answer: %w", err))
	}
	var out struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if len(rb) > maxPrefillAnswer || json.Unmarshal(rb, &out) != nil {
		return nil, u, code, &prefillFailure{"no_params", errors.New("the answer is not a JSON object")}
	}
	if kv = bytes.TrimSpace(out.KV); len(kv) == 0 || kv[0] != '{' {
		return nil, u, code, &prefillFailure{"no_params", errors.New("the answer carries no kv_transfer_params object")}
	}
	return kv, parseUsage(rb), code, nil
}

// prefillBody is body as vLLM's proxy sends it to a prefill replica.
func prefillBody(body []byte) ([]byte, error) {
	m, err := jsonObject(body)
	if err != nil {
		return nil, err
	}
	m["kv_transfer_params"] = prefillParams
	m["stream"] = json.RawMessage("false")
	m["max_tokens"] = json.RawMessage("1")
	if _, ok := m["max_completion_tokens"]; ok {
		m["max_completion_tokens"] = json.RawMessage("1")
	}
	for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
		delete(m, k)
	}
	return encodeObject(m)
}

// withField returns body with its key k set to v.
func withField(body []byte, k string, v json.RawMessage) ([]byte, error) {
	m, err := jsonObject(body)
	if err != nil {
		return nil, err
	}
	m[k] = v
	return encodeObject(m)
}

func jsonObject(body []byte) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, errors.New("the body is not a JSON object")
	}
	return m, nil
}

// encodeObject encodes m without escaping HTML characters (a prompt's "<|im_start|>" stays as
// the client wrote it).
func encodeObject(m map[string]json.RawMessage) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// hasClientParams reports whether a request body carries kv_transfer_params other than null.
func hasClientParams(body []byte) bool {
	if !bytes.Contains(body, []byte(`"kv_transfer_params"`)) {
		return false
	}
	var b struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if json.Unmarshal(body, &b) != nil {
		return false
	}
	kv := bytes.TrimSpace(b.KV)
	return len(kv) > 0 && !bytes.Equal(kv, []byte("null"))
}
