package server

import (
	"context"
	"net/http"
	"strconv"

	"stockpot/internal/api"
)

// POST /v1/cache/probe: what `stockpot check` (internal/preflight) needs to know of a replica
// that no other endpoint says: the cache identity digest, whether prefix caching is on, the
// prefetch policy, the cost model's figures, and a round trip of probe records through every
// lower tier with the time their read took (and, for Redis, its eviction settings). It writes
// to the tiers, so it is a POST, and it reads the server's configuration, so it takes the
// admin key, as the rest of the cache admin API (cache_admin.go).

// cacheProbePath is the route of the probe.
const cacheProbePath = "/v1/cache/probe"

// Bounds of ?read_bytes: what the probe writes to and reads back from each tier. The default
// is a few MiB, enough for a read rate that is not all call overhead; the maximum keeps one
// call from churning a tier.
const (
	defaultProbeBytes = 4 << 20
	maxProbeBytes     = 64 << 20
)

// CacheProbe is the answer of POST /v1/cache/probe.
type CacheProbe struct {
	Object      string `json:"object"` // "cache.probe"
	Model       string `json:"model"`
	Fingerprint string `json:"fingerprint"` // the model file's (as /v1/models)
	// Identity is the cache identity digest in hex (internal/identity: model, tokenizer, K/V
	// type, block size, state format): replicas that share blocks must show the same.
	Identity          string           `json:"identity"`
	BlockSize         int              `json:"block_size"`
	BlockBytes        int64            `json:"block_bytes"`
	PoolBytes         int64            `json:"pool_bytes"` // the working pool (device tier)
	PrefixCache       bool             `json:"prefix_cache"`
	Prefetch          string           `json:"prefetch"` // wait, timeout or best-effort
	PrefetchMaxWaitMS float64          `json:"prefetch_max_wait_ms"`
	Cost              CacheProbeCost   `json:"cost"`
	Tiers             []CacheProbeTier `json:"tiers"` // the lower tiers, fastest first
}

// CacheProbeCost is the cost model's current figures (internal/offload's CostModel).
type CacheProbeCost struct {
	PrefillTokensPerSecond float64            `json:"prefill_tokens_per_second"`
	AttendCost             float64            `json:"attend_cost"`
	ReadBandwidth          map[string]float64 `json:"read_bandwidth"` // bytes/s by tier
}

// CacheProbeTier is one lower tier's round trip.
type CacheProbeTier struct {
	Tier          string            `json:"tier"`
	CapacityBytes int64             `json:"capacity_bytes"` // 0: no budget of its own (Redis)
	Evictions     uint64            `json:"evictions"`
	PinnedItems   int64             `json:"pinned_items"`
	Records       int               `json:"records"`      // probe records written, each one block's size
	ReadBytes     int64             `json:"read_bytes"`   // read back and matched; 0 when the round trip failed
	ReadSeconds   float64           `json:"read_seconds"` // the reads of all of them
	Error         string            `json:"error,omitempty"`
	Redis         []CacheProbeRedis `json:"redis,omitempty"` // the remote tier: each server's (each master's)
}

// CacheProbeRedis is one Redis server's eviction settings (CONFIG GET).
type CacheProbeRedis struct {
	Addr            string `json:"addr"`
	MaxMemoryPolicy string `json:"maxmemory_policy"`
	MaxMemory       int64  `json:"maxmemory"`
	Error           string `json:"error,omitempty"`
}

// CacheProber answers a probe: everything but the fields the server fills itself (Object,
// Model, Fingerprint, BlockSize). readBytes is what to write and read back per tier.
type CacheProber func(ctx context.Context, readBytes int64) CacheProbe

// SetCacheProber serves POST /v1/cache/probe with p (the wiring in cmd/stockpot: only it
// holds the engine's configuration and the tiers). Without a prober the route is absent (404).
// REQUIRES: called before Serve (the routes are read without a lock).
func (s *Server) SetCacheProber(p CacheProber) {
	s.routes[cacheProbePath] = map[string]http.HandlerFunc{http.MethodPost: s.requireAdmin(s.probeHandler(p))}
}

func (s *Server) probeHandler(p CacheProber) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n := int64(defaultProbeBytes)
		if v := r.URL.Query().Get("read_bytes"); v != "" {
			k, err := strconv.ParseInt(v, 10, 64)
			if err != nil || k < 0 || k > maxProbeBytes {
				writeError(w, api.Invalid("read_bytes", "read_bytes must be a whole number from 0 to %d, got %s", maxProbeBytes, api.Quote(v)))
				return
			}
			n = k
		}
		out := p(r.Context(), n)
		out.Object, out.Model, out.Fingerprint, out.BlockSize = "cache.probe", s.cfg.ModelName, s.cfg.Fingerprint, s.cfg.BlockSize
		if out.Tiers == nil {
			out.Tiers = []CacheProbeTier{}
		}
		writeJSON(w, http.StatusOK, out)
	}
}
