package router

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// keyBackends starts n stub replicas answering /v1/completions and
// /v1/responses. A body containing "hold" blocks until release is closed,
// after signalling on entered, so a test can load one replica at will.
func keyBackends(t *testing.T, n int, entered chan<- string, release <-chan struct{}) []*httptest.Server {
	t.Helper()
	out := make([]*httptest.Server, n)
	for i := range out {
		out[i] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/health":
				return
			case "/v1/completions", "/v1/chat/completions", "/v1/responses":
			default:
				http.NotFound(w, r)
				return
			}
			b, _ := io.ReadAll(r.Body)
			if bytes.Contains(b, []byte("hold")) {
				entered <- r.Host
				<-release
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, cannedCompletion)
		}))
		t.Cleanup(out[i].Close)
	}
	return out
}

func counterValue(t *testing.T, rt *Router, name, label, value string) float64 {
	t.Helper()
	for _, mf := range mustGather(t, rt) {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestPromptCacheKeyAffinity drives a real router over three replicas: a
// prompt_cache_key stays on one replica (completions, chat and Responses
// alike, whatever the prompt), different keys spread, and the key spills to
// another replica only while its owner is over the load bound.
func TestPromptCacheKeyAffinity(t *testing.T) {
	for _, policy := range []string{"prefix", "kv-aware"} {
		t.Run(policy, func(t *testing.T) {
			entered := make(chan string, 1)
			release := make(chan struct{})
			var once sync.Once
			unblock := func() { once.Do(func() { close(release) }) }
			defer unblock()
			bs := keyBackends(t, 3, entered, release)
			cfg := DefaultConfig()
			cfg.Policy = policy
			cfg.HealthInterval = time.Hour
			for _, b := range bs {
				cfg.Backends = append(cfg.Backends, b.URL)
			}
			reg := prometheus.NewRegistry()
			cfg.Registerer, cfg.Gatherer = reg, reg
			rt, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			front := httptest.NewServer(rt.Handler())
			defer front.Close()
			post := func(path, body string) string {
				t.Helper()
				resp, err := http.Post(front.URL+path, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%s: HTTP %d", path, resp.StatusCode)
				}
				return resp.Header.Get("X-Stockpot-Backend")
			}

			// One key, many prompts and endpoints: one replica.
			owner := ""
			for i := range 12 {
				var got string
				switch i % 3 {
				case 0:
					got = post("/v1/completions", fmt.Sprintf(`{"prompt":[%d,%d,%d],"prompt_cache_key":"tenant-a"}`, i, i+1, i+2))
				case 1:
					got = post("/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"q%d"}],"prompt_cache_key":"tenant-a"}`, i))
				default:
					got = post("/v1/responses", fmt.Sprintf(`{"input":"q%d","prompt_cache_key":"tenant-a"}`, i))
				}
				if owner == "" {
					owner = got
				}
				if got != owner {
					t.Fatalf("request %d with key tenant-a went to %s, the key's owner is %s", i, got, owner)
				}
			}
			// Many keys: more than one replica (the chance that 30 keys all
			// hash to one of three is 3^-29).
			seen := map[string]bool{}
			for i := range 30 {
				seen[post("/v1/completions", fmt.Sprintf(`{"prompt":[1,2,3],"prompt_cache_key":"k%d"}`, i))] = true
			}
			if len(seen) < 2 {
				t.Errorf("30 keys all went to %v", seen)
			}

			// Overload the owner: one request held there puts it over the
			// bound (ceil(1.25 · 2 / 3) = 1 in flight), so the next request
			// with the key spills to another replica.
			held := make(chan string, 1)
			go func() {
				resp, err := http.Post(front.URL+"/v1/completions", "application/json",
					strings.NewReader(`{"prompt":[9,9],"prompt_cache_key":"tenant-a","hold":true}`))
				if err != nil {
					held <- err.Error()
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				held <- resp.Header.Get("X-Stockpot-Backend")
			}()
			<-entered
			spilled := post("/v1/completions", `{"prompt":[1],"prompt_cache_key":"tenant-a"}`)
			if spilled == owner {
				t.Errorf("with its owner %s over the bound, the key stayed there", owner)
			}
			unblock()
			if h := <-held; h != owner {
				t.Errorf("the held request went to %s, want the owner %s", h, owner)
			}

			const name = "stockpot_router_prompt_cache_key_requests_total"
			if v := counterValue(t, rt, name, "outcome", "spill"); v != 1 {
				t.Errorf("spill outcomes: have %v, want 1", v)
			}
			if v := counterValue(t, rt, name, "outcome", "affinity"); v != 12+30+1 {
				t.Errorf("affinity outcomes: have %v, want %d", v, 12+30+1)
			}
			if v := counterValue(t, rt, "stockpot_router_prompt_cache_key_top_requests_total", "key", "tenant-a"); v != 14 {
				t.Errorf("tenant-a requests: have %v, want 14", v)
			}
		})
	}
}

// TestKeyMetricsBounded: past maxTrackedKeys keys every new key counts as
// _other; long keys are cut to maxKeyLabel bytes without splitting a rune.
func TestKeyMetricsBounded(t *testing.T) {
	k := newKeyMetrics(nil)
	for i := range maxTrackedKeys + 50 {
		k.observe(fmt.Sprintf("key-%d", i), "affinity")
	}
	k.observe("key-0", "affinity")
	if have := k.label("key-0"); have != "key-0" {
		t.Errorf("a tracked key: have label %q", have)
	}
	if have := k.label("key-new"); have != otherKeyLabel {
		t.Errorf("a key past the cap: have label %q, want %q", have, otherKeyLabel)
	}
	if n := len(k.mu.tracked); n != maxTrackedKeys {
		t.Errorf("tracked %d keys, want %d", n, maxTrackedKeys)
	}
	long := strings.Repeat("a", maxKeyLabel-1) + "é" + "tail"
	if have := truncateUTF8(long, maxKeyLabel); have != strings.Repeat("a", maxKeyLabel-1) {
		t.Errorf("truncateUTF8 split a rune: %q", have)
	}
}
