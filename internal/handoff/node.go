package handoff

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// Node is one serving replica's part in disaggregation: its role, the transfers it holds for
// decodes (prefill), and its puller (decode). internal/server calls it at three points of a
// generation request that carries kv_transfer_params:
//   - Check, once the request is built: the params against the role; a prefill's prompt gets
//     its lease (a Local pin of its whole prompt).
//   - Pull, once the salt is final (tenant and key): a decode's blocks into the transfer
//     buffer. A pull that fails or stops short is counted and the decode computes the rest.
//   - Offer, once a prefill's first token is out: the transfer registered, and the answer's
//     kv_transfer_params.
type Node struct {
	Role Role
	// Prefill side: the transfers held for decodes, and the pull endpoint over them.
	Registry *Registry
	Source   *Source
	// Decode side: the puller (its Peers the only replicas it pulls from), and how to forget
	// pulled records once their request ran (offload.Tiers.DropTransfer).
	Puller *Puller
	Drop   func(ctx context.Context, keys []tier.Key)
	// Root is the engine's chain root of a salt (engine.Engine.Root); BlockSize its blocks'.
	Root      func(salt string) prefix.Hash
	BlockSize int
	// EngineID names this replica in remote_engine_id.
	EngineID string
	Logger   *slog.Logger

	m *metrics
}

// metrics are stockpot_kv_transfer_*.
type metrics struct {
	bytes    *prometheus.CounterVec   // {direction="served|pulled"}
	blocks   *prometheus.CounterVec   // {direction}
	seconds  *prometheus.HistogramVec // {direction}
	failures *prometheus.CounterVec   // {reason}
}

// Register registers n's metrics on reg and has its Source count the pulls it serves. A nil
// Node registers the series all the same (they read 0 on a replica that takes no handoff).
func (n *Node) Register(reg prometheus.Registerer) error {
	m := &metrics{
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
	if n != nil && n.Registry != nil {
		r := n.Registry
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "stockpot_kv_transfer_leases",
				Help: "Transfers this prefill replica holds for decodes now (their blocks leased)."},
				func() float64 { held, _ := r.Stats(time.Now()); return float64(held) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "stockpot_kv_transfer_leases_expired_total",
				Help: "Transfers whose lease expired before a decode took them whole."},
				func() float64 { _, e := r.Stats(time.Now()); return float64(e) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	if n != nil {
		n.m = m
		if n.Source != nil {
			n.Source.Served = n.served
		}
	}
	return nil
}

// served counts one served pull (Source.Served).
func (n *Node) served(blocks int, bytes int64, d time.Duration, err error) {
	n.m.bytes.WithLabelValues("served").Add(float64(bytes))
	n.m.blocks.WithLabelValues("served").Add(float64(blocks))
	n.m.seconds.WithLabelValues("served").Observe(d.Seconds())
	if err != nil && !errors.Is(err, context.Canceled) {
		n.m.failures.WithLabelValues("served").Inc()
	}
}

// RoleName is n's role as /health names it (both for a nil Node).
func (n *Node) RoleName() string {
	if n == nil {
		return string(RoleBoth)
	}
	return string(n.Role)
}

// Check checks spec's kv_transfer_params against n's role and, for a prefill, leases the
// prompt's blocks. stream: the client asked for a stream. Errors are 400s naming the field.
func (n *Node) Check(spec *pipeline.Spec, stream bool) error {
	t := spec.Transfer
	if t == nil || (!t.DoRemoteDecode && !t.DoRemotePrefill) {
		return nil
	}
	switch {
	case t.DoRemoteDecode && (n == nil || !n.Role.Prefills()):
		return api.Invalid("kv_transfer_params.do_remote_decode", "this replica does not prefill for decode replicas (serve --role prefill or both)")
	case t.DoRemoteDecode && stream:
		return api.Invalid("kv_transfer_params.do_remote_decode", "a prefill request (do_remote_decode) is answered whole: send stream false, as vLLM's proxy does")
	case t.DoRemotePrefill && (n == nil || !n.Role.Decodes() || n.Puller == nil):
		return api.Invalid("kv_transfer_params.do_remote_prefill", "this replica does not take handed-off prompts (serve --role decode or both, with --prefill-peer)")
	case t.DoRemotePrefill:
		if _, ok := n.Puller.Peers.Lookup(t.RemoteHost, t.RemotePort); !ok {
			return api.Invalid("kv_transfer_params.remote_host", "%s is not one of this replica's --prefill-peer replicas; a decode pulls only from those",
				api.Quote(net.JoinHostPort(t.RemoteHost, strconv.Itoa(t.RemotePort))))
		}
	}
	if t.DoRemoteDecode {
		spec.Req.Pins = append(spec.Req.Pins, engine.PinSpec{Tokens: len(spec.Req.Prompt), TTL: n.Registry.Lease(), Local: true})
	}
	return nil
}

// Pull pulls a decode request's blocks into the transfer buffer, once its salt is final. It
// returns the keys to Drop once the request ran (nil when nothing was pulled). A failure is
// counted and logged; what was not pulled is computed.
func (n *Node) Pull(ctx context.Context, spec *pipeline.Spec) []tier.Key {
	t := spec.Transfer
	if n == nil || t == nil || !t.DoRemotePrefill || n.Puller == nil || spec.Req.FirstToken == nil {
		return nil // not a handed-off prompt, or not the prompt the prefill computed
	}
	base, ok := n.Puller.Peers.Lookup(t.RemoteHost, t.RemotePort)
	if !ok {
		return nil // Check refused it already
	}
	root := n.Root(spec.Req.CacheSalt)
	hashes := prefix.BlockHashes(root, spec.Req.Prompt, n.BlockSize)
	hashes = hashes[:min(len(hashes), prefix.MaxMatchBlocks(len(spec.Req.Prompt), n.BlockSize), len(t.RemoteBlockIDs))]
	if len(hashes) == 0 {
		return nil
	}
	res, err := n.Puller.Pull(ctx, base, t.RemoteRequestID, root, hashes)
	n.m.bytes.WithLabelValues("pulled").Add(float64(res.Bytes))
	n.m.blocks.WithLabelValues("pulled").Add(float64(res.Blocks))
	n.m.seconds.WithLabelValues("pulled").Observe(res.Elapsed.Seconds())
	if err != nil && ctx.Err() == nil {
		n.m.failures.WithLabelValues("pull").Inc()
		if n.Logger != nil {
			n.Logger.Warn("kv transfer pull stopped short; the decode computes the rest", "transfer", t.RemoteRequestID,
				"peer", base, "blocks", res.Blocks, "of", len(hashes), "err", err)
		}
	}
	return res.Keys
}

// Offer registers a prefill request's computed prompt for its decode and returns the
// kv_transfer_params of the answer: first is the token it sampled, host and port where the
// decode reaches this replica, requestID the client's X-Request-Id ("" for none).
func (n *Node) Offer(spec *pipeline.Spec, first int32, host string, port int, requestID string, now time.Time) *api.KVTransferParams {
	t := spec.Transfer
	if n == nil || t == nil || !t.DoRemoteDecode || n.Registry == nil {
		return nil
	}
	blocks := prefix.MaxMatchBlocks(len(spec.Req.Prompt), n.BlockSize)
	id := NewID()
	if requestID != "" && len(requestID) <= 64 && pathSafe(requestID) {
		id = "xfer-" + requestID
	}
	n.Registry.Add(Transfer{ID: id, Root: n.Root(spec.Req.CacheSalt), Salt: spec.Req.CacheSalt,
		Prompt: spec.Req.Prompt, Blocks: blocks}, now)
	ids := make([]int, blocks)
	for i := range ids {
		ids[i] = i
	}
	return &api.KVTransferParams{DoRemotePrefill: true, RemoteEngineID: n.EngineID, RemoteBlockIDs: ids,
		RemoteHost: host, RemotePort: port, RemoteRequestID: id, TPSize: 1,
		FirstToken: &first, PromptTokens: len(spec.Req.Prompt), PromptDigest: api.PromptDigest(spec.Req.Prompt),
		LeaseMs: n.Registry.Lease().Milliseconds()}
}

// pathSafe reports whether s may name a transfer (a path segment).
func pathSafe(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// ServeTransfer serves GET TransferPath+ID on a prefill replica (404 on any other); errors
// in the API's shape (writeErr).
func (n *Node) ServeTransfer(w http.ResponseWriter, r *http.Request, writeErr func(http.ResponseWriter, error)) {
	if n == nil || n.Source == nil {
		writeErr(w, api.NotFound(r.Method, r.URL.Path))
		return
	}
	n.Source.ServeHTTP(w, r, writeErr)
}
