package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"stockpot/internal/kvtier"
)

// tierUsage is the part of a completion's usage this test reads.
type tierUsage struct {
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		Cache struct {
			DeviceTokens int `json:"device_tokens"`
			HostTokens   int `json:"host_tokens"`
		} `json:"cache"`
	} `json:"usage"`
}

func completeVia(t *testing.T, base, prompt string) (tierUsage, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1})
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, raw)
	}
	var u tierUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return u, resp.Header.Get("X-Stockpot-Backend")
}

// counterSum adds the values of a router counter, optionally only rows with a label value.
func counterSum(t *testing.T, rt *Router, name, label, value string) float64 {
	t.Helper()
	var s float64
	for _, mf := range mustGather(t, rt) {
		if mf.GetName() != name {
			continue
		}
	rows:
		for _, m := range mf.GetMetric() {
			if label != "" {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == label && lp.GetValue() != value {
						continue rows
					}
				}
			}
			s += m.GetCounter().GetValue()
		}
	}
	return s
}

// TestTierAwareRealReplicas: two real replicas with host tiers behind a kv-aware router. A
// prompt's blocks are pushed out of its replica's working pool by a flood of other prompts
// (sent to that replica directly), down to host RAM. The router learns it from the host
// tier's events, still sends the prompt to the replica holding it in host, weighs host by
// the replica's published costs, and its predicted cached tokens are exactly the
// usage.cache.host_tokens the replica then reports.
func TestTierAwareRealReplicas(t *testing.T) {
	if e2eSkip != "" {
		t.Fatal(e2eSkip)
	}
	rs := startReplicas(t, 2, "--kv-memory", "8MiB", "--host-cache", "64MiB", "--prefetch", "wait")
	rt, url := startRouter(t, "kv-aware", rs, nil)
	byID := map[string]*Backend{}
	urlOf := map[string]string{}
	for _, b := range rt.backends() {
		byID[b.ID] = b
		urlOf[b.ID] = b.URL.String()
	}
	rng := rand.New(rand.NewPCG(13, 13))
	for round := range 3 {
		prompt := fmt.Sprintf("Tier test %d. %s", round, words(rng, 260))
		_, id := completeVia(t, url, prompt)
		b := byID[id]
		if b == nil {
			t.Fatalf("round %d: answered by unknown backend %q", round, id)
		}
		// The prompt's block hashes as the replica computes them.
		chainID, bs, ok := b.index.chain()
		if !ok {
			t.Fatal("no chain identity from the replica")
		}
		toks, err := rt.tokenizeOn(context.Background(), b, []byte(`{"prompt":`+strconv.Quote(prompt)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		hs := (&Request{Tokens: toks}).blockHashes(chainID, bs)
		// inHostOnly: the index has every full block in host and none in device.
		inHostOnly := func() bool {
			b.index.mu.RLock()
			defer b.index.mu.RUnlock()
			for _, h := range hs[:len(hs)-1] {
				e := b.index.mu.blocks[h]
				if e.tiers&(1<<kvtier.Host) == 0 || e.tiers&(1<<kvtier.Device) != 0 {
					return false
				}
			}
			return true
		}
		// Flood the replica (not through the router) until the prompt's blocks left its
		// working pool for host RAM, as the router's index sees it.
		deadline := time.Now().Add(60 * time.Second)
		for i := 0; !inHostOnly(); i++ {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: blocks never reached host-only in the index (%d floods)", round, i)
			}
			completeVia(t, urlOf[id], fmt.Sprintf("Flood %d %d. %s", round, i, words(rng, 300)))
		}
		waitUntil(t, "costs from the replica", 10*time.Second, func() bool {
			w, _ := b.index.weights(&defaultTierWeights)
			b.index.mu.RLock()
			defer b.index.mu.RUnlock()
			return b.index.mu.costs != nil && w[kvtier.Host] > 0
		})
		predBefore := counterSum(t, rt, "stockpot_router_predicted_tokens_total", "", "")
		cacheBefore := counterSum(t, rt, "stockpot_router_decisions_total", "reason", "cache")
		u, id2 := completeVia(t, url, prompt)
		pred := counterSum(t, rt, "stockpot_router_predicted_tokens_total", "", "") - predBefore
		cacheDecisions := counterSum(t, rt, "stockpot_router_decisions_total", "reason", "cache") - cacheBefore
		w, _ := b.index.weights(&defaultTierWeights)
		t.Logf("round %d: %d prompt tokens on %s; again → %s, predicted %.0f, host_tokens %d, device_tokens %d, cached %d; weights %v",
			round, u.Usage.PromptTokens, id, id2, pred, u.Usage.Cache.HostTokens, u.Usage.Cache.DeviceTokens, u.Usage.Details.CachedTokens, w)
		if id2 != id {
			t.Fatalf("round %d: the prompt held in host on %s went to %s", round, id, id2)
		}
		if cacheDecisions != 1 {
			t.Fatalf("round %d: decision was not made on the cache (cache decisions %+.0f)", round, cacheDecisions)
		}
		if u.Usage.Cache.HostTokens == 0 || int(pred) != u.Usage.Cache.HostTokens || u.Usage.Cache.DeviceTokens != 0 {
			t.Fatalf("round %d: predicted %.0f cached tokens; replica restored %d from host, %d from device", round, pred, u.Usage.Cache.HostTokens, u.Usage.Cache.DeviceTokens)
		}
	}
}
