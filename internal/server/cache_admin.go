package server

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/runner"
	"stockpot/internal/tenant"
)

// The cache admin API: POST /v1/cache/prewarm, GET /v1/cache, DELETE /v1/cache.
//
// They are guarded by the admin keys alone (Config.AdminKeys, --admin-key), never by the API
// keys: an API key lets a client use the cache, an admin key lets an operator fill, read and
// drop it for every tenant. Without an admin key configured they answer 403 (off), with a
// missing or wrong key 401, as the router's /backends. The router fans them out with its
// --backend-key, so a replica behind a router takes the router's --backend-key among its
// --admin-key values.

// Paths of the cache admin API.
const (
	cachePath        = "/v1/cache"
	cachePrewarmPath = "/v1/cache/prewarm"
)

// CacheAdmin is what the cache admin API needs of the engine (*engine.Engine is one).
type CacheAdmin interface {
	// Prewarm computes req's prompt into the working pool without generating.
	Prewarm(ctx context.Context, req *engine.Request) (engine.Usage, error)
	// Residency reports the pool and its top prefixes, at most limit of each list.
	Residency(limit int) engine.Residency
	// DropCache drops salt's blocks (all: every root) from the pool.
	DropCache(salt string, all bool) engine.Dropped
	// PoolFits says whether an n-token prompt fits the pool at all.
	PoolFits(n int) error
	// Pins lists the working pool's pinned blocks; Unpin unpins those match selects (and the
	// pins below them), returning how many blocks it unpinned.
	Pins() []engine.PinInfo
	Unpin(match func(engine.PinInfo) bool) int
	// Root is the chain root of a tenant's (salt's) blocks.
	Root(salt string) prefix.Hash
}

// Bounds of GET /v1/cache's ?limit: each list (roots, prefixes by hits, by bytes) has at most
// limit rows; the default keeps the answer a few KiB, the maximum a few hundred.
const (
	defaultCacheLimit = 20
	maxCacheLimit     = 1000
)

// cacheAdminRoutes are the routes of the cache admin API, merged into Server.routes.
func (s *Server) cacheAdminRoutes() map[string]map[string]http.HandlerFunc {
	return map[string]map[string]http.HandlerFunc{
		cachePath:        {http.MethodGet: s.requireAdmin(s.handleCacheGet), http.MethodDelete: s.requireAdmin(s.handleCacheDelete)},
		cachePrewarmPath: {http.MethodPost: s.requireAdmin(s.handlePrewarm)},
	}
}

// permissionError is the OpenAI error type of an authenticated but forbidden call.
const permissionError = "permission_error"

// requireAdmin guards h with the admin keys (adminAllowed) and needs a CacheAdmin.
func (s *Server) requireAdmin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.adminAllowed(w, r) {
			return
		}
		if s.cfg.CacheAdmin == nil {
			writeError(w, &api.Error{Status: http.StatusNotImplemented, Type: api.TypeInvalidRequest, Code: "not_implemented",
				Message: "this server's engine offers no cache admin API"})
			return
		}
		h(w, r)
	}
}

// adminAllowed checks r for an admin key, from "Authorization: Bearer KEY" or "x-api-key",
// and answers the refusal itself: 403 without any admin key configured or for a key that is
// not an admin key (an API key), 401 for a missing or unknown one. Every refused call is
// logged with the caller's address, never the key.
func (s *Server) adminAllowed(w http.ResponseWriter, r *http.Request) bool {
	if e := s.checkRight(r, rightAdmin, false); e != nil { // endpoint_auth.go
		writeError(w, e)
		return false
	}
	return true
}

// PrewarmResponse is the answer of POST /v1/cache/prewarm.
type PrewarmResponse struct {
	Object         string `json:"object"` // "cache.prewarm"
	PromptTokens   int    `json:"prompt_tokens"`
	CachedTokens   int    `json:"cached_tokens"`       // found cached (any tier)
	ComputedTokens int    `json:"computed_tokens"`     // prefilled by this call
	Blocks         int    `json:"blocks"`              // full blocks of the prompt now in the pool
	PinnedTokens   int    `json:"pinned_tokens"`       // held by the pin ("pin"), whole blocks; less than asked when over the pin budget
	PinLimit       string `json:"pin_limit,omitempty"` // why pinned_tokens is less than asked (usage.cache.pin_limit's values)
}

func (s *Server) handlePrewarm(w http.ResponseWriter, r *http.Request) {
	_, req, err := readGeneration(s, r, api.ParsePrewarmRequest, func(q *api.PrewarmRequest) string { return q.Model })
	if err != nil {
		writeError(w, err)
		return
	}
	prompt, err := s.pipe.Prewarm(req)
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.pipe.CheckVocab("prompt", prompt); err != nil {
		writeError(w, err)
		return
	}
	if len(prompt) >= s.cfg.ContextLength {
		writeError(w, api.Invalid("prompt", "prewarm larger than the context: %d tokens, the model's context length is %d", len(prompt), s.cfg.ContextLength))
		return
	}
	if err := s.cfg.CacheAdmin.PoolFits(len(prompt)); err != nil {
		writeError(w, api.Invalid("prompt", "prewarm larger than the pool: %v", err))
		return
	}
	ereq := &engine.Request{Prompt: prompt, CacheSalt: req.CacheSalt}
	if err := s.prewarmNamespace(req, ereq); err != nil {
		writeError(w, err)
		return
	}
	if req.PinTTL > 0 {
		ereq.Pins, ereq.PinStrict = []engine.PinSpec{{Tokens: len(prompt), TTL: req.PinTTL}}, req.PinStrict
	}
	u, err := s.cfg.CacheAdmin.Prewarm(r.Context(), ereq)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left
		}
		writeError(w, runner.EngineError(err))
		return
	}
	out := PrewarmResponse{Object: "cache.prewarm", PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens(),
		ComputedTokens: u.ComputedTokens, Blocks: len(prompt) / s.cfg.BlockSize}
	for _, p := range u.Pins {
		out.PinnedTokens = max(out.PinnedTokens, p.Pinned)
	}
	if out.PinLimit = pinLimit(u.Pins); out.PinLimit != "" {
		name := ereq.Tenant
		if name == "" {
			name = tenant.DefaultName
		}
		s.tenantMetrics.pinsLimited.WithLabelValues(name, out.PinLimit).Inc()
	}
	writeJSON(w, http.StatusOK, out)
}

// CacheTier is one tier's residency in GET /v1/cache.
type CacheTier struct {
	Tier          string `json:"tier"`
	Blocks        int64  `json:"blocks"`
	Bytes         int64  `json:"bytes"`
	CapacityBytes int64  `json:"capacity_bytes"` // Redis: the server's maxmemory (0: none), measured with its blocks and bytes (internal/tier/redis, Stats)
	// The working pool only: blocks held by running requests, cached for reuse, and free.
	UsedBlocks   *int `json:"used_blocks,omitempty"`
	CachedBlocks *int `json:"cached_blocks,omitempty"`
	FreeBlocks   *int `json:"free_blocks,omitempty"`
	// The lower tiers only.
	Evictions *uint64 `json:"evictions,omitempty"`
}

// CacheRoot is one chain root's share of the working pool. Root is its hash in hex (a root
// names the model identity and the tenant salt; the salt itself is not kept).
type CacheRoot struct {
	Root   string `json:"root"`
	Blocks int    `json:"blocks"`
}

// CachePrefix is one cached prefix of the working pool: the chain from Root through the
// block Hash, Tokens long.
type CachePrefix struct {
	Root   string `json:"root"`
	Hash   string `json:"hash"`
	Depth  int    `json:"depth"`
	Tokens int    `json:"tokens"`
	Bytes  int64  `json:"bytes"`
	Hits   int    `json:"hits"`
}

// CachePin is one pin: in the working pool ("device") a pinned prefix, from its first block
// (Head) to its last (ID, the id DELETE /v1/cache?pin= takes), Tokens long; in a lower tier one
// pinned block (Blocks 1, no Head or Tokens: the tiers keep no chains).
type CachePin struct {
	ID      string    `json:"id"`
	Tier    string    `json:"tier"`
	Root    string    `json:"root"`
	Head    string    `json:"head,omitempty"`
	Blocks  int       `json:"blocks"`
	Tokens  int       `json:"tokens,omitempty"`
	TTL     float64   `json:"ttl_seconds"`
	Expires time.Time `json:"expires_at"` // the earliest along the chain: when it first gets shorter
}

// CacheResponse is the answer of GET /v1/cache.
type CacheResponse struct {
	Object    string      `json:"object"` // "cache"
	BlockSize int         `json:"block_size"`
	Tiers     []CacheTier `json:"tiers"` // device first, then each configured tier
	Roots     []CacheRoot `json:"roots"`
	Top       struct {
		ByHits  []CachePrefix `json:"by_hits"`
		ByBytes []CachePrefix `json:"by_bytes"`
	} `json:"top_prefixes"`
	Pins  []CachePin `json:"pins"`
	Limit int        `json:"limit"`
}

func (s *Server) handleCacheGet(w http.ResponseWriter, r *http.Request) {
	limit := defaultCacheLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxCacheLimit {
			writeError(w, api.Invalid("limit", "limit must be a whole number from 1 to %d, got %s", maxCacheLimit, api.Quote(v)))
			return
		}
		limit = n
	}
	res := s.cfg.CacheAdmin.Residency(limit)
	p := res.Pool
	out := CacheResponse{Object: "cache", BlockSize: p.BlockSize, Limit: limit, Pins: []CachePin{}, Roots: []CacheRoot{}}
	used, cached, free := p.Used, p.Cached, p.Free
	out.Tiers = append(out.Tiers, CacheTier{Tier: kvtier.Device.String(), Blocks: int64(p.Used + p.Cached),
		Bytes: int64(p.Used+p.Cached) * p.BlockBytes, CapacityBytes: int64(p.Blocks) * p.BlockBytes,
		UsedBlocks: &used, CachedBlocks: &cached, FreeBlocks: &free})
	if s.cfg.TierStats != nil {
		for _, st := range s.cfg.TierStats() {
			ev := st.Evictions
			out.Tiers = append(out.Tiers, CacheTier{Tier: st.Tier.String(), Blocks: st.Items, Bytes: st.UsedBytes,
				CapacityBytes: st.CapacityBytes, Evictions: &ev})
		}
	}
	for _, rr := range res.Roots {
		out.Roots = append(out.Roots, CacheRoot{Root: hex.EncodeToString(rr.Root[:]), Blocks: rr.Blocks})
	}
	conv := func(ps []engine.CachedPrefix) []CachePrefix {
		o := make([]CachePrefix, 0, len(ps))
		for _, c := range ps {
			o = append(o, CachePrefix{Root: hex.EncodeToString(c.Root[:]), Hash: hex.EncodeToString(c.Hash[:]),
				Depth: c.Depth, Tokens: c.Tokens, Bytes: c.Bytes, Hits: c.Hits})
		}
		return o
	}
	out.Top.ByHits, out.Top.ByBytes = conv(res.ByHits), conv(res.ByBytes)
	out.Pins = s.cachePins(limit)
	writeJSON(w, http.StatusOK, out)
}

// CacheDropResponse is the answer of DELETE /v1/cache.
type CacheDropResponse struct {
	Object         string            `json:"object"`         // "cache.dropped"
	Tier           string            `json:"tier,omitempty"` // the one tier dropped (?tier=); absent: the pool and every lower tier
	DroppedBlocks  int               `json:"dropped_blocks"`
	BusyBlocks     int               `json:"busy_blocks"`     // of those, still held by running requests (freed when they end)
	UnpinnedBlocks int               `json:"unpinned_blocks"` // pinned blocks unpinned before the drop
	Tiers          map[string]uint64 `json:"tiers"`           // blocks deleted per lower tier
	TierErrors     []string          `json:"tier_errors,omitempty"`
}

func (s *Server) handleCacheDelete(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n := 0
	for _, k := range []string{"salt", "all", "pin"} {
		if q.Has(k) {
			n++
		}
	}
	if n != 1 {
		writeError(w, api.Invalid("", "DELETE /v1/cache takes exactly one of ?salt=S (a tenant's blocks; salt= is the unsalted tenant), ?all=1 (everything of this model) and ?pin=ID"))
		return
	}
	switch {
	case q.Has("pin"):
		if q.Has("tier") {
			writeError(w, api.Invalid("tier", "?tier= goes with ?all=1 or ?salt=S, not ?pin=ID (a pin is unpinned in every tier)"))
			return
		}
		s.handleUnpin(w, r, q.Get("pin"))
		return
	case q.Has("all"):
		if v := q.Get("all"); v != "1" && v != "true" {
			writeError(w, api.Invalid("all", "all must be 1 or true, got %s", api.Quote(v)))
			return
		}
	case len(q.Get("salt")) > api.MaxCacheSaltBytes:
		writeError(w, api.Invalid("salt", "salt is %d bytes, over the limit of %d", len(q.Get("salt")), api.MaxCacheSaltBytes))
		return
	}
	only, ok := s.dropTier(w, q)
	if !ok {
		return
	}
	all := q.Has("all")
	salt := q.Get("salt")
	if name := q.Get("tenant"); name != "" && q.Has("salt") { // ?tenant=NAME&salt=S: S within NAME's namespace
		t := s.cfg.Tenants.Lookup(name)
		if t == nil {
			writeError(w, api.Invalid("tenant", "no tenant %s in this server's --tenants file", api.Quote(name)))
			return
		}
		salt = t.Salt(salt)
	}
	// Dropping a tenant (or everything) drops its pins first: a pinned block is held, so it
	// would otherwise stay behind as busy. The tiers lose the pins with the blocks. A drop of
	// the pool alone (?tier=device) unpins too, since a pinned block cannot leave the pool;
	// the lower tiers then keep their copies, unpinned. A drop of one lower tier leaves the
	// pool, and its pins, alone.
	out := CacheDropResponse{Object: "cache.dropped", Tiers: map[string]uint64{}}
	root := s.cfg.CacheAdmin.Root(salt)
	if all {
		root = prefix.Hash{} // the zero root: every root
	}
	pool := !only.Valid() || only == kvtier.Device
	if pool {
		out.UnpinnedBlocks = s.cfg.CacheAdmin.Unpin(func(p engine.PinInfo) bool { return all || p.Root == root })
		d := s.cfg.CacheAdmin.DropCache(salt, all)
		out.DroppedBlocks, out.BusyBlocks, root = d.Blocks, d.Busy, d.Root
	}
	if only.Valid() {
		out.Tier = only.String()
	}
	if s.cfg.TierDrop != nil && only != kvtier.Device {
		var tiers []kvtier.Tier
		if only.Valid() {
			tiers = []kvtier.Tier{only}
		}
		counts, err := s.cfg.TierDrop(r.Context(), root, tiers...)
		for t := range kvtier.Tier(kvtier.Count) {
			if t != kvtier.Device && counts[t] > 0 {
				out.Tiers[t.String()] = counts[t]
			}
		}
		if err != nil {
			s.cfg.Logger.Warn("cache drop: a tier failed", "err", err)
			for _, e := range unjoin(err) {
				out.TierErrors = append(out.TierErrors, e.Error())
			}
		}
	}
	s.cfg.Logger.Info("cache dropped", "all", all, "tier", out.Tier, "root", hex.EncodeToString(root[:8]), "blocks", out.DroppedBlocks, "busy", out.BusyBlocks, "tiers", fmt.Sprint(out.Tiers))
	writeJSON(w, http.StatusOK, out)
}

// noTier is dropTier's answer for a drop of every tier: not a valid kvtier.Tier.
const noTier = kvtier.Tier(kvtier.Count)

// dropTier reads DELETE /v1/cache's ?tier=: absent, noTier (the pool and every lower tier);
// "device", the working pool alone; "host", "disk" or "remote", that lower tier alone, which
// this server must have. Anything else is answered with a 400 here (ok false).
func (s *Server) dropTier(w http.ResponseWriter, q url.Values) (kvtier.Tier, bool) {
	if !q.Has("tier") {
		return noTier, true
	}
	v := q.Get("tier")
	have := []string{kvtier.Device.String()}
	if s.cfg.TierStats != nil {
		for _, st := range s.cfg.TierStats() {
			have = append(have, st.Tier.String())
		}
	}
	t, err := kvtier.Parse(v)
	if err != nil {
		writeError(w, api.Invalid("tier", "tier must be one of device, host, disk and remote, got %s", api.Quote(v)))
		return noTier, false
	}
	if !slices.Contains(have, v) {
		writeError(w, api.Invalid("tier", "this server has no %s tier (it has %s)", v, strings.Join(have, ", ")))
		return noTier, false
	}
	return t, true
}

// unjoin splits an errors.Join result into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TierDropper is Config.TierDrop's type: drop every block under root (the zero root: every
// root) from the lower tiers, or from those in only when it is given, reporting the count per
// tier (offload.Tiers.DropRoot).
type TierDropper = func(ctx context.Context, root prefix.Hash, only ...kvtier.Tier) (kvtier.Counts, error)
