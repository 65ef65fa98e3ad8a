package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"stockpot/internal/blend"
	"stockpot/internal/engine"
)

// TestBlendReachesEngine: a completion's blend object becomes the engine request's Spec,
// recompute defaulting; without it the request has none.
func TestBlendReachesEngine(t *testing.T) {
	gen := newFakeGen("ok")
	s, _ := newTestServer(t, gen, nil)
	ids := strings.TrimSuffix(strings.Repeat("5,", 40), ",")
	rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":[`+ids+`],"blend":{"chunks":[[20,30],[4,12]],"policy":"epic"}}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	b := gen.lastRequest().Blend
	if b == nil || len(b.Chunks) != 2 || b.Chunks[0] != (blend.Chunk{Start: 20, End: 30}) || b.Recompute != 0.15 || b.Policy != blend.EPIC {
		t.Fatalf("engine request blend %+v", b)
	}
	do(s.Handler(), "POST", "/v1/completions", `{"prompt":[`+ids+`]}`)
	if b := gen.lastRequest().Blend; b != nil {
		t.Errorf("no blend object, engine request blend %+v", b)
	}
}

// TestBlendBadInput: the bad marks of issue 38 are 400s in the OpenAI shape naming blend,
// and nothing reaches the engine; the engine's own refusal (a hybrid model) is a 400 too.
func TestBlendBadInput(t *testing.T) {
	gen := newFakeGen("ok")
	s, _ := newTestServer(t, gen, nil)
	ids := strings.TrimSuffix(strings.Repeat("5,", 40), ",")
	many := strings.TrimSuffix(strings.Repeat("[0,1],", blend.DefaultMaxChunks+1), ",")
	for name, b := range map[string]string{
		"overlap":        `{"chunks":[[0,10],[5,20]]}`,
		"empty":          `{"chunks":[[7,7]]}`,
		"past prompt":    `{"chunks":[[30,41]]}`,
		"too many":       `{"chunks":[` + many + `]}`,
		"fraction > 1":   `{"chunks":[[0,10]],"recompute":1.5}`,
		"fraction < 0":   `{"chunks":[[0,10]],"recompute":-0.5}`,
		"not a pair":     `{"chunks":[[0,10,20]]}`,
		"unknown policy": `{"chunks":[[0,10]],"policy":"lru"}`,
		"unknown field":  `{"chunks":[[0,10]],"ratio":0.5}`,
		"no chunks":      `{"chunks":[]}`,
	} {
		n := len(gen.reqs)
		rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":[`+ids+`],"blend":`+b+`}`)
		var e struct {
			Error struct{ Message, Type, Param string }
		}
		if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Error.Param != "blend" || e.Error.Message == "" {
			t.Errorf("%s: status %d %s, want a 400 naming blend", name, rec.Code, rec.Body)
		}
		if len(gen.reqs) != n {
			t.Errorf("%s: the refused request reached the engine", name)
		}
	}
	gen.genErr = fmt.Errorf("%w on qwen35: %w", engine.ErrBlend, engine.ErrHybrid)
	rec := do(s.Handler(), "POST", "/v1/completions", `{"prompt":[`+ids+`],"blend":{"chunks":[[0,10]]}}`)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"param":"blend"`) || !strings.Contains(rec.Body.String(), "recurrent state") {
		t.Errorf("hybrid: status %d %s, want a 400 naming blend and the reason", rec.Code, rec.Body)
	}
}

// TestBlendUsage: usage.cache carries the blend counts and chunks only for a blended request.
func TestBlendUsage(t *testing.T) {
	c := cacheUsage(engine.Usage{PromptTokens: 100, ComputedTokens: 40, DeviceTokens: 16, Blend: &engine.BlendUsage{
		BlendedTokens: 44, RecomputedTokens: 8, Chunks: []engine.BlendChunk{{Start: 20, End: 72, Hit: 48, Blended: 44}}}})
	js, _ := json.Marshal(c)
	for _, want := range []string{`"blended_tokens":44`, `"blend_recomputed_tokens":8`, `"blend":{"chunks":[{"start":20,"end":72,"hit_tokens":48,"blended_tokens":44}]}`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("usage.cache %s lacks %s", js, want)
		}
	}
	js, _ = json.Marshal(cacheUsage(engine.Usage{PromptTokens: 100, ComputedTokens: 100}))
	if strings.Contains(string(js), "blend") {
		t.Errorf("usage.cache without a blend mentions one: %s", js)
	}
}
