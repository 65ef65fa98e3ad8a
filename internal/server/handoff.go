package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/handoff"
	"stockpot/internal/pipeline"
	"stockpot/internal/prefix"
	"stockpot/internal/runner"
	"stockpot/internal/tier"
)

// Prefill/decode disaggregation (internal/handoff says why and how). A request carrying
// kv_transfer_params is one half of a handed-off generation:
//   - do_remote_decode (to a prefill replica, non-streamed, max_tokens 1 as vLLM's proxy
//     sends it): the prompt is computed, its full blocks held under a lease (a Local pin),
//     the transfer registered, and the answer carries kv_transfer_params naming the blocks.
//   - do_remote_prefill (to a decode replica, the prefill's params copied in): the blocks are
//     pulled from that prefill replica, which must be one of --prefill-peer, into the transfer
//     buffer, where admission restores them, verified as every restore is; the prefill's
//     first token is output as the first. A pull that fails or stops short is computed on
//     the decode instead (counted), never a wrong answer.

// Handoff is a replica's part in disaggregation (Config.Handoff).
type Handoff struct {
	Role handoff.Role
	// Prefill side: the transfers held for decodes, and the pull endpoint over them.
	Registry *handoff.Registry
	Source   *handoff.Source
	// Decode side: the puller (its Peers the only replicas it pulls from), and how to forget
	// pulled records once their request is admitted (offload.Tiers.DropTransfer).
	Puller *handoff.Puller
	Drop   func(ctx context.Context, keys []tier.Key)
	// Root is the engine's chain root of a salt (engine.Engine.Root).
	Root func(salt string) prefix.Hash
	// EngineID names this replica in remote_engine_id.
	EngineID string
}

// handoffMetrics are stockpot_kv_transfer_*.
type handoffMetrics struct {
	bytes    *prometheus.CounterVec   // {direction="served|pulled"}
	blocks   *prometheus.CounterVec   // {direction}
	seconds  *prometheus.HistogramVec // {direction}
	failures *prometheus.CounterVec   // {reason}
}

func newHandoffMetrics(reg prometheus.Registerer, h *Handoff) (*handoffMetrics, error) {
	m := &handoffMetrics{
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_kv_transfer_bytes_total",
			Help: "Bytes of KV blocks handed between prefill and decode replicas, by direction (served by this prefill, pulled by this decode)."}, []string{"direction"}),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_kv_transfer_blocks_total",
			Help: "KV blocks handed between prefill and decode replicas, by direction."}, []string{"direction"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "stockpot_kv_transfer_seconds",
			Help: "Time of one transfer (a pull, or one served range), by direction.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"direction"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_kv_transfer_failures_total",
			Help: "Handoffs that did not bring every block, by reason (the decode computed the rest): pull (the peer failed or stopped short), served (a stream this prefill could not finish)."}, []string{"reason"}),
	}
	for _, d := range []string{"served", "pulled"} {
		m.bytes.WithLabelValues(d)
		m.blocks.WithLabelValues(d)
	}
	for _, r := range []string{"pull", "served"} {
		m.failures.WithLabelValues(r)
	}
	cs := []prometheus.Collector{m.bytes, m.blocks, m.seconds, m.failures}
	if h != nil && h.Registry != nil {
		now := time.Now
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stockpot_kv_transfer_leases",
				Help: "Transfers this prefill replica holds for decodes now (their blocks leased)."},
				func() float64 { n, _ := h.Registry.Stats(now()); return float64(n) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stockpot_kv_transfer_leases_expired_total",
				Help: "Transfers whose lease expired before a decode took them whole."},
				func() float64 { _, e := h.Registry.Stats(now()); return float64(e) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// handoffSpec checks a request's kv_transfer_params against this replica's role and, for a
// prefill, leases the prompt's blocks. stream: the client asked for a stream.
func (s *Server) handoffSpec(spec *pipeline.Spec, stream bool) error {
	t := spec.Transfer
	if t == nil || (!t.DoRemoteDecode && !t.DoRemotePrefill) {
		return nil
	}
	h := s.cfg.Handoff
	switch {
	case t.DoRemoteDecode && (h == nil || !h.Role.Prefills()):
		return api.Invalid("kv_transfer_params.do_remote_decode", "this replica does not prefill for decode replicas (serve --role prefill or both)")
	case t.DoRemoteDecode && stream:
		return api.Invalid("kv_transfer_params.do_remote_decode", "a prefill request (do_remote_decode) is answered whole: send stream false, as vLLM's proxy does")
	case t.DoRemotePrefill && (h == nil || !h.Role.Decodes() || h.Puller == nil):
		return api.Invalid("kv_transfer_params.do_remote_prefill", "this replica does not take handed-off prompts (serve --role decode or both, with --prefill-peer)")
	case t.DoRemotePrefill:
		if _, ok := h.Puller.Peers.Lookup(t.RemoteHost, t.RemotePort); !ok {
			return api.Invalid("kv_transfer_params.remote_host", "%s is not one of this replica's --prefill-peer replicas; a decode pulls only from those",
				api.Quote(net.JoinHostPort(t.RemoteHost, strconv.Itoa(t.RemotePort))))
		}
	}
	if t.DoRemoteDecode {
		spec.Req.Pins = append(spec.Req.Pins, engine.PinSpec{Tokens: len(spec.Req.Prompt), TTL: h.Registry.Lease(), Local: true})
	}
	return nil
}

// pullTransfer pulls a decode request's blocks into the transfer buffer, once its salt is
// final (tenant and key). It returns what to drop afterwards. A failure is counted and the
// request goes on: what was not pulled is computed.
func (s *Server) pullTransfer(ctx context.Context, spec *pipeline.Spec) []tier.Key {
	t, h := spec.Transfer, s.cfg.Handoff
	if t == nil || !t.DoRemotePrefill || h == nil || h.Puller == nil || spec.Req.FirstToken == nil {
		return nil // not a handed-off prompt, or not the prompt the prefill computed
	}
	base, ok := h.Puller.Peers.Lookup(t.RemoteHost, t.RemotePort)
	if !ok {
		return nil // handoffSpec refused it already
	}
	root := h.Root(spec.Req.CacheSalt)
	hashes := prefix.BlockHashes(root, spec.Req.Prompt, s.cfg.BlockSize)
	hashes = hashes[:min(len(hashes), prefix.MaxMatchBlocks(len(spec.Req.Prompt), s.cfg.BlockSize), len(t.RemoteBlockIDs))]
	if len(hashes) == 0 {
		return nil
	}
	res, err := h.Puller.Pull(ctx, base, t.RemoteRequestID, root, hashes)
	s.handoffM.bytes.WithLabelValues("pulled").Add(float64(res.Bytes))
	s.handoffM.blocks.WithLabelValues("pulled").Add(float64(res.Blocks))
	s.handoffM.seconds.WithLabelValues("pulled").Observe(res.Elapsed.Seconds())
	if err != nil && ctx.Err() == nil {
		s.handoffM.failures.WithLabelValues("pull").Inc()
		s.cfg.Logger.Warn("kv transfer pull stopped short; the decode computes the rest", "transfer", t.RemoteRequestID,
			"peer", base, "blocks", res.Blocks, "of", len(hashes), "err", err)
	}
	return res.Keys
}

// registerTransfer registers a prefill request's computed prompt for its decode and returns
// the kv_transfer_params of the answer. r is the request (its Host names this replica).
func (s *Server) registerTransfer(r *http.Request, spec *pipeline.Spec, res *runner.Result) *api.KVTransferParams {
	t, h := spec.Transfer, s.cfg.Handoff
	if t == nil || !t.DoRemoteDecode || h == nil || res == nil || len(res.Tokens) == 0 {
		return nil
	}
	n := prefix.MaxMatchBlocks(len(spec.Req.Prompt), s.cfg.BlockSize)
	id := handoff.NewID()
	if rid := r.Header.Get("X-Request-Id"); rid != "" && len(rid) <= 64 && validTransferID(rid) {
		id = "xfer-" + rid
	}
	h.Registry.Add(handoff.Transfer{ID: id, Root: h.Root(spec.Req.CacheSalt), Salt: spec.Req.CacheSalt,
		Prompt: spec.Req.Prompt, Blocks: n}, s.cfg.Now())
	host, port := advertised(r)
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	first := res.Tokens[0].ID
	return &api.KVTransferParams{DoRemotePrefill: true, RemoteEngineID: h.EngineID, RemoteBlockIDs: ids,
		RemoteHost: host, RemotePort: port, RemoteRequestID: id, TPSize: 1,
		FirstToken: &first, PromptTokens: len(spec.Req.Prompt), PromptDigest: api.PromptDigest(spec.Req.Prompt),
		LeaseMs: h.Registry.Lease().Milliseconds()}
}

// validTransferID reports whether an X-Request-Id may name a transfer (a path segment).
func validTransferID(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// advertised is the host and port a decode reaches this replica at: the Host the request
// came to (the address the proxy or router used), else the listener's.
func advertised(r *http.Request) (string, int) {
	host, p, err := net.SplitHostPort(r.Host)
	if err != nil {
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			host, p, _ = net.SplitHostPort(a.String())
		}
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// handleTransfer serves GET /v1/kv/transfer/{id} on a prefill replica.
func (s *Server) handleTransfer(w http.ResponseWriter, r *http.Request) {
	h := s.cfg.Handoff
	if h == nil || h.Source == nil {
		writeError(w, api.NotFound(r.Method, r.URL.Path))
		return
	}
	h.Source.ServeHTTP(w, r, writeError)
}

// transferServed counts one served pull (handoff.Source.Served).
func (s *Server) transferServed(blocks int, bytes int64, d time.Duration, err error) {
	s.handoffM.bytes.WithLabelValues("served").Add(float64(bytes))
	s.handoffM.blocks.WithLabelValues("served").Add(float64(blocks))
	s.handoffM.seconds.WithLabelValues("served").Observe(d.Seconds())
	if err != nil && !errors.Is(err, context.Canceled) {
		s.handoffM.failures.WithLabelValues("served").Inc()
	}
}
