package bench

import (
	"encoding/json"
	"fmt"
	"os"
)

// Price is one model's list price in US dollars per million tokens.
//
// CacheWrite is what a prompt token costs when it is written to the cache (Anthropic charges
// 1.25× input for a 5-minute write; OpenAI and DeepSeek charge plain input). CacheRead is what
// a token served from the cache costs.
type Price struct {
	Name       string  `json:"name"`
	AsOf       string  `json:"as_of"`
	Input      float64 `json:"input"`
	CacheWrite float64 `json:"cache_write"`
	CacheRead  float64 `json:"cache_read"`
	Output     float64 `json:"output"`
}

// DefaultPrices are published list prices copied by hand on the dates in AsOf. They go stale:
// check the providers' pricing pages and pass your own table with --prices FILE.json (a JSON
// array of Price objects).
var DefaultPrices = []Price{
	{Name: "openai/gpt-4o", AsOf: "2025-06", Input: 2.50, CacheWrite: 2.50, CacheRead: 1.25, Output: 10.00},
	{Name: "openai/gpt-4.1", AsOf: "2025-06", Input: 2.00, CacheWrite: 2.00, CacheRead: 0.50, Output: 8.00},
	{Name: "anthropic/claude-sonnet-4", AsOf: "2025-06", Input: 3.00, CacheWrite: 3.75, CacheRead: 0.30, Output: 15.00},
	{Name: "deepseek/deepseek-chat", AsOf: "2025-06", Input: 0.27, CacheWrite: 0.27, CacheRead: 0.07, Output: 1.10},
}

// LoadPrices reads a JSON array of Price objects.
func LoadPrices(path string) ([]Price, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var ps []Price
	if err := json.Unmarshal(b, &ps); err != nil {
		return nil, fmt.Errorf("%s: want a JSON array of {name, as_of, input, cache_write, cache_read, output}: %w", path, err)
	}
	return ps, nil
}

// Cost is the run's token counts priced by one table row, with and without the cache.
type Cost struct {
	Name         string  `json:"name"`
	AsOf         string  `json:"as_of"`
	WithCache    float64 `json:"with_cache_usd"`
	WithoutCache float64 `json:"without_cache_usd"`
	Saving       float64 `json:"saving_ratio"`
}

// estimateCost prices cached prompt tokens at CacheRead, uncached ones at CacheWrite (each
// computed token is written to the cache) and output at Output. Without the cache every prompt
// token costs Input.
func estimateCost(p Price, cached, uncached, output int64) Cost {
	const perToken = 1e-6
	with := (float64(cached)*p.CacheRead + float64(uncached)*p.CacheWrite + float64(output)*p.Output) * perToken
	without := (float64(cached+uncached)*p.Input + float64(output)*p.Output) * perToken
	c := Cost{Name: p.Name, AsOf: p.AsOf, WithCache: with, WithoutCache: without}
	if without > 0 {
		c.Saving = 1 - with/without
	}
	return c
}
