package router

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// adminStub is a replica's cache admin API: it records each call's method, path, query and
// Authorization, and answers as serve does (or with fail's status).
type adminStub struct {
	mu    sync.Mutex
	calls []string
	auth  []string
	fail  int
	srv   *httptest.Server
}

func newAdminStub(t *testing.T) *adminStub {
	s := &adminStub{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.calls = append(s.calls, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery+" "+string(b))
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		fail := s.fail
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if fail != 0 {
			w.WriteHeader(fail)
			io.WriteString(w, `{"error":{"message":"no","type":"invalid_request_error"}}`)
			return
		}
		switch {
		case r.URL.Path == "/v1/completions":
			io.WriteString(w, cannedCompletion)
		case r.URL.Path == "/v1/cache/prewarm":
			io.WriteString(w, `{"object":"cache.prewarm","prompt_tokens":3,"cached_tokens":0,"computed_tokens":3,"blocks":0,"pinned_tokens":0}`)
		case r.Method == "GET":
			io.WriteString(w, `{"object":"cache","tiers":[{"tier":"device","blocks":1}],"pins":[]}`)
		default:
			io.WriteString(w, `{"object":"cache.dropped","dropped_blocks":4,"busy_blocks":1,"tiers":{}}`)
		}
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *adminStub) snapshot() (calls, auth []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...), append([]string(nil), s.auth...)
}

func TestRouterCacheAdmin(t *testing.T) {
	stubs := []*adminStub{newAdminStub(t), newAdminStub(t), newAdminStub(t)}
	newRouter := func(admin []string) string {
		cfg := DefaultConfig()
		cfg.Policy = "prefix"
		cfg.HealthInterval = time.Hour
		cfg.AdminKeys, cfg.BackendKey = admin, "backend-secret"
		for _, s := range stubs {
			cfg.Backends = append(cfg.Backends, s.srv.URL)
		}
		reg := prometheus.NewRegistry()
		cfg.Registerer, cfg.Gatherer = reg, reg
		rt, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.Close)
		front := httptest.NewServer(rt.Handler())
		t.Cleanup(front.Close)
		return front.URL
	}
	call := func(url, method, path, key, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}

	off := newRouter(nil)
	if code, _, _ := call(off, "GET", "/v1/cache", "x", ""); code != http.StatusForbidden {
		t.Errorf("no admin key configured: HTTP %d, want 403", code)
	}
	url := newRouter([]string{"adm"})
	for _, key := range []string{"", "wrong", "backend-secret"} {
		if code, _, _ := call(url, "DELETE", "/v1/cache?all=1", key, ""); code != http.StatusUnauthorized {
			t.Errorf("key %q: HTTP %d, want 401", key, code)
		}
	}

	// A prewarm goes where the policy sends its prompt: the same replica as a completion
	// with the same prompt_cache_key.
	code, hdr, body := call(url, "POST", "/v1/cache/prewarm", "adm", `{"prompt":[1,2,3],"prompt_cache_key":"team-a"}`)
	if code != 200 || !strings.Contains(body, `"computed_tokens":3`) {
		t.Fatalf("prewarm: HTTP %d %s", code, body)
	}
	_, chdr, _ := call(url, "POST", "/v1/completions", "", `{"prompt":[9],"prompt_cache_key":"team-a"}`)
	if hdr.Get("X-Stockpot-Backend") == "" || hdr.Get("X-Stockpot-Backend") != chdr.Get("X-Stockpot-Backend") {
		t.Errorf("prewarm went to %q, the key's completions to %q", hdr.Get("X-Stockpot-Backend"), chdr.Get("X-Stockpot-Backend"))
	}
	prewarms := 0
	for _, s := range stubs {
		calls, auth := s.snapshot()
		for i, c := range calls {
			if strings.HasPrefix(c, "POST /v1/cache/prewarm") {
				prewarms++
				if auth[i] != "Bearer backend-secret" {
					t.Errorf("a replica got Authorization %q, want the backend key only", auth[i])
				}
			}
		}
	}
	if prewarms != 1 {
		t.Errorf("%d replicas got the prewarm, want 1", prewarms)
	}

	// GET and DELETE reach every replica, query included, and aggregate.
	code, _, body = call(url, "GET", "/v1/cache?limit=5", "adm", "")
	var agg CacheFanout
	if err := json.Unmarshal([]byte(body), &agg); err != nil || code != 200 || len(agg.Replicas) != 3 || agg.Failed != 0 {
		t.Fatalf("GET: HTTP %d %s (%v)", code, body, err)
	}
	for _, rc := range agg.Replicas {
		if rc.Status != 200 || !strings.Contains(string(rc.Answer), `"tier":"device"`) {
			t.Errorf("replica section %+v", rc)
		}
	}
	code, _, body = call(url, "DELETE", "/v1/cache?salt=t1", "adm", "")
	agg = CacheFanout{}
	if err := json.Unmarshal([]byte(body), &agg); err != nil || code != 200 || *agg.DroppedBlocks != 12 || *agg.BusyBlocks != 3 {
		t.Fatalf("DELETE: HTTP %d %s (%v)", code, body, err)
	}
	for _, s := range stubs {
		calls, auth := s.snapshot()
		last := calls[len(calls)-1]
		if !strings.HasPrefix(last, "DELETE /v1/cache?salt=t1") || auth[len(auth)-1] != "Bearer backend-secret" {
			t.Errorf("replica's last call %q with %q", last, auth[len(auth)-1])
		}
	}

	// One replica failing: 502 with its section; all refusing alike: their 4xx.
	stubs[1].mu.Lock()
	stubs[1].fail = 500
	stubs[1].mu.Unlock()
	code, _, body = call(url, "DELETE", "/v1/cache?all=1", "adm", "")
	agg = CacheFanout{}
	if err := json.Unmarshal([]byte(body), &agg); err != nil || code != http.StatusBadGateway || agg.Failed != 1 || *agg.DroppedBlocks != 8 {
		t.Errorf("one replica failing: HTTP %d %s", code, body)
	}
	for _, s := range stubs {
		s.mu.Lock()
		s.fail = 400
		s.mu.Unlock()
	}
	if code, _, body := call(url, "GET", "/v1/cache?limit=0", "adm", ""); code != 400 || !strings.Contains(body, `"error"`) {
		t.Errorf("every replica refusing: HTTP %d %s, want their 400", code, body)
	}
}

// TestCacheAdminE2E drives the cache admin API through a kv-aware router over three real
// replicas (their --admin-key is the router's --backend-key): a prewarm lands on one replica,
// a completion of the same prompt then goes there and finds it cached, GET aggregates the
// three, and DELETE ?all=1 empties them so the prompt is computed again.
func TestCacheAdminE2E(t *testing.T) {
	rs := startReplicas(t, 3, "--admin-key", "replica-admin")
	rt, url := startRouter(t, "kv-aware", rs, func(c *Config) {
		c.AdminKeys, c.BackendKey = []string{"adm"}, "replica-admin"
	})
	post := func(path, key, body string) (int, http.Header, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	prompt := strings.Repeat("The stock simmers for hours and every bowl is served from it. ", 12)
	code, hdr, body := post("/v1/cache/prewarm", "adm", `{"prompt":"`+prompt+`"}`)
	if code != 200 {
		t.Fatalf("prewarm: HTTP %d %s", code, body)
	}
	var pw struct {
		Prompt   int `json:"prompt_tokens"`
		Computed int `json:"computed_tokens"`
	}
	if err := json.Unmarshal(body, &pw); err != nil || pw.Computed != pw.Prompt || pw.Prompt == 0 {
		t.Fatalf("prewarm answer %s", body)
	}
	owner := hdr.Get("X-Stockpot-Backend")
	// The router learns the blocks from the owner's event stream.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var n int
		for _, b := range rt.backends() {
			if b.ID == owner {
				n = b.index.Len()
			}
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router never indexed the prewarmed blocks of %s", owner)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cached := func() (string, int) {
		t.Helper()
		code, hdr, body := post("/v1/completions", "", `{"prompt":"`+prompt+`","max_tokens":2}`)
		var r struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if code != 200 || json.Unmarshal(body, &r) != nil {
			t.Fatalf("completion: HTTP %d %s", code, body)
		}
		return hdr.Get("X-Stockpot-Backend"), r.Usage.Details.Cached
	}
	if b, c := cached(); b != owner || c == 0 {
		t.Errorf("after the prewarm: completion on %s with %d cached tokens, want %s with the prefix cached", b, c, owner)
	}

	req, _ := http.NewRequest("GET", url+"/v1/cache", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var agg CacheFanout
	err = json.NewDecoder(resp.Body).Decode(&agg)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(agg.Replicas) != 3 || agg.Failed != 0 {
		t.Fatalf("GET /v1/cache: HTTP %d, %+v, %v", resp.StatusCode, agg, err)
	}
	for _, rc := range agg.Replicas {
		var c struct {
			Tiers []struct {
				Tier   string `json:"tier"`
				Blocks int    `json:"blocks"`
			} `json:"tiers"`
		}
		if err := json.Unmarshal(rc.Answer, &c); err != nil || len(c.Tiers) == 0 || c.Tiers[0].Tier != "device" {
			t.Errorf("replica %s: %s", rc.Backend, rc.Answer)
		} else if rc.Backend == owner && c.Tiers[0].Blocks == 0 {
			t.Errorf("the owner %s reports no device blocks", owner)
		}
	}

	req, _ = http.NewRequest("DELETE", url+"/v1/cache?all=1", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	agg = CacheFanout{}
	err = json.NewDecoder(resp.Body).Decode(&agg)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || agg.DroppedBlocks == nil || *agg.DroppedBlocks == 0 {
		t.Fatalf("DELETE /v1/cache?all=1: HTTP %d %+v %v", resp.StatusCode, agg, err)
	}
	if b, c := cached(); c != 0 {
		t.Errorf("after the drop: %d cached tokens on %s, want 0", c, b)
	}
}
