package router

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"stockpot/internal/portlock"

	"github.com/prometheus/client_golang/prometheus"
)

// The end-to-end tests run real `stockpot serve` replicas as subprocesses:
// TestMain builds the binary and writes the synthetic default model to a
// file once (loading it takes well under a second; generating it takes
// seconds).
var (
	binPath   string
	modelPath string
	e2eSkip   string
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// Fuzzing (make fuzz runs -run '^$' -fuzz T): no end-to-end test runs, so neither the
		// coordinator nor each fuzz worker builds the binary.
		e2eSkip = "the stockpot binary is not built while fuzzing"
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "stockpot-router-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "stockpot")
	modelPath = filepath.Join(dir, "default.gguf")
	if out, err := exec.Command("go", "build", "-o", binPath, "stockpot/cmd/stockpot").CombinedOutput(); err != nil {
		e2eSkip = fmt.Sprintf("building stockpot: %v\n%s", err, out)
	} else if out, err := exec.Command(binPath, "model", "synth", "--preset", "default", "--out", modelPath).CombinedOutput(); err != nil {
		e2eSkip = fmt.Sprintf("synth model: %v\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type replica struct {
	t    *testing.T
	addr string
	url  string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	args []string // extra `serve` flags
}

func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := portlock.Addr() // held by this process: nobody else gets it before the child binds
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// startReplicas starts n replicas in parallel and waits for their /health.
func startReplicas(t *testing.T, n int, serveArgs ...string) []*replica {
	t.Helper()
	if e2eSkip != "" {
		t.Fatal(e2eSkip) // a build failure is a failure, never a skip
	}
	rs := make([]*replica, n)
	for i := range rs {
		addr := freeAddr(t)
		rs[i] = &replica{t: t, addr: addr, url: "http://" + addr, args: serveArgs}
		rs[i].start()
		t.Cleanup(rs[i].kill)
	}
	for _, r := range rs {
		r.waitHealthy()
	}
	return rs
}

func (r *replica) start() {
	r.log = &bytes.Buffer{}
	r.cmd = exec.Command(binPath, append([]string{"serve", "--model", modelPath, "--addr", r.addr, "--threads", "1", "--kv-memory", "128MiB"}, r.args...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
}

func (r *replica) waitHealthy() {
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(r.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.t.Fatalf("replica %s not healthy after 3 minutes:\n%s", r.addr, r.log)
}

// kill sends SIGKILL (as a crash would) and reaps the process.
func (r *replica) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// cacheCounters returns the replica's prefix-cache hit and query counters.
func (r *replica) cacheCounters() (hits, queries float64) {
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "stockpot_prefix_cache_hits_total"):
			hits += v
		case strings.HasPrefix(line, "stockpot_prefix_cache_queries_total"):
			queries += v
		}
	}
	return hits, queries
}

func startRouter(t *testing.T, policy string, rs []*replica, mod func(*Config)) (*Router, string) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Policy = policy
	for _, r := range rs {
		cfg.Backends = append(cfg.Backends, r.url)
	}
	cfg.HealthInterval = 200 * time.Millisecond
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	if mod != nil {
		mod(&cfg)
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Handler())
	t.Cleanup(func() { srv.Close(); rt.Close() })
	if policy == "kv-aware" {
		waitSynced(t, rt)
	}
	return rt, srv.URL
}

func waitSynced(t *testing.T, rt *Router) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		ok := true
		for _, b := range rt.backends() {
			ok = ok && b.liveIndex(time.Minute)
		}
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("subscribers not synced: %+v", rt.Backends())
}

var vocabulary = strings.Fields(`time person year way day thing man world life hand part child eye woman place
work week case point government company number group problem fact river stone garden window kitchen
market letter music history table paper engine signal ocean forest valley mountain bridge castle`)

func words(rng *rand.Rand, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(vocabulary[rng.IntN(len(vocabulary))])
	}
	return b.String()
}

type completion struct {
	Choices []struct {
		Text string `json:"text"`
	} `json:"choices"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		Details      struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

type workloadResult struct {
	requests, errors int
	share            map[string]int // X-Stockpot-Backend -> requests
	cached, prompt   int
}

// runWorkload drives sessions × turns append-only conversations against
// target: every session runs its turns in order, sessions run concurrently.
// Each session's text is unique to (variant, session).
func runWorkload(t *testing.T, target, variant string, sessions, turns int) workloadResult {
	t.Helper()
	res := workloadResult{share: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 60 * time.Second}
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(len(variant)), uint64(s)))
			prompt := fmt.Sprintf("Conversation %s-%d. %s\n", variant, s, words(rng, 60))
			for turn := range turns {
				prompt += "User: " + words(rng, 20) + "\nAssistant:"
				body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 4, "temperature": 0})
				req, _ := http.NewRequest(http.MethodPost, target+"/v1/completions", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Session-ID", fmt.Sprintf("%s-%d", variant, s))
				resp, err := client.Do(req)
				var c completion
				ok := err == nil && resp.StatusCode == 200
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					ok = ok && json.Unmarshal(b, &c) == nil && len(c.Choices) == 1
					if !ok {
						t.Logf("%s session %d turn %d: HTTP %d %s", variant, s, turn, resp.StatusCode, b)
					}
				} else {
					t.Logf("%s session %d turn %d: %v", variant, s, turn, err)
				}
				mu.Lock()
				res.requests++
				if !ok {
					res.errors++
				} else {
					res.share[resp.Header.Get("X-Stockpot-Backend")]++
					res.cached += c.Usage.Details.CachedTokens
					res.prompt += c.Usage.PromptTokens
				}
				mu.Unlock()
				if ok {
					prompt += c.Choices[0].Text + "\n"
				}
			}
		}()
	}
	wg.Wait()
	return res
}

// serverHitRate runs fn and returns the replicas' own hit rate over it.
func serverHitRate(rs []*replica, fn func()) float64 {
	var h0, q0 float64
	for _, r := range rs {
		h, q := r.cacheCounters()
		h0, q0 = h0+h, q0+q
	}
	fn()
	var h1, q1 float64
	for _, r := range rs {
		h, q := r.cacheCounters()
		h1, q1 = h1+h, q1+q
	}
	if q1 == q0 {
		return 0
	}
	return (h1 - h0) / (q1 - q0)
}

// TestRoutedVsSingle: 3 replicas behind the router, 12 sessions × 5 turns.
// prefix and kv-aware keep ≥ 90% of one replica's hit rate and spread the
// requests (no backend over 1.5× the mean share); random is logged for
// contrast.
func TestRoutedVsSingle(t *testing.T) {
	rs := startReplicas(t, 3)
	const sessions, turns = 12, 5
	single := serverHitRate(rs[:1], func() {
		if r := runWorkload(t, rs[0].url, "single", sessions, turns); r.errors > 0 {
			t.Fatalf("single: %d errors", r.errors)
		}
	})
	t.Logf("single replica: server hit rate %.3f", single)
	for _, policy := range []string{"random", "prefix", "kv-aware"} {
		rt, url := startRouter(t, policy, rs, nil)
		var res workloadResult
		rate := serverHitRate(rs, func() { res = runWorkload(t, url, policy, sessions, turns) })
		mean := float64(res.requests) / float64(len(rs))
		maxShare := 0
		for _, n := range res.share {
			maxShare = max(maxShare, n)
		}
		t.Logf("%-9s server hit rate %.3f (%.0f%% of single), client cached %d/%d, share %v (max %.2f× mean), errors %d",
			policy, rate, 100*rate/single, res.cached, res.prompt, res.share, float64(maxShare)/mean, res.errors)
		reasons := map[string]float64{}
		for _, mf := range mustGather(t, rt) {
			if mf.GetName() == "stockpot_router_decisions_total" {
				for _, m := range mf.GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "reason" {
							reasons[l.GetValue()] += m.GetCounter().GetValue()
						}
					}
				}
			}
		}
		t.Logf("%-9s decisions by reason %v", policy, reasons)
		if policy == "kv-aware" {
			var pred, got float64
			for _, mf := range mustGather(t, rt) {
				switch mf.GetName() {
				case "stockpot_router_predicted_tokens_total":
					for _, m := range mf.GetMetric() {
						pred += m.GetCounter().GetValue()
					}
				case "stockpot_router_cached_tokens_total":
					for _, m := range mf.GetMetric() {
						got += m.GetCounter().GetValue()
					}
				}
			}
			t.Logf("kv-aware: predicted matched tokens %.0f, actual cached tokens %.0f", pred, got)
		}
		if res.errors > 0 {
			t.Errorf("%s: %d errors", policy, res.errors)
		}
		if policy == "random" {
			continue
		}
		if rate < 0.9*single {
			t.Errorf("%s: hit rate %.3f < 90%% of single replica's %.3f", policy, rate, single)
		}
		if float64(maxShare) > 1.5*mean {
			t.Errorf("%s: a backend took %d requests, over 1.5× the mean %.1f", policy, maxShare, mean)
		}
	}
}

func mustGather(t *testing.T, rt *Router) []*dtoMetricFamily {
	t.Helper()
	mfs, err := rt.cfg.Gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// TestFailover: kill -9 one of three replicas mid-run; non-streamed
// requests see no error.
func TestFailover(t *testing.T) {
	rs := startReplicas(t, 3)
	rt, url := startRouter(t, "kv-aware", rs, nil)
	const workers, perWorker = 6, 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs, done := 0, 0
	killed := make(chan struct{})
	client := &http.Client{Timeout: 60 * time.Second}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(7, uint64(w)))
			base := fmt.Sprintf("Worker %d. %s\n", w, words(rng, 40))
			for i := range perWorker {
				body, _ := json.Marshal(map[string]any{"prompt": base + words(rng, 10), "max_tokens": 8})
				resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
				ok := err == nil && resp.StatusCode == 200
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if !ok {
						t.Logf("worker %d req %d: HTTP %d %s", w, i, resp.StatusCode, b)
					}
				} else {
					t.Logf("worker %d req %d: %v", w, i, err)
				}
				mu.Lock()
				done++
				if !ok {
					errs++
				}
				if done == workers*perWorker/4 {
					close(killed)
				}
				mu.Unlock()
			}
		}()
	}
	<-killed
	rs[1].kill()
	t.Logf("killed replica %s after %d requests", rs[1].addr, workers*perWorker/4)
	wg.Wait()
	retries := 0.0
	for _, mf := range mustGather(t, rt) {
		if mf.GetName() == "stockpot_router_retries_total" {
			for _, m := range mf.GetMetric() {
				retries += m.GetCounter().GetValue()
			}
		}
	}
	t.Logf("failover: %d requests, %d client-visible errors, %.0f attempts retried on another backend", done, errs, retries)
	if errs != 0 {
		t.Fatalf("%d client-visible errors after kill -9 of one backend", errs)
	}
}

// TestEventsRealReplica: the router's index mirrors a real replica's
// blocks, predictions match the replica's cached_tokens (same hash chain),
// SSE passes through with its usage, and a kill -9 + restart of the replica
// is noticed (epoch change) and the index converges to the new process.
func TestEventsRealReplica(t *testing.T) {
	rs := startReplicas(t, 1)
	rt, url := startRouter(t, "kv-aware", rs, nil)
	b := rt.backends()[0]
	rng := rand.New(rand.NewPCG(3, 3))
	prompt := "Events test. " + words(rng, 120)
	post := func(stream bool) (completion, string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 2, "stream": stream,
			"stream_options": map[string]any{"include_usage": true}})
		resp, err := http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var c completion
		if !stream {
			if err := json.Unmarshal(raw, &c); err != nil {
				t.Fatalf("%v: %s", err, raw)
			}
		}
		return c, string(raw)
	}
	indexMatches := func() bool {
		resp, err := http.Get(rs[0].url + "/v1/kv-events/snapshot")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var s struct {
			Seq    uint64            `json:"seq"`
			Blocks []json.RawMessage `json:"blocks"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&s)
		st := b.events.Stats()
		return st.Seq == s.Seq && b.index.Len() == len(s.Blocks)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; backends %+v", what, rt.Backends())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first, _ := post(false)
	waitFor("index to mirror the replica", indexMatches)
	if b.index.Len() == 0 {
		t.Fatal("index empty after a request")
	}
	// The same prompt again: the router predicts exactly what the replica
	// then reports cached.
	rq := &Request{Tokens: nil}
	id, bs, _ := b.index.chain()
	toks, err := rt.tokenizeOn(context.Background(), b, []byte(`{"prompt":`+strconv.Quote(prompt)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	rq.Tokens = toks
	n, _ := b.index.match(rq.blockHashes(id, bs), &defaultTierWeights, nil)
	second, _ := post(false)
	t.Logf("prompt %d tokens: first cached %d; predicted %d, second cached %d", first.Usage.PromptTokens,
		first.Usage.Details.CachedTokens, n*bs, second.Usage.Details.CachedTokens)
	if n*bs != second.Usage.Details.CachedTokens || n == 0 {
		t.Fatalf("predicted %d cached tokens, replica reported %d", n*bs, second.Usage.Details.CachedTokens)
	}
	_, sse := post(true)
	if !strings.Contains(sse, "data: [DONE]") || !strings.Contains(sse, `"cached_tokens"`) {
		t.Fatalf("stream through the router lost its end or usage:\n%s", sse)
	}
	if u := parseStreamUsage([]byte(sse)); !u.ok || u.cached == 0 {
		t.Fatalf("stream usage not parsed: %+v", u)
	}

	// Crash and restart on the same address.
	before := b.events.Stats()
	rs[0].kill()
	rs[0].start()
	rs[0].waitHealthy()
	waitFor("epoch change", func() bool { return b.events.Stats().Epoch != before.Epoch && b.events.Stats().Synced })
	if b.index.Len() != 0 {
		// A fresh replica holds nothing; the old index must be gone.
		waitFor("empty index after restart", func() bool { return b.index.Len() == 0 })
	}
	post(false)
	waitFor("index to mirror the restarted replica", indexMatches)
	st := b.events.Stats()
	t.Logf("after restart: resyncs %d restarts %d gaps %d, index %d blocks, lag %v", st.Resyncs, st.Restarts, st.Gaps, b.index.Len(), st.Lag)
	if st.Restarts < 1 || st.Resyncs < 2 {
		t.Fatalf("restart not detected: %+v", st)
	}

	// Chat: the router tokenizes messages through the replica's template,
	// so its prediction for a repeated conversation is exact too.
	chat, _ := json.Marshal(map[string]any{"max_tokens": 2, "messages": []map[string]string{
		{"role": "system", "content": "You are terse. " + words(rng, 60)},
		{"role": "user", "content": words(rng, 40)}}})
	for range 2 {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(chat))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("chat: HTTP %d %s", resp.StatusCode, raw)
		}
		waitFor("index to mirror the replica", indexMatches)
	}
	var pred, got float64
	for _, mf := range mustGather(t, rt) {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "stockpot_router_predicted_tokens_total":
				pred += m.GetCounter().GetValue()
			case "stockpot_router_cached_tokens_total":
				got += m.GetCounter().GetValue()
			}
		}
	}
	t.Logf("all requests (completions, stream, chat): predicted %.0f cached tokens, replica reported %.0f", pred, got)
	if pred != got || pred == 0 {
		t.Fatalf("predicted %.0f cached tokens in total, replica reported %.0f", pred, got)
	}
}
