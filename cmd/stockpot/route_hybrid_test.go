package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"stockpot/internal/router"
)

// TestRouteHybridReuseUnit: two tiny-qwen35 replicas behind a kv-aware router, one with a
// state checkpoint every block (default), one every 4 blocks (--state-checkpoint-blocks 4).
// Each publishes its reuse unit on /v1/kv-events (GET /backends shows it), and the router
// rounds each replica's match down to it: its predicted cached tokens equal what the chosen
// replica then delivered (usage.prompt_tokens_details.cached_tokens), where counting every
// cached block over-predicted the coarse replica (and preferred it, 7 blocks against 5, when
// it reuses only 4).
func TestRouteHybridReuseUnit(t *testing.T) {
	const B = 16
	_, fineTS := newTestInstance(t, func(o *serveOptions) { o.model = "synthetic:tiny-qwen35" })
	_, coarseTS := newTestInstance(t, func(o *serveOptions) { o.model = "synthetic:tiny-qwen35"; o.engine.StateCheckpointBlocks = 4 })

	cfg := router.DefaultConfig()
	cfg.Backends = []string{fineTS.URL, coarseTS.URL}
	cfg.Policy = "kv-aware"
	cfg.HealthInterval = 50 * time.Millisecond
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	rts := httptest.NewServer(rt.Handler())
	t.Cleanup(rts.Close)

	byURL := func() map[string]router.BackendStatus {
		out := map[string]router.BackendStatus{}
		for _, st := range rt.Backends() {
			out[st.URL] = st
		}
		return out
	}
	waitUntil(t, "the router to sync both replicas' events", func() bool {
		st := byURL()
		for _, u := range []string{fineTS.URL, coarseTS.URL} {
			if s, ok := st[u]; !ok || s.State != "healthy" || s.Events == nil || !s.Events.Synced {
				return false
			}
		}
		return true
	})
	st := byURL()
	if f, c := st[fineTS.URL], st[coarseTS.URL]; f.ReuseBlocks != 1 || f.MinReusableTokens != B || c.ReuseBlocks != 4 || c.MinReusableTokens != 4*B {
		t.Fatalf("/backends reuse units: fine %d blocks (%d tokens), coarse %d (%d), want 1 (16) and 4 (64)",
			f.ReuseBlocks, f.MinReusableTokens, c.ReuseBlocks, c.MinReusableTokens)
	}

	// warm sends a prompt straight to a replica and waits until the router's index holds at
	// least blocks blocks of it.
	warm := func(ts *httptest.Server, prompt []int, blocks int) {
		t.Helper()
		before := byURL()[ts.URL].IndexBlocks
		completion(t, ts, map[string]any{"prompt": prompt, "max_tokens": 2, "temperature": 0})
		waitUntil(t, "the router's index to see the warm-up", func() bool { return byURL()[ts.URL].IndexBlocks >= before+blocks })
	}
	type decision struct {
		Backend   string `json:"backend"`
		Reason    string `json:"reason"`
		Predicted int    `json:"predicted_tokens"`
		Delivered int    `json:"delivered_tokens"`
	}
	decisions := func() []decision {
		resp, err := http.Get(rts.URL + "/dashboard/state")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct{ Decisions []decision }
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s.Decisions
	}
	// viaRouter sends a prompt through the router and returns its decision record.
	viaRouter := func(prompt []int) (decision, string) {
		t.Helper()
		n := len(decisions())
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 2, "temperature": 0})
		code, out := post(t, rts.URL+"/v1/completions", json.RawMessage(body))
		if code != 200 {
			t.Fatalf("router: %d %s", code, out)
		}
		var r struct{ Usage apiUsage }
		if err := json.Unmarshal(out, &r); err != nil || r.Usage.PromptTokensDetails == nil || r.Usage.PromptTokensDetails.CachedTokens == nil {
			t.Fatalf("router answer %s: %v", out, err)
		}
		waitUntil(t, "the router to record its decision", func() bool { return len(decisions()) > n })
		d := decisions()[n]
		if d.Delivered != *r.Usage.PromptTokensDetails.CachedTokens {
			t.Fatalf("decision %+v, usage cached %d", d, *r.Usage.PromptTokensDetails.CachedTokens)
		}
		name := map[string]string{st[fineTS.URL].ID: "fine", st[coarseTS.URL].ID: "coarse"}[d.Backend]
		return d, name
	}

	// 1. Only the coarse replica holds the prompt: 6 blocks, of which it reuses 4.
	p := promptIDs(1, 8*B+5)
	warm(coarseTS, p[:6*B+3], 6)
	d, who := viaRouter(p)
	if who != "coarse" || d.Reason != "cache" || d.Predicted != 4*B || d.Delivered != 4*B {
		t.Errorf("coarse replica holding 6 blocks: %s %+v, want coarse, predicted = delivered = %d (not %d)", who, d, 4*B, 6*B)
	}

	// 2. The fine replica holds 5 blocks of another prompt (reuses 5), the coarse one 7
	// (reuses 4): the fine one wins, and the prediction is what it delivers.
	q := promptIDs(2, 9*B+7)
	warm(fineTS, q[:5*B+5], 5)
	warm(coarseTS, q[:7*B+5], 7)
	d, who = viaRouter(q)
	if who != "fine" || d.Reason != "cache" || d.Predicted != 5*B || d.Delivered != 5*B {
		t.Errorf("fine 5 blocks, coarse 7: %s %+v, want fine, predicted = delivered = %d", who, d, 5*B)
	}

	// 3. The coarse replica holds 3 blocks of a third prompt, less than its unit: no replica
	// can reuse any of it, the router predicts nothing (falls back to affinity) and nothing is
	// delivered wherever it went.
	r := promptIDs(3, 5*B+1)
	warm(coarseTS, r[:3*B+2], 3)
	d, _ = viaRouter(r)
	if d.Predicted != 0 || d.Delivered != 0 || d.Reason == "cache" {
		t.Errorf("coarse replica holding 3 blocks: %+v, want a fallback predicting and delivering 0", d)
	}
}
