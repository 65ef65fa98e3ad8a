package lint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"

	"stockpot/internal/miss"
	"stockpot/internal/prefix"
)

// Prompt is a request rendered into tokens as the server would (pipeline.RenderRequest).
type Prompt struct {
	Tokens   []int32
	Segments []miss.Segment
	Salt     string
}

// Renderer renders one logged request; an error marks the line malformed.
type Renderer func(Line) (Prompt, error)

// Entry is a parsed log line with its number (1-based).
type Entry struct {
	Number int
	Line   Line
}

// Config configures Analyze.
type Config struct {
	// BlockSize is the cache's tokens per block (serve's --block-size). 0 means 16.
	BlockSize int
	// MaxMisses bounds Report.Misses (0: 100).
	MaxMisses int
}

// Report is what lint found.
type Report struct {
	Requests     int                `json:"requests"`
	Sessions     int                `json:"sessions"`
	BlockSize    int                `json:"block_size"`
	PromptTokens int                `json:"prompt_tokens"`
	CachedTokens int                `json:"cached_tokens"`
	HitRate      float64            `json:"hit_rate"` // NaN-free: 0 when there are no tokens
	Causes       map[miss.Cause]int `json:"causes"`   // misses by cause
	// Misses are the divergences worth fixing (not new content, not prompts under a block),
	// in log order, at most Config.MaxMisses.
	Misses []Miss `json:"misses"`
	// Fixes estimates the hit rate with each found cause fixed, by fixing the log and
	// replaying it; AllFixed with all of them.
	Fixes     []Fix       `json:"fixes"`
	AllFixed  float64     `json:"hit_rate_all_fixed"`
	Malformed []Malformed `json:"malformed"`
}

// Miss is one request's divergence.
type Miss struct {
	Line    int    `json:"line"`
	Session string `json:"session"`
	miss.Report
}

// Fix is one fix's estimate.
type Fix struct {
	Name    string     `json:"name"`
	Cause   miss.Cause `json:"cause"`
	Help    string     `json:"help"`
	HitRate float64    `json:"hit_rate"`
	Gain    float64    `json:"gain"` // HitRate - Report.HitRate
}

// Malformed is a line that could not be read or rendered.
type Malformed struct {
	Line  int    `json:"line"`
	Error string `json:"error"`
}

// Analyze replays entries through a prefix cache and explains the misses.
func Analyze(entries []Entry, render Renderer, text miss.Text, cfg Config) Report {
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.MaxMisses <= 0 {
		cfg.MaxMisses = 100
	}
	rep := Report{BlockSize: cfg.BlockSize, Causes: map[miss.Cause]int{}, Misses: []Miss{}, Fixes: []Fix{}, Malformed: []Malformed{}}
	sim := replay(entries, render, text, cfg.BlockSize, true)
	rep.Malformed = sim.malformed
	rep.Requests, rep.PromptTokens, rep.CachedTokens, rep.HitRate = sim.requests, sim.prompt, sim.cached, sim.rate()
	sessions := map[string]bool{}
	for _, r := range sim.results {
		sessions[r.session] = true
		if r.miss == nil {
			continue
		}
		rep.Causes[r.miss.Cause]++
		if r.miss.Cause != miss.NewContent && r.miss.Cause != miss.BelowBlock && len(rep.Misses) < cfg.MaxMisses {
			rep.Misses = append(rep.Misses, Miss{Line: r.line, Session: r.session, Report: *r.miss})
		}
	}
	rep.Sessions = len(sessions)
	var all []Fixer
	for _, f := range Fixers {
		if rep.Causes[f.Cause] == 0 {
			continue
		}
		all = append(all, f)
		rate := replay(Apply(entries, f), render, nil, cfg.BlockSize, false).rate()
		rep.Fixes = append(rep.Fixes, Fix{Name: f.Name, Cause: f.Cause, Help: f.Help, HitRate: rate, Gain: rate - rep.HitRate})
	}
	rep.AllFixed = rep.HitRate
	if len(all) > 0 {
		fixed := entries
		for _, f := range all {
			fixed = Apply(fixed, f)
		}
		rep.AllFixed = replay(fixed, render, nil, cfg.BlockSize, false).rate()
	}
	return rep
}

// Apply returns entries with f applied to every body (a body f cannot parse is kept as is: it
// is reported malformed anyway).
func Apply(entries []Entry, f Fixer) []Entry {
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = e
		if b, err := f.Apply(e.Line.Body); err == nil {
			out[i].Line.Body = b
		}
	}
	return out
}

// FixAll applies every fixer in turn.
func FixAll(entries []Entry) []Entry {
	for _, f := range Fixers {
		entries = Apply(entries, f)
	}
	return entries
}

type result struct {
	line    int
	session string
	miss    *miss.Report
}

type simulation struct {
	requests, prompt, cached int
	results                  []result
	malformed                []Malformed
}

func (s simulation) rate() float64 {
	if s.prompt == 0 {
		return 0
	}
	return float64(s.cached) / float64(s.prompt)
}

var identity = []byte("stockpot-lint")

// replay runs the prompts through an unbounded prefix cache in log order, as a server with
// enough K/V memory would: each prompt reuses its longest cached run of full blocks (at most
// ⌊(len−1)/B⌋), then its blocks are cached. With explain, every miss is explained (text must
// be set).
func replay(entries []Entry, render Renderer, text miss.Text, bs int, explain bool) simulation {
	var sim simulation
	prompts := make([]Prompt, len(entries))
	ok := make([]bool, len(entries))
	blocks := 1
	for i, e := range entries {
		p, err := render(e.Line)
		if err != nil {
			sim.malformed = append(sim.malformed, Malformed{Line: e.Number, Error: err.Error()})
			continue
		}
		if len(p.Tokens) == 0 {
			sim.malformed = append(sim.malformed, Malformed{Line: e.Number, Error: "empty prompt"})
			continue
		}
		prompts[i], ok[i] = p, true
		blocks += len(p.Tokens)/bs + 1
	}
	c, err := prefix.New(prefix.Config{NumBlocks: blocks, BlockSize: bs, MinHitsToProtect: 0, DisableEvents: true})
	if err != nil {
		panic(fmt.Sprintf("lint: %v", err)) // blocks and bs are positive
	}
	for i, e := range entries {
		if !ok[i] {
			continue
		}
		p := prompts[i]
		root := prefix.Root(identity, p.Salt)
		m := c.Match(root, p.Tokens)
		sim.requests++
		sim.prompt += len(p.Tokens)
		sim.cached += len(m.Blocks) * bs
		r := result{line: e.Number, session: sessionOf(e.Line)}
		if explain {
			if ev := miss.FromDivergence(c.Diverge(root, m.Hashes, p.Tokens, len(m.Blocks), miss.MaxCachedTokens), bs); ev != nil {
				rp := miss.Explain(*ev, p.Tokens, p.Segments, text)
				r.miss = &rp
			}
		}
		sim.results = append(sim.results, r)
		fresh, err := c.Allocate(len(m.Hashes) - len(m.Blocks))
		if err != nil {
			panic(fmt.Sprintf("lint: the unbounded cache ran out: %v", err)) // sized above
		}
		table := append(m.Blocks, fresh...)
		for b := len(m.Blocks); b < len(table); b++ {
			parent := root
			if b > 0 {
				parent = m.Hashes[b-1]
			}
			table[b], _ = c.Commit(m.Hashes[b], parent, p.Tokens[b*bs:(b+1)*bs], table[b])
		}
		c.Release(table)
	}
	sort.Slice(sim.malformed, func(a, b int) bool { return sim.malformed[a].Line < sim.malformed[b].Line })
	return sim
}

// sessionOf names a request's session: the log's session id, else a digest of how the
// conversation starts (its first user message), which stays the same over its turns
// whatever changes in the system prompt.
func sessionOf(l Line) string {
	if l.Session != "" {
		return l.Session
	}
	var b struct {
		Prompt   json.RawMessage `json:"prompt"`
		Input    json.RawMessage `json:"input"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(l.Body, &b) != nil {
		return "?"
	}
	key := []byte(nil)
	for _, m := range b.Messages {
		if m.Role == "user" {
			key = m.Content
			break
		}
	}
	switch {
	case key != nil:
	case b.Input != nil:
		key = b.Input
		var items []json.RawMessage
		if json.Unmarshal(b.Input, &items) == nil && len(items) > 0 {
			key = items[0]
		}
	case b.Prompt != nil:
		key = b.Prompt[:min(len(b.Prompt), 256)]
	}
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:4])
}

// ErrUnder is returned by Check when the hit rate is under the threshold.
var ErrUnder = errors.New("lint: hit rate under the threshold")

// Check returns ErrUnder (wrapped, with the numbers) when r's hit rate is under rate.
func Check(r Report, rate float64) error {
	if math.IsNaN(rate) || r.HitRate >= rate {
		return nil
	}
	return fmt.Errorf("%w: %.1f%% < %.1f%%", ErrUnder, 100*r.HitRate, 100*rate)
}
