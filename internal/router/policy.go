package router

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

// Policy picks a backend for a request. Implementations are safe for
// concurrent use. cands is non-empty, holds only healthy backends not yet
// tried for this request, and must not be modified.
type Policy interface {
	Name() string
	Pick(req *Request, cands []*Backend) Decision
}

// tokenNeeder is the optional ability of a policy that wants the prompt's
// tokens for this request (the router then tokenizes it first).
type tokenNeeder interface {
	NeedsTokens(req *Request) bool
}

// Decision is a policy's choice, with the evidence the metrics record.
type Decision struct {
	Backend *Backend
	// PredictedTokens is how many prompt tokens the policy expects the
	// backend to find cached (kv-aware only; 0 otherwise).
	PredictedTokens int
	// Reason says why: "random", "round-robin", "least-loaded", "affinity"
	// (rendezvous top choice), "spill" (affinity skipped a busy backend),
	// "cache" (kv-aware overlap), "fallback".
	Reason string
	// CacheKey is the request's prompt_cache_key when the decision was made
	// on it (prefix and kv-aware; see cachekey.go), "" otherwise.
	CacheKey string
}

// Request is what policies see of a request.
type Request struct {
	// SessionID is the X-Session-ID header, "" when absent.
	SessionID string
	// Tokens is the prompt's token ids, nil when unknown.
	Tokens []int32
	// Salt is the request's cache_salt, within its tenant's namespace (the salt the replica
	// derives: tenant.Tenant.Salt).
	Salt string
	// Namespace is the tenant's salt prefix ("" without tenants): the session affinity key
	// includes it, so two tenants' equal X-Session-IDs do not steer each other.
	Namespace string
	// CacheKey is the request's prompt_cache_key, "" when absent: the
	// affinity key ahead of SessionID and the prompt's tokens.
	CacheKey string

	// peers is every backend the router has (nil: the candidates): kv-aware reads the
	// shared remote tier's blocks from all of their indexes, so a retry that excludes the
	// replica that wrote a block still sees it.
	peers []*Backend
	// remote is the router's shared remote set (sharedRemote; nil without a router: then the
	// shared blocks are read from the live peers' own indexes).
	remote *replicaIndex

	keyDone bool
	key     uint64
	// chains memoizes block hashes by identity and block size: replicas of
	// one model share one chain, so this is usually computed once. Each comes
	// from chainPool; release hands them back. chainsBuf backs chains for the
	// usual one or two.
	chains    []*hashChain
	chainsBuf [2]*hashChain
	// pooledTokens: Tokens came from tokenPool (parseTokenArray into a pooled
	// buffer); release hands it back.
	pooledTokens *[]int32
}

// chainPool and tokenPool hold the per-request scratch of the kv-aware pick (a chain's
// hashes, run keys and key buffer; the prompt's parsed token ids), about 25 KB for a
// 2048-token prompt: allocated afresh for every request it was most of what the pick
// allocated, and so most of what made the collector run on the request path.
var (
	chainPool = sync.Pool{New: func() any { return new(hashChain) }}
	tokenPool = sync.Pool{New: func() any { return new([]int32) }}
)

// release hands the request's pooled scratch back (its chains and, when pooled, Tokens).
// The Request, its Tokens and every slice its chains returned must not be used after.
func (r *Request) release() {
	for i, c := range r.chains {
		c.reset()
		chainPool.Put(c)
		r.chains[i] = nil
	}
	r.chains = nil
	if p := r.pooledTokens; p != nil {
		*p = r.Tokens[:0]
		r.Tokens, r.pooledTokens = nil, nil
		tokenPool.Put(p)
	}
}

// affinityKey is the hash of the salt and prompt_cache_key when there is a
// key, else the session ID's hash when there is one, else the hash of the
// salt and the first prefixTokens tokens; ok=false when none exists.
//
// The hash is fixed (no per-process seed): placement must be a function of the request and the
// membership alone, so that a restarted router sends a session where the last one did, and two
// routers in front of the same replicas agree. A client can therefore aim keys at one backend;
// the bounded loads (LoadBound, ConcurrencyThreshold) are what stop that from becoming a hot spot,
// as they do for one heavy session.
func (r *Request) affinityKey(prefixTokens int) (uint64, bool) {
	if r.keyDone {
		return r.key, true
	}
	var h stableHash
	switch {
	case r.CacheKey != "":
		h.string("k:")
		h.string(r.Salt)
		h.word(0)
		h.string(r.CacheKey)
	case r.SessionID != "":
		h.string("s:")
		if r.Namespace != "" {
			h.string(r.Namespace)
			h.string("\x00")
		}
		h.string(r.SessionID)
	case len(r.Tokens) > 0:
		h.string("t:")
		h.string(r.Salt)
		h.word(0)
		for _, t := range r.Tokens[:min(len(r.Tokens), prefixTokens)] {
			h.word(uint64(uint32(t)))
		}
	default:
		return 0, false
	}
	r.key, r.keyDone = h.sum(), true
	return r.key, true
}

// stableHash is a 64-bit hash with a fixed seed (see affinityKey): FNV-1a over bytes and a
// multiply-xorshift step per token word. It buckets requests; it is not a defence against
// crafted input (the load bounds are).
type stableHash struct{ h uint64 }

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
	mixPrime  = 0x9e3779b97f4a7c15 // 2^64 / φ
)

func (s *stableHash) string(v string) {
	if s.h == 0 {
		s.h = fnvOffset
	}
	for i := 0; i < len(v); i++ {
		s.h = (s.h ^ uint64(v[i])) * fnvPrime
	}
	// The length ends the field, so ("ab","c") and ("a","bc") differ.
	s.word(uint64(len(v)))
}

func (s *stableHash) word(v uint64) {
	if s.h == 0 {
		s.h = fnvOffset
	}
	s.h = (s.h ^ v) * mixPrime
	s.h ^= s.h >> 29
}

func (s *stableHash) sum() uint64 {
	z := s.h
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// chain returns the request's (lazily computed) chain hashes for a replica
// with this identity and block size.
func (r *Request) chain(identity []byte, blockSize int, cache *hashCache) *hashChain {
	for _, c := range r.chains {
		if c.blockSize == blockSize && c.identity == string(identity) {
			return c
		}
	}
	c := chainPool.Get().(*hashChain)
	c.identity, c.blockSize, c.salt, c.tokens, c.cache = string(identity), blockSize, r.Salt, r.Tokens, cache
	if r.chains == nil {
		r.chains = r.chainsBuf[:0]
	}
	r.chains = append(r.chains, c)
	return c
}

// blockHashes returns all of the request's chain hashes for a replica with
// this identity and block size.
func (r *Request) blockHashes(identity []byte, blockSize int) []prefix.Hash {
	return r.chain(identity, blockSize, nil).all()
}

// PolicyConfig configures the policies.
type PolicyConfig struct {
	// PrefixTokens is how many leading tokens the prefix policy hashes when
	// a request has no X-Session-ID. Default 256: past a typical system
	// prompt plus the start of the first user turn, so sessions that share
	// only a system prompt still spread.
	PrefixTokens int
	// ConcurrencyThreshold: a backend with this many requests in flight is
	// busy and skipped for the next candidate (0: no threshold).
	ConcurrencyThreshold int
	// LoadBound is c in bounded-load hashing: a backend may hold at most
	// ceil(c · (total in flight + 1) / backends) requests before affinity
	// spills to the next candidate. Default 1.25 (Mirrokni et al.: the
	// maximum load stays within 25% of the mean while remapping little).
	LoadBound float64
	// LoadPenalty is kv-aware's cost of one in-flight request, in matched
	// device blocks (> 0; 0 means the default). Default 1: a replica
	// holding k more blocks of the prompt wins unless it runs k more
	// requests.
	LoadPenalty float64
	// PrefillPenalty is kv-aware's cost of one block of prompt the replica reports queued
	// for prefill, in matched device blocks (replica_load.go). Default 1: a block matched is
	// a block not prefilled, a block queued is one prefilled first. Negative: not scored.
	PrefillPenalty float64
	// KVUsageMax: a replica that reports this share of its KV pool held by running requests
	// and pins is at kv-aware's bound (replica_load.go). Default 0.9; 1 or more: never.
	KVUsageMax float64
	// TierWeights value a matched block by its fastest tier, for a replica that has not
	// published its cost figures yet; once it has, weights derive from its measured restore
	// and prefill rates (index.go, tierWeights).
	TierWeights [kvtier.Count]float64
	// StaleAfter: a replica whose stream sent nothing (not even a
	// heartbeat) for this long has its index ignored. Default 5s.
	StaleAfter time.Duration
	// IndexMaxBlocks bounds each replica's index (0: DefaultIndexMaxBlocks); past it the
	// least recently stored entries are dropped.
	IndexMaxBlocks int
	// Now is the clock the staleness check reads (tests); default time.Now. Index entries
	// never expire by age: only the replica's Removed events, Cleared and snapshots end
	// them (index.go).
	Now func() time.Time
}

// DefaultPolicyConfig returns the defaults.
func DefaultPolicyConfig() PolicyConfig {
	return PolicyConfig{PrefixTokens: 256, LoadBound: 1.25, LoadPenalty: 1, PrefillPenalty: 1, KVUsageMax: 0.9,
		TierWeights: defaultTierWeights, StaleAfter: 5 * time.Second}
}

// validate fills zero values with the defaults and rejects bad ones (negative, NaN, or a
// load bound below 1, which no backend could meet).
func (c PolicyConfig) validate() (PolicyConfig, error) {
	d := DefaultPolicyConfig()
	if c.PrefixTokens < 0 || c.ConcurrencyThreshold < 0 {
		return c, fmt.Errorf("router: PrefixTokens %d and ConcurrencyThreshold %d must not be negative", c.PrefixTokens, c.ConcurrencyThreshold)
	}
	if c.PrefixTokens == 0 {
		c.PrefixTokens = d.PrefixTokens
	}
	if c.LoadBound != 0 && !(c.LoadBound >= 1) { // !(>=) also catches NaN
		return c, fmt.Errorf("router: LoadBound %v must be at least 1 (0: default %v)", c.LoadBound, d.LoadBound)
	}
	if c.LoadBound == 0 {
		c.LoadBound = d.LoadBound
	}
	if c.LoadPenalty != 0 && !(c.LoadPenalty > 0) {
		return c, fmt.Errorf("router: LoadPenalty %v must be positive (0: default %v)", c.LoadPenalty, d.LoadPenalty)
	}
	if c.LoadPenalty == 0 {
		c.LoadPenalty = d.LoadPenalty
	}
	if math.IsNaN(c.PrefillPenalty) || math.IsNaN(c.KVUsageMax) || c.KVUsageMax < 0 {
		return c, fmt.Errorf("router: PrefillPenalty %v and KVUsageMax %v must be numbers, KVUsageMax not negative", c.PrefillPenalty, c.KVUsageMax)
	}
	if c.PrefillPenalty == 0 {
		c.PrefillPenalty = d.PrefillPenalty
	}
	if c.KVUsageMax == 0 {
		c.KVUsageMax = d.KVUsageMax
	}
	for t, w := range c.TierWeights {
		if !(w >= 0) {
			return c, fmt.Errorf("router: TierWeights[%d] %v must not be negative", t, w)
		}
	}
	if c.TierWeights == ([kvtier.Count]float64{}) {
		c.TierWeights = d.TierWeights
	}
	if c.IndexMaxBlocks < 0 {
		return c, fmt.Errorf("router: IndexMaxBlocks %d must not be negative", c.IndexMaxBlocks)
	}
	if c.StaleAfter < 0 {
		return c, fmt.Errorf("router: StaleAfter %v must not be negative", c.StaleAfter)
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = d.StaleAfter
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// PolicyNames lists the policies NewPolicy knows.
var PolicyNames = []string{"random", "round-robin", "least-loaded", "prefix", "kv-aware"}

// NewPolicy returns the named policy.
func NewPolicy(name string, cfg PolicyConfig) (Policy, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	switch name {
	case "random":
		return randomPolicy{}, nil
	case "round-robin":
		return &roundRobin{}, nil
	case "least-loaded":
		return leastLoaded{}, nil
	case "prefix":
		return newPrefixPolicy(cfg), nil
	case "kv-aware":
		affinity := newPrefixPolicy(cfg)
		affinity.load = (*Backend).boundLoad // every router's requests, as the replicas report them
		return &kvAware{cfg: cfg, affinity: affinity, hashes: newHashCache()}, nil
	}
	return nil, fmt.Errorf("router: unknown policy %q (want one of %v)", name, PolicyNames)
}

func busy(b *Backend, threshold int) bool { return threshold > 0 && b.Load() >= threshold }

type randomPolicy struct{}

func (randomPolicy) Name() string { return "random" }
func (randomPolicy) Pick(_ *Request, c []*Backend) Decision {
	return Decision{Backend: c[rand.IntN(len(c))], Reason: "random"}
}

type roundRobin struct{ next atomic.Uint64 }

func (*roundRobin) Name() string { return "round-robin" }
func (p *roundRobin) Pick(_ *Request, c []*Backend) Decision {
	return Decision{Backend: c[(p.next.Add(1)-1)%uint64(len(c))], Reason: "round-robin"}
}

type leastLoaded struct{}

func (leastLoaded) Name() string { return "least-loaded" }
func (leastLoaded) Pick(_ *Request, c []*Backend) Decision {
	return Decision{Backend: pickLeastLoaded(c), Reason: "least-loaded"}
}

// pickLeastLoaded returns a backend with the least load (policyLoad: this router's requests
// in flight plus the others its replica reports, replica_load.go), chosen uniformly among
// ties (reservoir sampling), so a burst of arrivals at equal load does not all land on the
// first backend.
func pickLeastLoaded(c []*Backend) *Backend {
	var best *Backend
	bestLoad, ties := math.MaxInt, 0
	for _, b := range c {
		switch l := b.policyLoad(); {
		case l < bestLoad:
			best, bestLoad, ties = b, l, 1
		case l == bestLoad:
			ties++
			if rand.IntN(ties) == 0 {
				best = b
			}
		}
	}
	return best
}

// prefixPolicy is rendezvous (highest-random-weight) hashing with bounded
// loads. Why rendezvous rather than a ring with virtual nodes: with a few
// to a few dozen backends, scoring each one per request costs nanoseconds,
// it needs no ring state to rebuild on membership changes, balance is exact
// in expectation without tuning a virtual-node count, and removing a backend
// moves only its own keys (adding one of n+1 moves 1/(n+1) of them) — the
// minimal remapping consistent hashing promises. The candidate order for a
// key is fixed, so a spill under load goes to the same second choice every
// time.
//
// Spills are sticky: the policy remembers where each key went last, and
// sends it there again while that backend is under the bounds, since it
// holds the key's freshest prefix. Without this, a backend that drew one
// session too many would spill a session on every round and send it back
// the next (two partial misses per round); with it, one session moves once
// and the load evens out. The memory is a plain map cleared when it reaches
// stickyMax keys (a cleared key falls back to rendezvous order, which is
// where it most likely is anyway).
type prefixPolicy struct {
	cfg PolicyConfig
	// load is what the bound reads: ownLoad, or boundLoad as kv-aware's affinity.
	load func(*Backend) int
	mu   struct {
		sync.Mutex
		last map[uint64]string // key → backend ID (IDs, not pointers: a removed backend's index is not kept alive)
	}
}

// stickyMax bounds the spill memory: 64Ki keys × ~50 bytes ≈ 3 MiB.
const stickyMax = 1 << 16

func newPrefixPolicy(cfg PolicyConfig) *prefixPolicy {
	p := &prefixPolicy{cfg: cfg, load: ownLoad}
	p.mu.last = make(map[uint64]string)
	return p
}

func (*prefixPolicy) Name() string { return "prefix" }

func (p *prefixPolicy) NeedsTokens(r *Request) bool { return r.SessionID == "" && r.CacheKey == "" }

// score is the rendezvous weight of key on b.
func score(key uint64, b *Backend) uint64 {
	// splitmix64 finalizer over key ^ idHash: cheap, well mixed.
	z := key ^ b.idHash
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (p *prefixPolicy) Pick(r *Request, c []*Backend) Decision {
	key, ok := r.affinityKey(p.cfg.PrefixTokens)
	if !ok {
		return Decision{Backend: pickLeastLoaded(c), Reason: "least-loaded"}
	}
	d := p.pickKey(key, c)
	d.CacheKey = r.CacheKey
	return d
}

// capacity is the bounded-load cap: ceil(c · (total + 1) / n) over load: this router's
// requests in flight for the prefix policy, boundLoad (every router's, as the replicas report
// them, robust to one stale report: replica_load.go) for kv-aware.
func capacity(c []*Backend, bound float64, load func(*Backend) int) int {
	total := 0
	for _, b := range c {
		total += load(b)
	}
	return int(math.Ceil(bound * float64(total+1) / float64(len(c))))
}

// ownLoad is the prefix policy's load: this router's requests in flight.
func ownLoad(b *Backend) int { return b.Load() }

func (p *prefixPolicy) pickKey(key uint64, c []*Backend) Decision {
	d := p.pickKeyUnremembered(key, c)
	p.mu.Lock()
	if len(p.mu.last) >= stickyMax {
		clear(p.mu.last)
	}
	p.mu.last[key] = d.Backend.ID
	p.mu.Unlock()
	return d
}

func (p *prefixPolicy) pickKeyUnremembered(key uint64, c []*Backend) Decision {
	capLoad := capacity(c, p.cfg.LoadBound, p.load)
	p.mu.Lock()
	lastID := p.mu.last[key]
	p.mu.Unlock()
	if i := slices.IndexFunc(c, func(b *Backend) bool { return b.ID == lastID }); lastID != "" && i >= 0 {
		if last := c[i]; !busy(last, p.cfg.ConcurrencyThreshold) && p.load(last) < capLoad {
			return Decision{Backend: last, Reason: "affinity"}
		}
	}
	// Walk the candidates in rendezvous order without sorting: repeatedly
	// take the highest score below the previous one (n is small).
	var top *Backend
	prev := uint64(math.MaxUint64)
	first := true
	for range c {
		var best *Backend
		var bestScore uint64
		for _, b := range c {
			s := score(key, b)
			if (s < prev || first && s == prev) && (best == nil || s > bestScore) {
				best, bestScore = b, s
			}
		}
		if best == nil {
			break
		}
		if top == nil {
			top = best
		}
		if !busy(best, p.cfg.ConcurrencyThreshold) && p.load(best) < capLoad {
			reason := "affinity"
			if best != top {
				reason = "spill"
			}
			return Decision{Backend: best, Reason: reason}
		}
		prev, first = bestScore, false
	}
	return Decision{Backend: pickLeastLoaded(c), Reason: "least-loaded"}
}

// kvAware scores each replica by the prompt blocks its index says it holds,
// weighted by tier (from the replica's published restore costs, else
// TierWeights), minus a load penalty (Dynamo's router does the same trade:
// overlap against active load: the load its replica reports, every router's
// requests in it, replica_load.go) and minus the blocks of prompt the replica
// reports queued for prefill, within the prefix policy's load bound over the
// same replica reports (boundLoad: robust to one stale report) and below
// KVUsageMax of the replica's reported KV usage. A replica with the remote tier also holds, at remote weight, what
// any live replica announced in remote. When no replica holds any of the
// prompt, or none offers events, it falls back to prefix affinity.
type kvAware struct {
	cfg      PolicyConfig
	affinity *prefixPolicy
	hashes   *hashCache // chain hashes of earlier requests' prompts
}

func (*kvAware) Name() string { return "kv-aware" }

// NeedsTokens: a request with a prompt_cache_key is placed by its key alone.
func (*kvAware) NeedsTokens(r *Request) bool { return r.CacheKey == "" }

// scoreEps treats scores this close as equal (they are sums of a few tier
// weights and integer penalties).
const scoreEps = 1e-9

func (p *kvAware) Pick(r *Request, c []*Backend) Decision {
	if len(r.Tokens) == 0 || r.CacheKey != "" {
		return p.affinity.Pick(r, c)
	}
	capLoad := capacity(c, p.cfg.LoadBound, (*Backend).boundLoad) // replica_load.go
	// The remote tier is shared: what any replica stored there, every replica with the tier
	// can restore, even once the writer is gone (sharedRemote).
	now := p.cfg.Now()
	peers := r.peers
	if peers == nil {
		peers = c
	}
	var sharedBuf [8]*replicaIndex // no allocation for up to 8 live replicas
	shared := sharedBuf[:0]
	if r.remote != nil {
		shared = append(shared, r.remote)
	} else {
		for _, b := range peers {
			if b.liveIndexAt(p.cfg.StaleAfter, now) {
				shared = append(shared, b.index)
			}
		}
	}
	var best *Backend
	bestScore, bestN := math.Inf(-1), 0
	for _, b := range c {
		if busy(b, p.cfg.ConcurrencyThreshold) || b.boundLoad() >= capLoad {
			continue
		}
		queued, kvUsage := b.replicaPressure() // replica_load.go
		if kvUsage >= p.cfg.KVUsageMax {
			continue
		}
		load := b.policyLoad() // every router's requests on it, as its replica reports them
		n, w, bs := 0, 0.0, 0
		if b.liveIndexAt(p.cfg.StaleAfter, now) {
			var id []byte
			var ok bool
			if id, bs, ok = b.index.chain(); ok {
				weights, hasRemote := b.index.weights(&p.cfg.TierWeights)
				var sh []*replicaIndex
				if hasRemote {
					sh = shared
				}
				n, w = b.index.matchChain(r.chain(id, bs, p.hashes), &weights, sh)
			}
		}
		s := w - p.cfg.LoadPenalty*float64(load)
		if p.cfg.PrefillPenalty > 0 && bs > 0 {
			s -= p.cfg.PrefillPenalty * float64(queued) / float64(bs)
		}
		switch {
		case s > bestScore+scoreEps:
			best, bestScore, bestN = b, s, n*bs
		case s > bestScore-scoreEps:
			// A tie (a prefix every replica can restore from the shared remote tier, say) goes
			// to the higher rendezvous score of the request's affinity key: uniform over keys,
			// never list order, and the same on every router and after a restart (a random
			// pick here would split one session over replicas that already agree on it). A
			// burst of one request still spreads: each in flight lowers its backend's score.
			key, _ := r.affinityKey(p.cfg.PrefixTokens)
			if score(key, b) > score(key, best) {
				best, bestN = b, n*bs
			}
		}
	}
	if best == nil || bestN == 0 {
		// Nothing cached anywhere useful (or every index is missing or
		// stale): keep sessions sticky by prefix affinity instead.
		d := p.affinity.Pick(r, c)
		d.Reason = "fallback-" + d.Reason
		return d
	}
	return Decision{Backend: best, PredictedTokens: bestN, Reason: "cache"}
}
