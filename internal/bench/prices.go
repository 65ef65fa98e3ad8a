package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"

	"go.yaml.in/yaml/v4"
)

// Price is one provider model's list price in US dollars per million tokens, for each kind of
// prompt token the providers bill differently:
//
//   - Input: an uncached prompt token;
//   - CacheRead: a prompt token read from the cache (Anthropic 0.1× input, OpenAI 0.1–0.5×,
//     DeepSeek ~0.1×, Gemini 0.1× plus storage);
//   - CacheWrite5m / CacheWrite1h: a prompt token written to the cache under a 5-minute or a
//     1-hour breakpoint (Anthropic 1.25× and 2× input; OpenAI and DeepSeek charge plain input,
//     their caches are automatic; Gemini input plus storage for the TTL);
//   - Output: a generated token.
//
// In a prices file the cache fields may be left out: cache_read then defaults to input (no
// discount), cache_write_5m to the older name cache_write or else input, and cache_write_1h to
// cache_write_5m.
type Price struct {
	Name   string `json:"name" yaml:"name"`
	AsOf   string `json:"as_of" yaml:"as_of"`
	Source string `json:"source,omitempty" yaml:"source,omitempty"`

	Input        float64 `json:"input" yaml:"input"`
	CacheRead    float64 `json:"cache_read" yaml:"cache_read"`
	CacheWrite5m float64 `json:"cache_write_5m" yaml:"cache_write_5m"`
	CacheWrite1h float64 `json:"cache_write_1h" yaml:"cache_write_1h"`
	Output       float64 `json:"output" yaml:"output"`
}

// priceFile is one entry as written in a prices file: the optional fields are pointers so a
// missing one takes its default rather than 0 (a free cache read nobody meant).
type priceFile struct {
	Name         string   `json:"name" yaml:"name"`
	AsOf         string   `json:"as_of" yaml:"as_of"`
	Source       string   `json:"source" yaml:"source"`
	Input        *float64 `json:"input" yaml:"input"`
	CacheRead    *float64 `json:"cache_read" yaml:"cache_read"`
	CacheWrite   *float64 `json:"cache_write" yaml:"cache_write"` // older name of cache_write_5m
	CacheWrite5m *float64 `json:"cache_write_5m" yaml:"cache_write_5m"`
	CacheWrite1h *float64 `json:"cache_write_1h" yaml:"cache_write_1h"`
	Output       *float64 `json:"output" yaml:"output"`
}

// DefaultPrices are the list prices of bench/prices.example.json (a test keeps the two equal),
// copied by hand on the dates in AsOf from the sources named there. They go stale: check the
// providers' pricing pages and pass your own table with --prices FILE.
var DefaultPrices = []Price{
	{Name: "anthropic/claude-sonnet-4.6", AsOf: "2026-05", Source: "https://www.anthropic.com/pricing",
		Input: 3, CacheRead: 0.30, CacheWrite5m: 3.75, CacheWrite1h: 6, Output: 15},
	{Name: "anthropic/claude-haiku-4.5", AsOf: "2026-05", Source: "https://www.anthropic.com/pricing",
		Input: 1, CacheRead: 0.10, CacheWrite5m: 1.25, CacheWrite1h: 2, Output: 5},
	{Name: "openai/gpt-5.2", AsOf: "2026-01", Source: "https://openai.com/api/pricing",
		Input: 1.75, CacheRead: 0.175, CacheWrite5m: 1.75, CacheWrite1h: 1.75, Output: 14},
	{Name: "openai/gpt-5-mini", AsOf: "2026-01", Source: "https://openai.com/api/pricing",
		Input: 0.25, CacheRead: 0.025, CacheWrite5m: 0.25, CacheWrite1h: 0.25, Output: 2},
	{Name: "deepseek/deepseek-chat", AsOf: "2025-09", Source: "https://api-docs.deepseek.com/quick_start/pricing",
		Input: 0.28, CacheRead: 0.028, CacheWrite5m: 0.28, CacheWrite1h: 0.28, Output: 0.42},
	{Name: "google/gemini-2.5-pro", AsOf: "2026-03", Source: "https://ai.google.dev/gemini-api/docs/pricing",
		Input: 1.25, CacheRead: 0.125, CacheWrite5m: 1.625, CacheWrite1h: 5.75, Output: 10},
}

// LoadPrices reads a prices file: JSON (or YAML for a .yaml or .yml name) holding either a
// list of price entries or an object whose "prices" field is that list (beside free-form
// fields such as "note"). See bench/prices.example.json.
func LoadPrices(path string) ([]Price, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ps, err := ParsePrices(b, strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// ParsePrices parses a prices file's bytes (isYAML: YAML, else JSON) and validates each entry.
func ParsePrices(b []byte, isYAML bool) ([]Price, error) {
	var entries []priceFile
	unmarshal := json.Unmarshal
	if isYAML {
		unmarshal = yaml.Unmarshal
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty prices file")
	}
	if err := unmarshal(b, &entries); err != nil {
		var obj struct {
			Prices []priceFile `json:"prices" yaml:"prices"`
		}
		if err := unmarshal(b, &obj); err != nil {
			return nil, fmt.Errorf("want a list of prices or {\"prices\": [...]}: %w", err)
		}
		entries = obj.Prices
	}
	if len(entries) == 0 {
		return nil, errors.New("no prices in the file")
	}
	out := make([]Price, 0, len(entries))
	for i, e := range entries {
		p, err := e.price()
		if err != nil {
			return nil, fmt.Errorf("prices[%d] (%q): %w", i, e.Name, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func (e priceFile) price() (Price, error) {
	if e.Name == "" {
		return Price{}, errors.New("name is required")
	}
	if e.Input == nil || e.Output == nil {
		return Price{}, errors.New("input and output are required (US dollars per million tokens)")
	}
	p := Price{Name: e.Name, AsOf: e.AsOf, Source: e.Source, Input: *e.Input, Output: *e.Output,
		CacheRead: *e.Input, CacheWrite5m: *e.Input}
	if e.CacheRead != nil {
		p.CacheRead = *e.CacheRead
	}
	if e.CacheWrite != nil {
		p.CacheWrite5m = *e.CacheWrite
	}
	if e.CacheWrite5m != nil {
		p.CacheWrite5m = *e.CacheWrite5m
	}
	p.CacheWrite1h = p.CacheWrite5m
	if e.CacheWrite1h != nil {
		p.CacheWrite1h = *e.CacheWrite1h
	}
	for _, v := range []float64{p.Input, p.CacheRead, p.CacheWrite5m, p.CacheWrite1h, p.Output} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return Price{}, fmt.Errorf("price %v: want a finite number >= 0", v)
		}
	}
	return p, nil
}

// CostTokens is the run's prompt split the cost model prices, from the usage the server
// reported: on /v1/messages, cache_read_input_tokens and cache_creation_input_tokens (split
// by ephemeral_5m / ephemeral_1h); elsewhere prompt_tokens_details.cached_tokens as reads and
// no writes (OpenAI-style caches are automatic and bill no write).
type CostTokens struct {
	Prompt       int64 `json:"prompt_tokens"`
	CacheRead    int64 `json:"cache_read_tokens"`
	CacheWrite5m int64 `json:"cache_write_5m_tokens"`
	CacheWrite1h int64 `json:"cache_write_1h_tokens"`
	Uncached     int64 `json:"uncached_tokens"` // Prompt − reads − writes, at least 0
	Output       int64 `json:"output_tokens"`
}

// Cost is the run priced by one table row, with and without breakpoints.
type Cost struct {
	Name string `json:"name"`
	AsOf string `json:"as_of"`
	// WithoutBreakpoints prices every prompt token as uncached input; WithBreakpoints prices
	// reads at CacheRead, writes at their TTL's write price and the rest as input. Output is
	// in both.
	WithBreakpoints    float64 `json:"with_breakpoints_usd"`
	WithoutBreakpoints float64 `json:"without_breakpoints_usd"`
	// Saving is 1 − with/without (negative when writes cost more than the reads saved).
	Saving float64 `json:"saving_ratio"`
	// WithCache and WithoutCache are the older names of the two totals, kept for one release.
	WithCache    float64 `json:"with_cache_usd"`
	WithoutCache float64 `json:"without_cache_usd"`
}

// estimateCost prices t with p.
func estimateCost(p Price, t CostTokens) Cost {
	const perToken = 1e-6
	out := float64(t.Output) * p.Output
	with := (float64(t.CacheRead)*p.CacheRead + float64(t.CacheWrite5m)*p.CacheWrite5m + float64(t.CacheWrite1h)*p.CacheWrite1h +
		float64(t.Uncached)*p.Input + out) * perToken
	without := (float64(t.Prompt)*p.Input + out) * perToken
	c := Cost{Name: p.Name, AsOf: p.AsOf, WithBreakpoints: with, WithoutBreakpoints: without, WithCache: with, WithoutCache: without}
	if without > 0 {
		c.Saving = 1 - with/without
	}
	return c
}

// costTokens builds the split: reads and writes clamped so they never exceed the prompt.
func costTokens(prompt, read, write5m, write1h, output int64) CostTokens {
	read = min(max(read, 0), prompt)
	write5m = min(max(write5m, 0), prompt-read)
	write1h = min(max(write1h, 0), prompt-read-write5m)
	return CostTokens{Prompt: prompt, CacheRead: read, CacheWrite5m: write5m, CacheWrite1h: write1h,
		Uncached: prompt - read - write5m - write1h, Output: output}
}
