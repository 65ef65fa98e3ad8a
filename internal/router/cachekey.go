package router

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// prompt_cache_key (OpenAI's field, on chat completions, completions and
// Responses) is the caller's own grouping of requests that share a prefix: a
// user, a conversation, an agent. For the prefix and kv-aware policies it is
// the affinity key ahead of X-Session-ID and prefix hashing: the key is
// hashed (with the cache_salt, so two tenants' equal keys are different
// keys) and placed by rendezvous hashing with bounded loads, exactly as a
// session is (prefixPolicy.pickKey). A key therefore stays on its owner
// while the owner holds fewer than ceil(LoadBound · (in flight + 1) /
// backends) requests, and only then spills to its next rendezvous choice,
// where it sticks while that one has room. kv-aware does not second-guess
// the caller's key with its block index: the key names the group, and the
// group's prefix is where the group went. The router needs no tokens for a
// keyed request (no /tokenize round trip).
//
// Metrics (bounded cardinality):
//   - stockpot_router_prompt_cache_key_requests_total{outcome}: keyed
//     requests answered, by outcome affinity (its owner), spill (a later
//     choice under load) or least-loaded (every choice was over the bound or
//     busy);
//   - stockpot_router_prompt_cache_key_top_requests_total{key}: keyed
//     requests per key, for the first maxTrackedKeys keys seen (each label
//     cut to maxKeyLabel bytes); every later key counts under "_other". A
//     fixed first-come set rather than a top-k: the series a dashboard
//     shows never change identity, and the memory is maxTrackedKeys labels.

// maxTrackedKeys bounds the per-key series: 100 keys × a short label is a
// few KiB on the router and 100 series on the scraper.
const maxTrackedKeys = 100

// maxKeyLabel bounds one key's label value (keys may be up to 1 KiB).
const maxKeyLabel = 64

// otherKeyLabel is the label of every key past the tracked ones.
const otherKeyLabel = "_other"

// keyMetrics counts keyed requests by outcome and by key.
type keyMetrics struct {
	outcomes *prometheus.CounterVec // outcome
	perKey   *prometheus.CounterVec // key
	mu       struct {
		sync.Mutex
		tracked map[string]bool // protected by mu; at most maxTrackedKeys labels
	}
}

func newKeyMetrics(reg prometheus.Registerer) *keyMetrics {
	k := &keyMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_prompt_cache_key_requests_total",
			Help: "Requests carrying prompt_cache_key, by routing outcome (affinity, spill, least-loaded)."}, []string{"outcome"}),
		perKey: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stockpot_router_prompt_cache_key_top_requests_total",
			Help: "Requests per prompt_cache_key for the first 100 keys seen (labels cut to 64 bytes); later keys count as _other."}, []string{"key"}),
	}
	k.mu.tracked = make(map[string]bool)
	if reg != nil {
		reg.MustRegister(k.outcomes, k.perKey)
	}
	return k
}

// observe counts one answered request routed by key.
func (k *keyMetrics) observe(key, outcome string) {
	k.outcomes.WithLabelValues(outcome).Inc()
	k.perKey.WithLabelValues(k.label(key)).Inc()
}

// label is key's label: the key (cut to maxKeyLabel bytes) while fewer than
// maxTrackedKeys labels exist or it is one of them, else otherKeyLabel.
func (k *keyMetrics) label(key string) string {
	if len(key) > maxKeyLabel {
		key = truncateUTF8(key, maxKeyLabel)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mu.tracked[key] {
		return key
	}
	if len(k.mu.tracked) >= maxTrackedKeys || key == otherKeyLabel {
		return otherKeyLabel
	}
	k.mu.tracked[key] = true
	return key
}

// truncateUTF8 cuts s to at most n bytes without splitting a rune (a label
// must be valid UTF-8).
func truncateUTF8(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}

// keyed reports whether a decision was made on the request's
// prompt_cache_key: the key policies mark it in Decision.CacheKey.
func (d Decision) keyed() bool { return d.CacheKey != "" }
