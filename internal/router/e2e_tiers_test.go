package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
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
			RemoteTokens int `json:"remote_tokens"`
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
		deadline := time.Now().Add(3 * time.Minute)
		for i := 0; !inHostOnly(); i++ {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: blocks never reached host-only in the index (%d floods)", round, i)
			}
			completeVia(t, urlOf[id], fmt.Sprintf("Flood %d %d. %s", round, i, words(rng, 300)))
		}
		waitUntil(t, "costs from the replica", func() bool {
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
		if st := b.status(); st.TierWeights["host"] != w[kvtier.Host] || st.TierWeights["device"] != 1 {
			t.Fatalf("round %d: /backends tier_weights %v, want %v", round, st.TierWeights, w)
		}
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

func startRedisServer(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found (%v): `make test` installs it", err)
	}
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(watchdog); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	t.Fatal("redis-server did not start")
	return ""
}

// TestRemoteSharedRealReplicas: two real replicas share one Redis. A prompt computed on A
// and pushed down A's tiers reaches Redis; the router learns it from A's remote events and
// scores it for B too (B has the remote tier), at B's remote weight: with A out of the
// candidates the pick is B on the cache, and B then restores exactly the predicted tokens
// from remote. With both candidates A wins (host beats remote).
func TestRemoteSharedRealReplicas(t *testing.T) {
	if e2eSkip != "" {
		t.Fatal(e2eSkip)
	}
	raddr := startRedisServer(t)
	rs := startReplicas(t, 2, "--kv-memory", "8MiB", "--host-cache", "64MiB", "--remote-cache", "redis://"+raddr+"/0", "--remote-call-timeout", testRemoteTimeout, "--prefetch", "wait")
	rt, _ := startRouter(t, "kv-aware", rs, nil)
	var a, b *Backend
	for _, be := range rt.backends() {
		if be.URL.String() == rs[0].url {
			a = be
		} else {
			b = be
		}
	}
	rng := rand.New(rand.NewPCG(17, 17))
	prompt := "Remote test. " + words(rng, 260)
	completeVia(t, rs[0].url, prompt)
	chainID, bs, _ := a.index.chain()
	toks, err := rt.tokenizeOn(context.Background(), a, []byte(`{"prompt":`+strconv.Quote(prompt)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	hs := (&Request{Tokens: toks}).blockHashes(chainID, bs)
	inRemote := func() bool {
		a.index.mu.RLock()
		defer a.index.mu.RUnlock()
		for _, h := range hs[:(len(toks)-1)/bs] { // every block a request can restore (the last token is computed)
			if a.index.mu.blocks[h].tiers&(1<<kvtier.Remote) == 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; !inRemote(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("the prompt's blocks never reached the remote tier in A's index (%d floods)", i)
		}
		completeVia(t, rs[0].url, fmt.Sprintf("Flood %d. %s", i, words(rng, 300)))
	}
	if b.index.Len() != 0 {
		// B served nothing: whatever it holds is not this prompt.
		if n, _ := b.index.match(hs, &defaultTierWeights, nil); n != 0 {
			t.Fatalf("B holds %d of the prompt's blocks itself", n)
		}
	}
	waitUntil(t, "B's costs with a remote tier", func() bool {
		_, remote := b.index.weights(&defaultTierWeights)
		return remote
	})
	onlyB := rt.policy.Pick(&Request{Tokens: toks, peers: rt.backends()}, []*Backend{b})
	both := rt.policy.Pick(&Request{Tokens: toks, peers: rt.backends()}, rt.backends())
	u, _ := completeVia(t, rs[1].url, prompt)
	wb, _ := b.index.weights(&defaultTierWeights)
	t.Logf("only B: %s predicted %d; both: %s on %s; B restored %d remote, %d cached of %d; B weights %v",
		onlyB.Reason, onlyB.PredictedTokens, both.Reason, both.Backend.ID, u.Usage.Cache.RemoteTokens, u.Usage.Details.CachedTokens, u.Usage.PromptTokens, wb)
	if onlyB.Backend != b || onlyB.Reason != "cache" || onlyB.PredictedTokens == 0 {
		t.Fatalf("B not scored on the shared remote blocks: %+v", onlyB)
	}
	if both.Backend != a || both.Reason != "cache" {
		t.Fatalf("with both candidates the host holder lost: %s (%s)", both.Backend.ID, both.Reason)
	}
	if u.Usage.Cache.RemoteTokens != onlyB.PredictedTokens {
		t.Fatalf("predicted %d tokens from remote on B; B restored %d", onlyB.PredictedTokens, u.Usage.Cache.RemoteTokens)
	}
}
