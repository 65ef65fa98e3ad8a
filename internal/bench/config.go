package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// defaultTokensPerWord is the fallback when the target cannot tokenize: about right for
// English with BPE vocabularies of 32k–150k entries.
const defaultTokensPerWord = 1.3

// Config is one bench run.
type Config struct {
	Target string // base URL of the server, e.g. http://127.0.0.1:8080
	// MetricsURLs, when set, are the servers whose /metrics give the server-side numbers
	// (summed), in place of Target's: the replicas behind a router, whose own /metrics has
	// no prefix-cache counters. Each is a base URL like Target.
	MetricsURLs []string
	Workload    string // one of Workloads
	APIKey      string // sent as a bearer token when set
	Model       string // model name in requests; empty: the first of GET /v1/models
	Chat        bool   // use /v1/chat/completions instead of /v1/completions

	Sessions    int     // sessions (agent, sysprompt, rag, random) or documents (docqa)
	Turns       int     // turns per session, or questions per document
	Concurrency int     // closed loop: sessions in flight at once
	Rate        float64 // open loop: session arrivals per second (Poisson); 0 means closed loop
	TraceFile   string  // trace workload: JSONL of {timestamp, endpoint, body}
	Seed        uint64  // workload text and arrival times depend only on it

	PrefixTokens   int // agent tool schema, sysprompt system prompt, random prompt base
	TurnTokens     int // agent user message per turn
	DocTokens      int // docqa document, rag context (split into chunks)
	QuestionTokens int // docqa, sysprompt and rag questions
	MaxTokens      int // max_tokens of each request

	// Tools > 0 is the agent's tools mode: that many function schemas in every request (chat
	// only, so it implies Chat), and after each answer a synthetic tool call and its result of
	// about ToolResultTokens tokens take the answer's place in the transcript.
	Tools            int
	ToolResultTokens int

	BlockSize int           // the target's KV block size, for the prediction; 0: ask the target, else 16
	Timeout   time.Duration // per request
	Prices    []Price       // cost table; nil: DefaultPrices
	// ScrapeInterval is how often /metrics is read during the run for the hit-rate-over-time
	// plot; 0 means 1s, negative means only before and after.
	ScrapeInterval time.Duration

	// Lengths are the longctx workload's prompt lengths in tokens, measured one after another;
	// nil: DefaultLengths.
	Lengths []int
	// AdminKey opens the target's cache admin API (GET and DELETE /v1/cache, the prewarm) and
	// its /metrics. The longctx workload needs it to drop tiers between its requests; without
	// it only the cold and the warm-from-pool requests are measured.
	AdminKey string

	// Accept turns the run into the go-live acceptance gate (accept.go): one request in flight
	// at a time, the server's counters read around each, and a verdict per step. A cold step
	// passes when its server-reused share of the prompt is under AcceptColdMax; a warm step
	// when its server-reused tokens are at least AcceptWarmMin of the reusable tokens.
	Accept        bool
	AcceptColdMax float64 // 0: DefaultConfig's 0.01
	AcceptWarmMin float64 // 0: DefaultConfig's 0.99

	// Progress, when set, is called once per finished request (from several goroutines).
	Progress func()
	// Logf, when set, narrates a workload whose requests are few and long (longctx): one line
	// per request and decision, as they happen.
	Logf func(format string, args ...any)
}

// DefaultLengths are the longctx workload's prompt lengths: 32K, 128K and 480K tokens (the
// last fits a 24 GiB machine only for a small model: its K/V latent and checkpoints grow
// linearly, the prefill's time quadratically).
var DefaultLengths = []int{32768, 131072, 491520}

// Bounds of --lengths: below minLength a prompt is a few blocks, not long context; past
// maxLength (4M tokens) the prompt text alone is tens of MiB, over any server's body limit.
const (
	minLength = 64
	maxLength = 4 << 20
)

// DefaultConfig is a small agent run against a local Stockpot.
func DefaultConfig() Config {
	return Config{
		Target:         "http://127.0.0.1:8080",
		Workload:       "agent",
		Sessions:       4,
		Turns:          10,
		Concurrency:    4,
		Seed:           1,
		PrefixTokens:   1024,
		TurnTokens:     64,
		DocTokens:      2048,
		QuestionTokens: 32,
		MaxTokens:      32,
		// What a file read or a search returns to an agent: a few hundred tokens.
		ToolResultTokens: 256,
		Timeout:          5 * time.Minute,
		// The acceptance method of the seed: cold under 1% reused, warm at least 99%.
		AcceptColdMax: 0.01,
		AcceptWarmMin: 0.99,
	}
}

// validate checks cfg and returns a copy with defaults filled in; cfg itself is not changed.
func (cfg Config) validate() (Config, error) {
	d := DefaultConfig()
	if cfg.Target == "" {
		return cfg, fmt.Errorf("--target is required")
	}
	if !strings.HasPrefix(cfg.Target, "http://") && !strings.HasPrefix(cfg.Target, "https://") {
		return cfg, fmt.Errorf("--target %q: want an http:// or https:// URL", cfg.Target)
	}
	cfg.Target = strings.TrimRight(cfg.Target, "/")
	urls := make([]string, len(cfg.MetricsURLs))
	for i, u := range cfg.MetricsURLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return cfg, fmt.Errorf("--metrics-url %q: want an http:// or https:// URL", u)
		}
		urls[i] = strings.TrimRight(u, "/")
	}
	cfg.MetricsURLs = urls
	if cfg.Workload == "" {
		cfg.Workload = d.Workload
	}
	if !slices.Contains(Workloads, cfg.Workload) {
		return cfg, fmt.Errorf("--workload %q: want one of %s", cfg.Workload, strings.Join(Workloads, ", "))
	}
	if cfg.Workload == "longctx" {
		if cfg.Lengths == nil {
			cfg.Lengths = DefaultLengths
		}
		if len(cfg.Lengths) == 0 {
			return cfg, fmt.Errorf("--lengths: give at least one prompt length")
		}
		for _, n := range cfg.Lengths {
			if n < minLength || n > maxLength {
				return cfg, fmt.Errorf("--lengths: %d tokens is outside [%d, %d]", n, minLength, maxLength)
			}
		}
		cfg.Lengths = slices.Clone(cfg.Lengths)
	}
	if cfg.Workload == "trace" && cfg.TraceFile == "" {
		return cfg, fmt.Errorf("--workload trace needs --trace FILE.jsonl")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"sessions", cfg.Sessions}, {"turns", cfg.Turns}, {"concurrency", cfg.Concurrency},
		{"prefix-tokens", cfg.PrefixTokens}, {"turn-tokens", cfg.TurnTokens}, {"doc-tokens", cfg.DocTokens},
		{"question-tokens", cfg.QuestionTokens}, {"max-tokens", cfg.MaxTokens}, {"block-size", cfg.BlockSize},
		{"tools", cfg.Tools}, {"tool-result-tokens", cfg.ToolResultTokens}} {
		if f.v < 0 {
			return cfg, fmt.Errorf("--%s %d: must not be negative", f.name, f.v)
		}
	}
	if cfg.Sessions == 0 {
		cfg.Sessions = d.Sessions
	}
	if cfg.Turns == 0 {
		cfg.Turns = d.Turns
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = d.Concurrency
	}
	if cfg.PrefixTokens == 0 {
		cfg.PrefixTokens = d.PrefixTokens
	}
	if cfg.TurnTokens == 0 {
		cfg.TurnTokens = d.TurnTokens
	}
	if cfg.DocTokens == 0 {
		cfg.DocTokens = d.DocTokens
	}
	if cfg.QuestionTokens == 0 {
		cfg.QuestionTokens = d.QuestionTokens
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = d.MaxTokens
	}
	if cfg.Tools > 0 {
		if cfg.Workload != "agent" {
			return cfg, fmt.Errorf("--tools %d: only --workload agent calls tools, not %s", cfg.Tools, cfg.Workload)
		}
		if cfg.Tools > MaxTools {
			return cfg, fmt.Errorf("--tools %d: the catalogue has %d tools", cfg.Tools, MaxTools)
		}
		cfg.Chat = true // tools exist only in /v1/chat/completions
	}
	if cfg.ToolResultTokens == 0 {
		cfg.ToolResultTokens = d.ToolResultTokens
	}
	if cfg.Rate < 0 {
		return cfg, fmt.Errorf("--rate %v: must not be negative", cfg.Rate)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.Prices == nil {
		cfg.Prices = DefaultPrices
	}
	if cfg.ScrapeInterval == 0 {
		cfg.ScrapeInterval = time.Second
	}
	return cfg.validateAccept(d)
}

// validateAccept checks the gate's settings. The gate runs one request at a time, so that
// each counter delta belongs to one request (the seed's acceptance had one request in
// flight); an open loop or a trace's timestamps cannot keep that.
func (cfg Config) validateAccept(d Config) (Config, error) {
	if cfg.AcceptColdMax == 0 {
		cfg.AcceptColdMax = d.AcceptColdMax
	}
	if cfg.AcceptWarmMin == 0 {
		cfg.AcceptWarmMin = d.AcceptWarmMin
	}
	if cfg.AcceptColdMax < 0 || cfg.AcceptColdMax > 1 {
		return cfg, fmt.Errorf("--accept-cold-max %v: want a share between 0 and 1 (0.01 is 1%%)", cfg.AcceptColdMax)
	}
	if cfg.AcceptWarmMin < 0 || cfg.AcceptWarmMin > 1 {
		return cfg, fmt.Errorf("--accept-warm-min %v: want a share between 0 and 1 (0.99 is 99%%)", cfg.AcceptWarmMin)
	}
	if !cfg.Accept {
		return cfg, nil
	}
	if cfg.Workload == "trace" {
		return cfg, fmt.Errorf("--accept: the trace workload replays its own timing; use agent, docqa, sysprompt, rag, random or longctx")
	}
	if cfg.Rate > 0 {
		return cfg, fmt.Errorf("--accept runs one request at a time (closed loop); drop --rate %v", cfg.Rate)
	}
	cfg.Concurrency = 1
	return cfg, nil
}
