package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/kvcache"
	"stockpot/internal/portlock"
)

func newTestInstance(t *testing.T, mutate func(*serveOptions)) (*instance, *httptest.Server) {
	t.Helper()
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, engine: engine.Config{BlockSize: 16, KVMemory: 16 << 20, KVType: kvcache.F32, PrefixCache: true, Dedup: true, MaxBatchTokens: 256, MaxRunning: 64}}
	if mutate != nil {
		mutate(&o)
	}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	t.Cleanup(func() {
		ts.Close()
		if err := inst.engine.CheckInvariants(); err != nil {
			t.Errorf("engine invariants: %v", err)
		}
		inst.Close()
	})
	return inst, ts
}

type apiUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	Cache map[string]int `json:"cache"`
}

func post(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func completion(t *testing.T, ts *httptest.Server, body map[string]any) apiUsage {
	t.Helper()
	code, out := post(t, ts.URL+"/v1/completions", body)
	if code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	var r struct{ Usage apiUsage }
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if r.Usage.PromptTokensDetails == nil || r.Usage.PromptTokensDetails.CachedTokens == nil {
		t.Fatalf("apiUsage without prompt_tokens_details.cached_tokens: %s", out)
	}
	return r.Usage
}

func longText(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Order %d: one pot of stock serves every bowl in the kitchen. ", i)
	}
	return b.String()
}

// TestServeCachedTokens is the README's quick tour: the same long prompt twice; the second
// reuses every full block but the one holding the last token.
func TestServeCachedTokens(t *testing.T) {
	_, ts := newTestInstance(t, nil)
	req := map[string]any{"prompt": longText(3000), "max_tokens": 4, "temperature": 0}
	cold := completion(t, ts, req)
	warm := completion(t, ts, req)
	if *cold.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("cold: cached %d", *cold.PromptTokensDetails.CachedTokens)
	}
	want := (warm.PromptTokens - 1) / 16 * 16
	if got := *warm.PromptTokensDetails.CachedTokens; got != want {
		t.Errorf("warm: cached %d of %d prompt tokens, want %d", got, warm.PromptTokens, want)
	}
	if warm.Cache["device_tokens"] != want || warm.Cache["computed_tokens"] != warm.PromptTokens-want {
		t.Errorf("warm apiUsage.cache = %v", warm.Cache)
	}
	// A different cache_salt reuses nothing.
	req["cache_salt"] = "other-tenant"
	if u := completion(t, ts, req); *u.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("other salt: cached %d", *u.PromptTokensDetails.CachedTokens)
	}
}

// TestServeBadInput: client mistakes get a 4xx with an OpenAI-style error; the server keeps
// serving and no block leaks (checked in cleanup).
func TestServeBadInput(t *testing.T) {
	_, ts := newTestInstance(t, func(o *serveOptions) { o.server.MaxPromptTokens = 500; o.server.MaxBodyBytes = 64 << 10 })
	cases := []struct {
		name string
		path string
		body string
		code int
	}{
		{"malformed json", "/v1/completions", `{"prompt": "x",`, 400},
		{"wrong type", "/v1/completions", `{"prompt": "x", "max_tokens": "ten"}`, 400},
		{"negative max_tokens", "/v1/completions", `{"prompt": "x", "max_tokens": -1}`, 400},
		{"absurd max_tokens", "/v1/completions", `{"prompt": "x", "max_tokens": 1000000000}`, 400},
		{"token out of vocab", "/v1/completions", `{"prompt": [1, 999999], "max_tokens": 1}`, 400},
		{"negative token", "/v1/completions", `{"prompt": [-5], "max_tokens": 1}`, 400},
		{"over max prompt", "/v1/completions", fmt.Sprintf(`{"prompt": %q}`, longText(4000)), 400},
		{"body too large", "/v1/completions", fmt.Sprintf(`{"prompt": %q}`, longText(70000)), 413},
		{"unknown model", "/v1/completions", `{"model": "gpt-9", "prompt": "x"}`, 404},
		{"bad temperature", "/v1/completions", `{"prompt": "x", "temperature": -3}`, 400},
		{"chat without messages", "/v1/chat/completions", `{"messages": []}`, 400},
		{"chat bad role type", "/v1/chat/completions", `{"messages": [{"role": 5, "content": "x"}]}`, 400},
		{"detokenize out of vocab", "/detokenize", `{"tokens": [99999999]}`, 400},
	}
	for _, tc := range cases {
		resp, err := http.Post(ts.URL+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error *struct{ Message, Type string } `json:"error"`
		}
		if resp.StatusCode != tc.code || json.Unmarshal(b, &e) != nil || e.Error == nil || e.Error.Message == "" {
			t.Errorf("%s: status %d (want %d), body %s", tc.name, resp.StatusCode, tc.code, b)
		}
	}
	if u := completion(t, ts, map[string]any{"prompt": "still serving", "max_tokens": 3}); u.CompletionTokens == 0 {
		t.Error("no tokens after bad input")
	}
}

// TestServeMetricsMatchUsage: the server's counters equal the sum of the responses' apiUsage over
// a mix of streamed and plain, completion and chat requests, run concurrently.
func TestServeMetricsMatchUsage(t *testing.T) {
	_, ts := newTestInstance(t, nil)
	shared := longText(600)
	var mu sync.Mutex
	sum := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var u apiUsage
			switch i % 4 {
			case 0:
				u = completion(t, ts, map[string]any{"prompt": shared + fmt.Sprint(i), "max_tokens": 5})
			case 1:
				u = streamUsage(t, ts.URL+"/v1/completions", map[string]any{"prompt": shared, "max_tokens": 5, "stream": true, "stream_options": map[string]any{"include_usage": true}})
			case 2:
				u = streamUsage(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "system", "content": shared}, {"role": "user", "content": fmt.Sprint("q", i)}}, "max_tokens": 5, "stream": true, "stream_options": map[string]any{"include_usage": true}})
			case 3:
				code, out := post(t, ts.URL+"/v1/chat/completions", map[string]any{"messages": []map[string]string{{"role": "user", "content": shared}}, "max_tokens": 5})
				if code != 200 {
					t.Errorf("chat: %d %s", code, out)
					return
				}
				var r struct{ Usage apiUsage }
				json.Unmarshal(out, &r)
				u = r.Usage
			}
			mu.Lock()
			defer mu.Unlock()
			sum["prompt"] += u.PromptTokens
			sum["device"] += u.Cache["device_tokens"]
			sum["computed"] += u.Cache["computed_tokens"]
			if u.PromptTokensDetails != nil && u.PromptTokensDetails.CachedTokens != nil {
				sum["cached"] += *u.PromptTokensDetails.CachedTokens
			}
		}()
	}
	wg.Wait()
	m := scrape(t, ts.URL)
	if got := m[`stockpot_prompt_tokens_total{source="device"}`]; got != float64(sum["device"]) {
		t.Errorf("device tokens: metric %v, apiUsage sum %d", got, sum["device"])
	}
	if got := m[`stockpot_prompt_tokens_total{source="computed"}`]; got != float64(sum["computed"]) {
		t.Errorf("computed tokens: metric %v, apiUsage sum %d", got, sum["computed"])
	}
	if got := m[`stockpot_prefix_cache_queries_total`]; got != float64(sum["prompt"]) {
		t.Errorf("queries: metric %v, prompt tokens %d", got, sum["prompt"])
	}
	if got := m[`stockpot_prefix_cache_hits_total{tier="device"}`]; got != float64(sum["cached"]) {
		t.Errorf("hits: metric %v, cached sum %d", got, sum["cached"])
	}
	if sum["cached"] == 0 {
		t.Error("no reuse at all in a workload with a shared prefix")
	}
}

func streamUsage(t *testing.T, url string, body map[string]any) apiUsage {
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Error(err)
		return apiUsage{}
	}
	defer resp.Body.Close()
	var u apiUsage
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || line == "[DONE]" {
			continue
		}
		var chunk struct{ Usage *apiUsage }
		if json.Unmarshal([]byte(line), &chunk) == nil && chunk.Usage != nil {
			u = *chunk.Usage
		}
	}
	if u.PromptTokens == 0 {
		t.Errorf("stream to %s carried no apiUsage", url)
	}
	return u
}

func scrape(t *testing.T, base string) map[string]float64 { return scrapeB(t, base) }

func scrapeB(t testing.TB, base string) map[string]float64 {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		var v float64
		fmt.Sscan(l[i+1:], &v)
		out[l[:i]] = v
	}
	return out
}

// TestServeDrainOnSIGTERM runs the real binary: a stream in flight when SIGTERM arrives
// finishes normally, and the process exits 0.
func TestServeDrainOnSIGTERM(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stockpot")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	port := freePort(t)
	cmd := exec.Command(bin, "serve", "--model", "synthetic:tiny-llama-spm", "--addr", port, "--kv-memory", "16MiB")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	base := "http://" + port
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy: %s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	b, _ := json.Marshal(map[string]any{"prompt": "drain me", "max_tokens": 300, "ignore_eos": true, "stream": true})
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Scan() // first chunk: the request is running
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	finish := ""
	for sc.Scan() {
		var chunk struct {
			Choices []struct {
				FinishReason *string `json:"finish_reason"`
			}
		}
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(line), &chunk) == nil {
			for _, c := range chunk.Choices {
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
			}
		}
	}
	resp.Body.Close()
	if finish != "length" {
		t.Errorf("stream in flight at SIGTERM finished with %q, want length", finish)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit: %v\n%s", err, stderr.String())
	}
}

// freePort is a loopback address whose port this test process holds (portlock): nobody else is
// told it, and the kernel hands it out to no one, between now and the child's bind and across
// its restarts.
func freePort(t *testing.T) string {
	a, err := portlock.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestServeKVEvents: a cached prompt shows up as stored device blocks in the snapshot that
// /v1/kv-events/snapshot serves, with the identity the router needs to compute the same hashes.
func TestServeKVEvents(t *testing.T) {
	_, ts := newTestInstance(t, nil)
	completion(t, ts, map[string]any{"prompt": longText(400), "max_tokens": 1})
	resp, err := http.Get(ts.URL + "/v1/kv-events/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var snap struct {
		Identity  string `json:"identity"`
		BlockSize int    `json:"block_size"`
		Blocks    []any  `json:"blocks"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	if snap.Identity == "" || snap.BlockSize != 16 || len(snap.Blocks) == 0 {
		t.Errorf("snapshot: identity %q, block size %d, %d blocks", snap.Identity, snap.BlockSize, len(snap.Blocks))
	}
}

func newHTTPServer(inst *instance) *httptest.Server {
	return httptest.NewServer(inst.handler(context.Background()))
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func postB(b testing.TB, url string, body any) (int, []byte) {
	bb, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(bb))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}
