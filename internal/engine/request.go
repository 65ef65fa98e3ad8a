package engine

import (
	"context"
	"errors"
	"time"

	"stockpot/internal/blend"
	"stockpot/internal/kvtier"
	"stockpot/internal/miss"
	"stockpot/internal/prefix"
)

// SamplingParams chooses the next token from the logits. Temperature 0 is greedy.
type SamplingParams struct {
	Temperature float32 // 0 = greedy (argmax)
	TopP        float32 // 0 or 1 = off
	TopK        int     // 0 = off
	Seed        uint64  // used when HasSeed; otherwise a random seed is drawn per request
	HasSeed     bool
	Constraint  Constraint // nil = unconstrained; see Constraint for how sampling obeys it
}

// Request is one generation request in token space. The HTTP layer tokenizes, applies chat
// templates and handles stop strings; the engine handles stop tokens and max_tokens.
type Request struct {
	Prompt     []int32
	MaxTokens  int // >= 1 after validation; the engine also stops at the context length
	Sampling   SamplingParams
	StopTokens []int32 // extra stop token ids; the model's end-of-generation tokens always stop
	IgnoreEOS  bool
	// Logprobs is the number of top alternatives per generated token: 0 = only the chosen
	// token's Logprob; negative = no logprobs at all (Token.Logprob is left 0 and Top nil), so
	// that greedy decoding takes the argmax without a softmax over the vocabulary.
	Logprobs  int
	CacheSalt string // tenant salt folded into the root of the prefix hash chain
	// Tenant names the request's principal for the cross-tenant audit (tenant.go); "" for
	// none. PublicReads lets its prompt continue a public prefix (Core.MarkPublic).
	Tenant      string
	PublicReads bool
	// Owner is the tenant's number in the caches' per-owner quotas (tenant.Tenant.Owner; 0:
	// none). DeviceQuotaBytes caps the bytes of the working pool's blocks the owner
	// committed: past it, eviction takes the owner's blocks first (0: no cap). The latest
	// request's value is the owner's.
	Owner            uint16
	DeviceQuotaBytes int64
	// Pins asks the working pool to keep prompt prefixes (prompt-cache retention: Anthropic
	// cache_control breakpoints, OpenAI prompt_cache_retention). See PinSpec.
	Pins []PinSpec
	// PinStrict refuses the request with ErrPinBudget, before anything is computed, when its
	// pins do not all fit in the pin budget; otherwise a pin that does not fit is partial
	// (Usage.Pins says how much was pinned).
	PinStrict bool
	// MaxOffloadTokens, when set, caps the prefix depth this request offloads: a block it
	// computes that ends past this many tokens from the prompt's start is never written to
	// the lower tiers (its block events say NoOffload), unless a later request whose cap
	// covers it reuses it. nil: no cap. 0 offloads nothing this request computes.
	MaxOffloadTokens *int
	// MaxReuseTokens, when set, caps the prompt prefix this request may take from a cache at
	// its first admission (rounded down to whole blocks): the working pool, a tier's restore
	// and another request's in-flight blocks alike. Past it the prompt is computed even where
	// the cache holds it, so the request costs the schedule what a miss would (the TTFT
	// floor's charge for blocks its principal did not send: other streams' decode steps wait
	// for the same prefill). A re-admission after a preemption is not capped (its own blocks).
	// nil: no cap.
	MaxReuseTokens *int
	// FirstToken, when set, is the request's first output token, sampled already by the
	// prefill replica that computed its prompt (prefill/decode disaggregation): the engine
	// outputs it in place of its own sample. The sample is still drawn, and a constraint
	// advances past FirstToken, so every later token is the one a single replica would have
	// made after it; its logprobs are this engine's.
	FirstToken *int32
	// Blend, when set, marks chunks of the prompt to cache on their own and blend at their
	// positions (blend.go, package blend); nil: no blending, outputs as without the feature.
	Blend *blend.Spec
}

// MaxPins is the most pins one request may ask for (Anthropic allows 4 breakpoints).
const MaxPins = 16

// PinSpec pins the prompt's first Tokens tokens, rounded down to whole blocks (only full
// blocks are cached), for TTL after their last use: every later request that reuses them
// refreshes the TTL. Tokens past the prompt are cut to the prompt.
type PinSpec struct {
	Tokens int
	TTL    time.Duration
	// Local makes the pin a lease: held in the working pool only, never taken down to the
	// tiers (no pin events). A prefill replica holds a prompt's blocks this way until the
	// decode replica pulled them (internal/handoff).
	Local bool
}

// PinResult is what became of one PinSpec, in the order of Request.Pins. Requested and
// Pinned are tokens, whole blocks: Requested is the spec's Tokens rounded down to blocks
// (within the prompt), Pinned how many of them the pool holds pinned now (less when the pin
// budget ran out, or when a block could not be cached). Created counts the pinned tokens this
// request both computed (or restored: not reused from the pool) and pinned first: Anthropic's
// cache writes. Refused is set when nothing could be pinned although something was asked.
// Limit says why Pinned is less than Requested when a limit did it (PinLimitBudget,
// PinLimitTenantQuota, PinLimitOtherShares); "" when all was pinned, or a block could not be
// cached.
type PinResult struct {
	TTL       time.Duration
	Requested int
	Pinned    int
	Created   int
	Refused   bool
	Limit     string
}

// TokenLogprob is a token id with its log-probability under the model (before sampling filters).
type TokenLogprob struct {
	ID      int32
	Logprob float32
}

// Token is one generated token.
type Token struct {
	ID      int32
	Logprob float32        // log-probability of ID (0 when Request.Logprobs < 0)
	Top     []TokenLogprob // the top Request.Logprobs alternatives, best first
}

// Usage is the per-request accounting reported in the API's usage object.
// Invariant: Device+Host+Disk+Remote+Transfer+Computed == PromptTokens.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	DeviceTokens     int // reused from the working pool
	HostTokens       int
	DiskTokens       int
	RemoteTokens     int
	// TransferTokens came from the prefill replica that computed the prompt (a decode
	// replica's pull, kvtier.Transfer): not a cache hit of this replica, so not in
	// CachedTokens.
	TransferTokens  int
	ComputedTokens  int // prefilled this request
	DiscardedTokens int // found in a tier but not used (and so computed)
	// CrossTenantTokens counts the device tokens reused from blocks another tenant's request
	// committed (the audit of tenant isolation: only public blocks may be counted here).
	CrossTenantTokens int
	// Miss is where and why the prompt left the longest cached chain, found at admission
	// (nil when it reused every block it could); miss.Explain turns it into a report.
	Miss *miss.Evidence
	// DiscardedBy splits DiscardedTokens by reason (tier.Reason*: checksum, identity,
	// incomplete_state, slower_than_recompute); nil when nothing was discarded.
	DiscardedBy map[string]int
	// StateBytes, for a hybrid model, is the size of the recurrent-state checkpoint the
	// request resumed from at its first admission (0 when it reused nothing).
	StateBytes int
	// Pins reports each of Request.Pins (nil when none was asked).
	Pins []PinResult
	// StoppedBy says why the engine stopped the generation where FinishReason does not:
	// StopPoolExhausted, or "" when the request's own limits or tokens ended it.
	StoppedBy string
	// ReuseUnitBlocks is the granularity, in blocks, a prefix of this request could be
	// reused at: a hybrid model's StateCheckpointBlocks (it resumes only from a recurrent-
	// state checkpoint), 0 (read as 1: every block) for other models. HitClass reads it.
	ReuseUnitBlocks int
	// Blend reports a blended request's chunks (nil without Request.Blend); its
	// BlendedTokens are neither cached nor computed tokens (see BlendUsage).
	Blend *BlendUsage

	QueueMs   float64
	RestoreMs float64
	PrefillMs float64
	TTFTMs    float64
	DecodeMs  float64
}

// CachedTokens is the OpenAI prompt_tokens_details.cached_tokens value.
func (u Usage) CachedTokens() int {
	return u.DeviceTokens + u.HostTokens + u.DiskTokens + u.RemoteTokens
}

// reusedTokens is the prompt tokens this engine did not compute: cached, or transferred.
func (u Usage) reusedTokens() int { return u.CachedTokens() + u.TransferTokens }

// tierTokens points at the field counting t's tokens (nil for no named tier).
func (u *Usage) tierTokens(t kvtier.Tier) *int {
	switch t {
	case kvtier.Device:
		return &u.DeviceTokens
	case kvtier.Host:
		return &u.HostTokens
	case kvtier.Disk:
		return &u.DiskTokens
	case kvtier.Remote:
		return &u.RemoteTokens
	case kvtier.Transfer:
		return &u.TransferTokens
	}
	return nil
}

// TierTokens returns the prompt tokens reused from tier t (0 for no named tier).
func (u Usage) TierTokens(t kvtier.Tier) int {
	if p := u.tierTokens(t); p != nil {
		return *p
	}
	return 0
}

// HitClass sorts a request by how much of its prompt came from the cache.
type HitClass int

// Hit classes: HitCold reused nothing, HitWarm reused every block a cache could give it
// (⌊(P−1)/B⌋ blocks: the last prompt token is always computed; for a hybrid model, whose
// reuse ends at a checkpoint every N blocks, the deepest multiple of N among them),
// HitPartial is in between.
const (
	HitCold HitClass = iota
	HitPartial
	HitWarm
	HitClasses // how many classes
)

func (h HitClass) String() string {
	switch h {
	case HitCold:
		return "cold"
	case HitPartial:
		return "partial"
	case HitWarm:
		return "warm"
	}
	return "unknown"
}

// classify is the hit class of a prompt of p tokens that reused cached of them, with blocks
// of b tokens reused in units of unit blocks (a hybrid model's checkpoint interval; <= 1:
// every block). The deepest reusable unit is the warm limit: a hybrid prompt reused up to
// its last checkpoint before the last token is warm, not partial.
func classify(cached, p, b, unit int) HitClass {
	unit = max(unit, 1)
	switch limit := prefix.MaxMatchBlocks(p, b) / unit * unit * b; {
	case cached <= 0:
		return HitCold
	case cached >= limit:
		return HitWarm
	}
	return HitPartial
}

// HitClass is u's hit class for blocks of blockSize tokens (and u.ReuseUnitBlocks).
func (u Usage) HitClass(blockSize int) HitClass {
	return classify(u.CachedTokens(), u.PromptTokens, blockSize, u.ReuseUnitBlocks)
}

// Finish reasons.
const (
	FinishStop      = "stop"      // an end-of-generation or stop token
	FinishLength    = "length"    // max_tokens or the context length
	FinishCancelled = "cancelled" // the caller's context ended
)

// StopPoolExhausted is Usage.StoppedBy for a decode that found no free KV block and no
// other request to preempt: it holds the whole pool, reached the longest generation the
// pool allows, and finishes with FinishLength (what clients understand).
const StopPoolExhausted = "kv_pool_exhausted"

// Output is one message on a request's stream. Tokens may be empty on the final message.
// The final message has Done set, a FinishReason and Usage; the channel is closed after it.
type Output struct {
	Tokens       []Token
	Done         bool
	FinishReason string
	Usage        *Usage
	Err          error
}

// Stats is a snapshot of the engine's state for metrics and /health.
type Stats struct {
	Running, Waiting int
	KVBlocksTotal    int
	KVBlocksUsed     int // referenced by running requests
	KVBlocksCached   int // unreferenced but holding reusable prefix blocks
	KVBlockBytes     int64
	Evictions        uint64
	DedupWaits       uint64 // admissions deferred to wait for another request's in-flight blocks
	Preemptions      uint64
	PrefetchStall    time.Duration // total time admissions were held back for prefetches
	RestoredBlocks   kvtier.Counts // blocks restored from lower tiers, by tier
	PinnedBlocks     int           // blocks held by pins (part of KVBlocksUsed)
	PinBudgetBlocks  int           // the most blocks pins may hold (Config.PinBudget)
	PinsShed         uint64        // pinned blocks unpinned early for a request that could not run otherwise
	Evidence         Evidence      // the engine's own accounting (see Evidence)
	// QueuedPrefillTokens is the prompt tokens queued and running requests have yet to
	// prefill (CoreStats.QueuedPrefillTokens).
	QueuedPrefillTokens int
	// MinReusableTokens is the shortest prefix a later request can reuse: the block size,
	// or for a hybrid model the state checkpoint granularity (block size ×
	// StateCheckpointBlocks). A prompt that is not longer gets no hit.
	MinReusableTokens int
	// For a hybrid model: the bytes of one recurrent-state checkpoint (a sequence's state),
	// the checkpoints the working pool holds, the most it keeps, those dropped for that
	// budget, and the blocks requests found past their last checkpoint (incomplete_state).
	StateBytes           int
	Checkpoints          int
	CheckpointBudget     int
	CheckpointsDropped   uint64
	StateDiscardedBlocks uint64
}

// Errors callers branch on.
var (
	ErrPromptTooLong = errors.New("engine: prompt too long")
	ErrInvalid       = errors.New("engine: invalid request")
	ErrShutdown      = errors.New("engine: shutting down")
	// ErrPinBudget refuses a PinStrict request whose pins do not fit in the pin budget.
	ErrPinBudget = errors.New("engine: pin over the pin budget")
)

// Generator is what the HTTP layer needs from an engine.
type Generator interface {
	// Generate queues req and returns its output stream. Cancelling ctx cancels the request and
	// frees its blocks; the stream then ends with FinishCancelled.
	Generate(ctx context.Context, req *Request) (<-chan Output, error)
	Stats() Stats
}
