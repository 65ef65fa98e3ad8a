package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/soak"
	"stockpot/internal/syncbuf"
)

// Scale-out, end to end: real replicas sharing one real Redis under --remote-write through,
// in-process routers (their indexes and policies inspected) and `stockpot route` processes.

// fleetAnswer is one greedy completion: its text, usage and the backend that served it.
type fleetAnswer struct {
	text    string
	backend string
	usage   struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		Cache map[string]int `json:"cache"`
	}
}

func fleetComplete(t *testing.T, base, prompt, session string) fleetAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Session-ID", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%s: HTTP %d: %s", base, resp.StatusCode, raw)
	}
	var out struct {
		Choices []struct{ Text string }
		Usage   json.RawMessage
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
		t.Fatalf("%v: %s", err, raw)
	}
	a := fleetAnswer{text: out.Choices[0].Text, backend: resp.Header.Get("X-Stockpot-Backend")}
	if err := json.Unmarshal(out.Usage, &a.usage); err != nil {
		t.Fatal(err)
	}
	return a
}

// replicaCounters sums a replica's /metrics rows by series (name plus labels as printed).
func replicaCounters(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] += v
		}
	}
	return out
}

// restorable is the prompt's block hashes a replica can restore (the last prompt token is
// always computed), as the replica behind b computes them.
func restorable(t *testing.T, rt *Router, b *Backend, prompt string) ([]int32, []prefix.Hash) {
	t.Helper()
	id, bs, ok := b.index.chain()
	if !ok {
		t.Fatalf("no chain identity from %s", b.ID)
	}
	toks, err := rt.tokenizeOn(context.Background(), b, []byte(`{"prompt":`+strconv.Quote(prompt)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	hs := (&Request{Tokens: toks}).blockHashes(id, bs)
	return toks, hs[:(len(toks)-1)/bs]
}

func inShared(rt *Router, hs []prefix.Hash) bool {
	rt.remote.mu.RLock()
	defer rt.remote.mu.RUnlock()
	for _, h := range hs {
		if rt.remote.mu.blocks[h].tiers&(1<<kvtier.Remote) == 0 {
			return false
		}
	}
	return true
}

func backendByURL(t *testing.T, rt *Router, url string) *Backend {
	t.Helper()
	for _, b := range rt.backends() {
		if b.URL.String() == url {
			return b
		}
	}
	t.Fatalf("no backend %s", url)
	return nil
}

func hasRemoteCosts(b *Backend) bool {
	_, remote := b.index.weights(&defaultTierWeights)
	return b.liveIndex(time.Minute) && remote
}

// TestFleetScaleOutAndDeadWriter: replica A computes four prompts; write-through puts their
// blocks in Redis while A stays up, and the router learns them from A's remote events. A cold
// replica C joins at run time: the router scores it on those blocks and C restores exactly
// the predicted tokens from Redis (its prompt-token counters say restored, not computed),
// with the answer A gave. A second router in front of A, B and C, once it has the same view
// (snapshots, cost figures), makes the same pick between B and C (both restore from Redis;
// exact ties are TestKVAware's). Then A is killed: its blocks outlive it in the
// router's shared set, the router steers each prompt to a survivor on the cache, and that
// survivor restores exactly the prediction, with A's answers; a router started after A died
// knows the blocks from the survivors that restored them.
func TestFleetScaleOutAndDeadWriter(t *testing.T) {
	raddr := startRedisServer(t)
	args := []string{"--remote-cache", "redis://" + raddr + "/0", "--remote-call-timeout", testRemoteTimeout, "--remote-write", "through", "--prefetch", "wait"}
	rs := startReplicas(t, 2, args...)
	A, B := rs[0], rs[1]
	rt, rurl := startRouter(t, "kv-aware", rs, nil)
	rng := rand.New(rand.NewPCG(31, 31))
	type shared struct {
		prompt string
		want   fleetAnswer // A's answer
		toks   []int32
		hs     []prefix.Hash
	}
	ps := make([]shared, 4)
	a := backendByURL(t, rt, A.url)
	for i := range ps {
		ps[i].prompt = fmt.Sprintf("Scale-out prompt %d. %s", i, words(rng, 220))
		ps[i].want = fleetComplete(t, A.url, ps[i].prompt, "")
		ps[i].toks, ps[i].hs = restorable(t, rt, a, ps[i].prompt)
	}
	waitUntil(t, "A's blocks written through and announced in the shared remote set", func() bool {
		for _, p := range ps {
			if !inShared(rt, p.hs) {
				return false
			}
		}
		return true
	})

	// A cold replica joins.
	C := startReplicas(t, 1, args...)[0]
	if _, err := rt.AddBackend(C.url); err != nil {
		t.Fatal(err)
	}
	c := backendByURL(t, rt, C.url)
	b := backendByURL(t, rt, B.url)
	waitUntil(t, "C's stream in sync with a remote tier in its costs", func() bool { return hasRemoteCosts(c) && hasRemoteCosts(b) })
	req := func(p shared) *Request { return &Request{Tokens: p.toks, peers: rt.backends(), remote: rt.remote} }
	d := rt.policy.Pick(req(ps[0]), []*Backend{c})
	before := replicaCounters(t, C.url)
	got := fleetComplete(t, C.url, ps[0].prompt, "")
	after := replicaCounters(t, C.url)
	restored := after[`stockpot_prompt_tokens_total{source="remote"}`] - before[`stockpot_prompt_tokens_total{source="remote"}`]
	computed := after[`stockpot_prompt_tokens_total{source="computed"}`] - before[`stockpot_prompt_tokens_total{source="computed"}`]
	t.Logf("cold C: predicted %d (%s); restored %v remote tokens, computed %v of %d; cache %v",
		d.PredictedTokens, d.Reason, restored, computed, got.usage.PromptTokens, got.usage.Cache)
	want := len(ps[0].hs) * 16
	if d.Reason != "cache" || d.PredictedTokens != want {
		t.Fatalf("cold C scored %d tokens (%s), want %d on the shared remote blocks", d.PredictedTokens, d.Reason, want)
	}
	if int(restored) != want || int(computed) != got.usage.PromptTokens-want || got.usage.Cache["remote_tokens"] != want {
		t.Fatalf("cold C restored %v and computed %v tokens (usage %v); want %d restored from remote", restored, computed, got.usage.Cache, want)
	}
	if got.text != ps[0].want.text {
		t.Fatalf("cold C answered %q, A answered %q", got.text, ps[0].want.text)
	}

	// A second router in front of the same replicas agrees: with A out of the candidates, B
	// and C are scored on the shared blocks only.
	rt2, _ := startRouter(t, "kv-aware", []*replica{A, B, C}, nil)
	waitUntil(t, "the second router's shared set", func() bool {
		for _, p := range ps {
			if !inShared(rt2, p.hs) {
				return false
			}
		}
		return hasRemoteCosts(backendByURL(t, rt2, C.url)) && hasRemoteCosts(backendByURL(t, rt2, B.url))
	})
	survivors := func(r *Router) []*Backend { return []*Backend{backendByURL(t, r, B.url), backendByURL(t, r, C.url)} }
	// The replicas publish new cost figures as they measure; both routers decide on the same
	// view once the last figures reached both.
	waitUntil(t, "both routers on the same cost figures", func() bool {
		for i, b := range survivors(rt) {
			w1, _ := b.index.weights(&defaultTierWeights)
			w2, _ := survivors(rt2)[i].index.weights(&defaultTierWeights)
			if w1 != w2 {
				return false
			}
		}
		return true
	})
	choice := map[int]string{}
	for i, p := range ps[1:] {
		d1 := rt.policy.Pick(req(p), survivors(rt))
		d2 := rt2.policy.Pick(&Request{Tokens: p.toks, peers: rt2.backends(), remote: rt2.remote}, survivors(rt2))
		wb, _ := survivors(rt)[0].index.weights(&defaultTierWeights)
		wc, _ := survivors(rt)[1].index.weights(&defaultTierWeights)
		t.Logf("prompt %d: B weights %v, C weights %v: both routers pick %s", i+1, wb, wc, d1.Backend.ID)
		if d1.Backend.ID != d2.Backend.ID || d1.Reason != d2.Reason || d1.PredictedTokens != d2.PredictedTokens {
			t.Fatalf("prompt %d: router 1 picks %s (%s, %d), router 2 %s (%s, %d)", i+1,
				d1.Backend.ID, d1.Reason, d1.PredictedTokens, d2.Backend.ID, d2.Reason, d2.PredictedTokens)
		}
		choice[i+1] = d1.Backend.ID
	}

	// The writer is killed: the router marks it down, and every prompt A computed is still
	// steered on the cache to a survivor that restores it from Redis.
	A.kill()
	waitUntil(t, "A marked down", func() bool { return !a.Healthy() })
	for i, p := range ps[1:] {
		i++
		cacheBefore := counterSum(t, rt, "stockpot_router_decisions_total", "reason", "cache")
		predBefore := counterSum(t, rt, "stockpot_router_predicted_tokens_total", "", "")
		got := fleetComplete(t, rurl, p.prompt, "")
		pred := counterSum(t, rt, "stockpot_router_predicted_tokens_total", "", "") - predBefore
		cache := counterSum(t, rt, "stockpot_router_decisions_total", "reason", "cache") - cacheBefore
		t.Logf("prompt %d after A died: → %s (router 2 would pick %s), predicted %.0f, remote %d, cached %d of %d",
			i, got.backend, choice[i], pred, got.usage.Cache["remote_tokens"], got.usage.Details.CachedTokens, got.usage.PromptTokens)
		if got.backend == a.ID || got.backend != choice[i] {
			t.Fatalf("prompt %d went to %s; want %s, the survivor both routers pick", i, got.backend, choice[i])
		}
		if cache != 1 || int(pred) != len(p.hs)*16 || got.usage.Cache["remote_tokens"] != int(pred) {
			t.Fatalf("prompt %d: %v cache decisions, predicted %v, restored %d from remote; want one cache decision restoring all %d",
				i, cache, pred, got.usage.Cache["remote_tokens"], len(p.hs)*16)
		}
		if got.text != p.want.text {
			t.Fatalf("prompt %d: survivor answered %q, A answered %q", i, got.text, p.want.text)
		}
	}
	if v := counterSum(t, rt, "stockpot_router_failed_requests_total", "", ""); v != 0 {
		t.Fatalf("%v failed requests", v)
	}
	// A router started after the writer died learns the blocks too: the survivors that
	// restored them announced them (adoption) and list them in their snapshots.
	rt3, _ := startRouter(t, "kv-aware", []*replica{B, C}, nil)
	for i, p := range ps {
		if !inShared(rt3, p.hs) {
			t.Fatalf("prompt %d: a router started after the writer died does not know its blocks", i)
		}
	}
}

// TestFleetRouterRestartAndTwoRouters: sessions placed by a kv-aware router keep their
// replica after the router restarts (its index rebuilt from the replicas' snapshots, so the
// next turns are cache decisions on the same replica), and two `stockpot route` processes,
// given the same replicas in different orders, agree on every placement: a session's turns
// alternate between them and never move, with the prefix policy (placement by the session
// key alone, where a per-process hash seed would scatter them) and with kv-aware.
func TestFleetRouterRestartAndTwoRouters(t *testing.T) {
	rs := startReplicas(t, 3)
	rt, url := startRouter(t, "kv-aware", rs, nil)
	rng := rand.New(rand.NewPCG(37, 37))
	const sessions = 6
	prompts := make([]string, sessions)
	where := make([]string, sessions)
	for s := range prompts {
		prompts[s] = fmt.Sprintf("Session %d. %s\n", s, words(rng, 80))
		for turn := range 2 {
			prompts[s] += "User: " + words(rng, 15) + "\nAssistant:"
			a := fleetComplete(t, url, prompts[s], fmt.Sprint("restart-", s))
			if turn > 0 && a.backend != where[s] {
				t.Fatalf("session %d moved from %s to %s before any restart", s, where[s], a.backend)
			}
			where[s] = a.backend
			prompts[s] += a.text + "\n"
		}
	}
	rt.Close()
	start := time.Now()
	rt2, url2 := startRouter(t, "kv-aware", rs, nil) // waits until every index is in sync
	for _, r := range rs {
		b := backendByURL(t, rt2, r.url)
		waitUntil(t, "the new router's index mirrors "+r.url, func() bool { return mirrors(b, r.url) })
	}
	t.Logf("indexes rebuilt from snapshots in %v", time.Since(start).Round(time.Millisecond))
	cacheBefore := counterSum(t, rt2, "stockpot_router_decisions_total", "reason", "cache")
	for s := range prompts {
		prompts[s] += "User: " + words(rng, 15) + "\nAssistant:"
		a := fleetComplete(t, url2, prompts[s], fmt.Sprint("restart-", s))
		if a.backend != where[s] {
			t.Fatalf("session %d: on %s before the restart, on %s after", s, where[s], a.backend)
		}
		if a.usage.Details.CachedTokens == 0 {
			t.Fatalf("session %d after the restart: nothing cached", s)
		}
	}
	if n := counterSum(t, rt2, "stockpot_router_decisions_total", "reason", "cache") - cacheBefore; n != sessions {
		t.Fatalf("%v cache decisions after the restart, want %d", n, sessions)
	}

	for _, policy := range []string{"prefix", "kv-aware"} {
		r1 := startRouteProcess(t, policy, rs[0].url, rs[1].url, rs[2].url)
		r2 := startRouteProcess(t, policy, rs[2].url, rs[0].url, rs[1].url)
		placed := map[string]int{}
		for s := range 8 {
			session := fmt.Sprintf("%s-%d", policy, s)
			prompt := fmt.Sprintf("Two routers, %s. %s\n", session, words(rng, 60))
			first := ""
			for turn := range 3 {
				prompt += "User: " + words(rng, 10) + "\nAssistant:"
				via := []string{r1, r2}[(s+turn)%2]
				a := fleetComplete(t, via, prompt, session)
				if turn == 0 {
					first = a.backend
					placed[first]++
				} else if a.backend != first {
					t.Fatalf("%s: session %d turn %d went to %s through %s; turn 0 went to %s", policy, s, turn, a.backend, via, first)
				}
				prompt += a.text + "\n"
			}
		}
		if len(placed) < 2 {
			t.Fatalf("%s: every session on one replica: %v", policy, placed)
		}
		t.Logf("%s: sessions per replica %v", policy, placed)
	}
}

// startRouteProcess runs `stockpot route` on the backends and returns its base URL.
func startRouteProcess(t *testing.T, policy string, backends ...string) string {
	t.Helper()
	addr := freeAddr(t)
	args := []string{"route", "--addr", addr, "--policy", policy, "--health-interval", "200ms"}
	for _, b := range backends {
		args = append(args, "--backend", b)
	}
	cmd := exec.Command(binPath, args...)
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	waitUntil(t, "route health", func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	if policy == "kv-aware" { // every replica's snapshot loaded
		waitUntil(t, "route's event streams in sync", func() bool {
			n := 0
			for k, v := range replicaCounters(t, base) {
				if strings.HasPrefix(k, "stockpot_router_resyncs_total{") && v >= 1 {
					n++
				}
			}
			return n == len(backends)
		})
	}
	return base
}

// delayProxy relays TCP to upstream, holding every chunk of the server's replies for delay
// (the soak's proxy).
func delayProxy(t *testing.T, upstream string, delay time.Duration) string {
	t.Helper()
	p, err := soak.NewTCPProxy(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(delay)
	t.Cleanup(p.Close)
	return p.Addr()
}

// TestFleetKillReplicaMidWriteThrough: replica A writes through to Redis over a link that
// holds every reply 100 ms (under the store's call timeout: the writes succeed, slowly, so
// A's remote queue fills while it serves); B shares the Redis directly. Eight sessions' first
// prompts go through the router, most placed on A; A is killed -9 while its remote queue
// holds writes (its /metrics says so just before). No client sees an error (the router retries
// what A did not answer on B), and every answer is what a cache-off server answers. A cold
// replica C then joins: for every prompt the router never predicts more than C restores (A
// announced only writes Redis confirmed), C discards nothing (no torn block), and its answers
// are the same.
func TestFleetKillReplicaMidWriteThrough(t *testing.T) {
	raddr := startRedisServer(t)
	slow := delayProxy(t, raddr, 100*time.Millisecond)
	ref := startReplicas(t, 1, "--prefix-cache=false")[0]
	A := startReplicas(t, 1, "--remote-cache", "redis://"+slow+"/0", "--remote-call-timeout", testRemoteTimeout, "--remote-write", "through", "--prefetch", "timeout", "--prefetch-timeout", "50ms")[0]
	B := startReplicas(t, 1, "--remote-cache", "redis://"+raddr+"/0", "--remote-call-timeout", testRemoteTimeout, "--remote-write", "through", "--prefetch", "wait")[0]
	rt, url := startRouter(t, "kv-aware", []*replica{A, B}, nil)
	a := backendByURL(t, rt, A.url)
	rng := rand.New(rand.NewPCG(41, 41))
	const n = 8
	prompts, sessions, want := make([]string, n), make([]string, n), make([]string, n)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("Kill test %d. %s", i, words(rng, 240))
		want[i] = fleetComplete(t, ref.url, prompts[i], "").text
		// Sessions the router places on A (by the session key: nothing is cached yet), then B.
		for k := 0; ; k++ {
			sessions[i] = fmt.Sprintf("kill-%d-%d", i, k)
			d := rt.policy.Pick(&Request{SessionID: sessions[i], Tokens: []int32{1}, peers: rt.backends(), remote: rt.remote}, rt.backends())
			if (d.Backend == a) == (i < 6) {
				break
			}
		}
	}
	type result struct {
		i int
		a softAnswer
	}
	results := make(chan result, n)
	for i := range prompts {
		go func() { results <- result{i, fleetCompleteSoft(url, prompts[i], sessions[i])} }()
	}
	depth := 0.0
	waitUntil(t, "A's remote write queue busy", func() bool {
		depth = replicaCounters(t, A.url)[`stockpot_kv_offload_queue_depth{tier="remote"}`]
		return depth > 0
	})
	A.kill()
	answeredByA := 0
	for range prompts {
		r := <-results
		if r.a.err != "" {
			t.Fatalf("session %d: the client saw an error: %s", r.i, r.a.err)
		}
		if r.a.text != want[r.i] {
			t.Fatalf("session %d (on %s): %q, want %q", r.i, r.a.backend, r.a.text, want[r.i])
		}
		if r.a.backend == a.ID {
			answeredByA++
		}
	}
	retries := counterSum(t, rt, "stockpot_router_retries_total", "", "")
	if f := counterSum(t, rt, "stockpot_router_failed_requests_total", "", ""); f != 0 {
		t.Fatalf("%v requests failed on every backend", f)
	}
	t.Logf("killed A with %v blocks in its remote queue; %d answered by A, %v retried on B", depth, answeredByA, retries)

	C := startReplicas(t, 1, "--remote-cache", "redis://"+raddr+"/0", "--remote-call-timeout", testRemoteTimeout, "--prefetch", "wait")[0]
	if _, err := rt.AddBackend(C.url); err != nil {
		t.Fatal(err)
	}
	c := backendByURL(t, rt, C.url)
	waitUntil(t, "C in sync with a remote tier in its costs", func() bool { return hasRemoteCosts(c) })
	for i, p := range prompts {
		toks, _ := restorable(t, rt, c, p)
		d := rt.policy.Pick(&Request{Tokens: toks, peers: rt.backends(), remote: rt.remote}, []*Backend{c})
		got := fleetComplete(t, C.url, p, "")
		t.Logf("prompt %d: predicted %d, C restored %d of %d", i, d.PredictedTokens, got.usage.Cache["remote_tokens"], got.usage.PromptTokens)
		if got.text != want[i] || got.usage.Cache["discarded_tokens"] != 0 {
			t.Fatalf("prompt %d on C: %q (%v), want %q with nothing discarded", i, got.text, got.usage.Cache, want[i])
		}
		if d.PredictedTokens > got.usage.Cache["remote_tokens"] {
			t.Fatalf("prompt %d: the router predicted %d tokens, C found %d in Redis: an announced write never landed",
				i, d.PredictedTokens, got.usage.Cache["remote_tokens"])
		}
	}
}

type softAnswer struct {
	fleetAnswer
	err string
}

// fleetCompleteSoft is fleetComplete returning a failure instead of failing the test (it runs
// on other goroutines).
func fleetCompleteSoft(base, prompt, session string) (a softAnswer) {
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 6, "temperature": 0})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Session-ID", session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.err = err.Error()
		return a
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		a.err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, raw)
		return a
	}
	var out struct {
		Choices []struct{ Text string }
		Usage   json.RawMessage
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out.Choices) != 1 {
		a.err = fmt.Sprintf("%v: %s", err, raw)
		return a
	}
	a.text, a.backend = out.Choices[0].Text, resp.Header.Get("X-Stockpot-Backend")
	_ = json.Unmarshal(out.Usage, &a.usage)
	return a
}
