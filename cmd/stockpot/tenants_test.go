package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/router"
	"stockpot/internal/server"
	"stockpot/internal/tenant"
)

// The isolation checks of tenants: tenant B ("globex"), with any cache_salt it likes, never
// gets a cached token of tenant A's ("acme") private prompt, directly or through the router,
// from any tier (working pool, host RAM, disk, Redis); public prefixes are shared, and only
// they are counted as cross-tenant reuse.

const backendKey = "bk-shared"

func isolationTenants(t *testing.T) *tenant.Set {
	t.Helper()
	src := `tenants:
  - name: acme
    keys: ["` + tenant.HashKey("key-acme") + `"]
    public_reads: true
  - name: globex
    keys: ["` + tenant.HashKey("key-globex") + `"]
    public_reads: true
`
	s, err := tenant.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tenantReplica is a replica serving the isolation tenants, trusting the router's key.
func tenantReplica(t *testing.T, ts *tenant.Set, kvBudget int64, to offload.Config) (*instance, string, func()) {
	t.Helper()
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, tiers: to, engine: engine.Config{BlockSize: 16, KVMemory: kvBudget, PrefixCache: true, Dedup: true, MaxBatchTokens: 256, MaxRunning: 8, Prefetch: engine.PrefetchWait}, server: server.Config{Tenants: ts, BackendKey: backendKey, AdminKeys: []string{"adm", backendKey}, PublicMetrics: true}} // the tests read the audit counters from /metrics without a key
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(inst)
	return inst, srv.URL, func() { srv.Close(); inst.Close() }
}

// tenantRouter is a router with the same tenants in front of backend.
func tenantRouter(t *testing.T, ts *tenant.Set, backend string) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := router.DefaultConfig()
	cfg.Backends = []string{backend}
	cfg.Registerer, cfg.Gatherer = reg, reg
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Tenants, cfg.BackendKey, cfg.AdminKeys = ts, backendKey, []string{"adm"}
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(rt.Handler())
	t.Cleanup(func() { front.Close(); rt.Close() })
	return front.URL
}

// postKey posts body with "Authorization: Bearer key".
func postKey(t *testing.T, url, key string, body any) (int, []byte) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// tenantComplete is a greedy completion as the tenant holding key, with cache_salt salt.
func tenantComplete(t *testing.T, url, key, prompt, salt string) completionResult {
	t.Helper()
	code, out := postKey(t, url+"/v1/completions", key, map[string]any{"prompt": prompt, "max_tokens": 8, "temperature": 0, "cache_salt": salt})
	if code != 200 {
		t.Fatalf("%s as %s: %d %s", url, key, code, out)
	}
	var r struct {
		Choices []struct{ Text string }
		Usage   apiUsage
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return completionResult{text: r.Choices[0].Text, usage: r.Usage}
}

func cachedOf(r completionResult) int {
	if r.usage.PromptTokensDetails == nil || r.usage.PromptTokensDetails.CachedTokens == nil {
		return -1
	}
	return *r.usage.PromptTokensDetails.CachedTokens
}

// attackSalts are the cache_salts tenant B tries to reach A's namespace with: A's own
// cache_salt, A's name, A's derived salts spelled out, the public salt, a lying length and
// NUL games. They are all different, so B never reuses its own earlier attempt either.
func attackSalts(t *testing.T, acme *tenant.Tenant, aSalt string) []string {
	salts := []string{"", aSalt, "acme", acme.Salt(aSalt), acme.Salt(""), tenant.PublicSalt(),
		"\x00stockpot/tenant\x00\x0a\x00\x00\x00acme" + aSalt, "acme\x00" + aSalt}
	seen := map[string]bool{}
	for _, s := range salts {
		if seen[s] {
			t.Fatalf("attack salt %q twice", s)
		}
		seen[s] = true
	}
	return salts
}

// TestTenantIsolationAcrossTiers: for each tier, A's private prompt is put where only that
// tier holds it; B then sends the very prompt with every attack salt, alternating direct and
// through the router, and must reuse nothing; A's own request then reuses it from that tier
// (so the blocks were there to be found).
func TestTenantIsolationAcrossTiers(t *testing.T) {
	ts := isolationTenants(t)
	acme := ts.Lookup("acme")
	const aSalt = "team-1"
	prompt := "acme's private plan: " + longText(1400)
	redis := startRedis(t)
	for _, tc := range []struct {
		tier     string
		kvBudget int64
		to       offload.Config
		// place puts A's prompt into the tier alone and returns the replica URL to probe
		// and its stop function.
		place func(t *testing.T, url string, stop func(), mk func() (string, func())) (string, func())
	}{
		{tier: "device", kvBudget: 16 << 20, place: func(t *testing.T, url string, stop func(), _ func() (string, func())) (string, func()) {
			return url, stop
		}},
		{tier: "host", kvBudget: 70 * 8192, to: offload.Config{HostBytes: 64 << 20},
			place: func(t *testing.T, url string, stop func(), _ func() (string, func())) (string, func()) {
				for i := range 3 { // push A's blocks out of the working pool, into host RAM
					tenantComplete(t, url, "key-acme", string(rune('a'+i))+longText(1500), aSalt)
				}
				return url, stop
			}},
		{tier: "disk", kvBudget: 16 << 20, to: offload.Config{DiskDir: filepath.Join(t.TempDir(), "disk"), DiskBytes: 1 << 30},
			place: func(t *testing.T, _ string, stop func(), mk func() (string, func())) (string, func()) {
				stop() // graceful: the pool is written back to disk; a new replica starts empty
				return mk()
			}},
		{tier: "remote", kvBudget: 16 << 20, to: offload.Config{RemoteURL: "redis://" + redis + "/0", Remote: testRemote},
			place: func(t *testing.T, _ string, stop func(), mk func() (string, func())) (string, func()) {
				stop() // written to Redis; the next replica shares nothing else
				return mk()
			}},
	} {
		t.Run(tc.tier, func(t *testing.T) {
			mk := func() (string, func()) {
				_, url, stop := tenantReplica(t, ts, tc.kvBudget, tc.to)
				return url, stop
			}
			url, stop := mk()
			first := tenantComplete(t, url, "key-acme", prompt, aSalt)
			url, stop = tc.place(t, url, stop, mk)
			t.Cleanup(stop) // after the router's cleanup (LIFO): its event stream holds the replica
			front := tenantRouter(t, ts, url)
			for i, salt := range attackSalts(t, acme, aSalt) {
				via, target := "direct", url
				if i%2 == 1 {
					via, target = "router", front
				}
				b := tenantComplete(t, target, "key-globex", prompt, salt)
				if c := cachedOf(b); c != 0 {
					t.Errorf("%s: globex with cache_salt %q (%s) reused %d cached tokens (%v)", tc.tier, salt, via, c, b.usage.Cache)
				}
				if b.text != first.text {
					t.Errorf("%s: globex's greedy answer %q differs from acme's %q", tc.tier, b.text, first.text)
				}
			}
			again := tenantComplete(t, url, "key-acme", prompt, aSalt)
			if got := again.usage.Cache[tc.tier+"_tokens"]; got == 0 {
				t.Errorf("%s: acme's own repeat reused nothing from %s (%v): the check above proved nothing", tc.tier, tc.tier, again.usage.Cache)
			}
			if again.text != first.text {
				t.Errorf("%s: acme's repeat answered %q, first %q", tc.tier, again.text, first.text)
			}
			m := scrape(t, url)
			if n := m[`stockpot_tenant_cross_reuse_tokens_total{tenant="globex"}`]; n != 0 {
				t.Errorf("%s: globex counted %v cross-tenant tokens with no public prefix", tc.tier, n)
			}
		})
	}
}

// TestTenantPublicPrefix: an operator's public prefix (a prewarm with "public": true through
// the router) is shared by both tenants and counted as cross-tenant reuse; what follows it is
// private: B sending A's very prompt, with any salt, reuses the public blocks and nothing
// more, and the audit counts exactly those.
func TestTenantPublicPrefix(t *testing.T) {
	ts := isolationTenants(t)
	acme := ts.Lookup("acme")
	_, url, stop := tenantReplica(t, ts, 16<<20, offload.Config{})
	t.Cleanup(stop) // after the router's cleanup (LIFO): its event stream holds the replica
	front := tenantRouter(t, ts, url)
	system := "You are the shared support assistant. " + longText(600)
	code, out := postKey(t, front+"/v1/cache/prewarm", "adm", map[string]any{"prompt": system, "public": true})
	if code != 200 {
		t.Fatalf("public prewarm through the router: %d %s", code, out)
	}
	var pw struct {
		Replicas []struct {
			Status int
			Answer struct {
				Blocks int `json:"blocks"`
			}
		}
	}
	if err := json.Unmarshal(out, &pw); err != nil || len(pw.Replicas) != 1 || pw.Replicas[0].Status != 200 {
		t.Fatalf("prewarm answer %s (%v)", out, err)
	}
	prompt := system + " acme's private question about its own ledger " + longText(300)
	tenantComplete(t, url, "key-acme", "acme's private plan: "+longText(300), "") // for globex's guess below
	// The public part the two share: the full blocks of the prewarm's tokens that the
	// prompt's tokens start with.
	sysToks, promptToks := tokenize(t, url, system), tokenize(t, url, prompt)
	common := 0
	for common < len(sysToks) && common < len(promptToks) && sysToks[common] == promptToks[common] {
		common++
	}
	publicTokens := min(common, len(sysToks)) / 16 * 16
	if publicTokens < 64 {
		t.Fatalf("only %d public tokens in common; the test needs a longer shared prefix", publicTokens)
	}
	a := tenantComplete(t, url, "key-acme", prompt, "team-1")
	if got := cachedOf(a); got != publicTokens {
		t.Errorf("acme reused %d tokens of its first prompt, want the %d public ones", got, publicTokens)
	}
	var crossB int
	for i, salt := range attackSalts(t, acme, "team-1") {
		target := url
		if i%2 == 1 {
			target = front
		}
		b := tenantComplete(t, target, "key-globex", prompt, salt)
		if got := cachedOf(b); got != publicTokens {
			t.Errorf("globex with cache_salt %q reused %d tokens, want exactly the %d public ones", salt, got, publicTokens)
		}
		if b.text != a.text {
			t.Errorf("globex's answer %q differs from acme's %q", b.text, a.text)
		}
		crossB += publicTokens
	}
	m := scrape(t, url)
	if got := m[`stockpot_tenant_cross_reuse_tokens_total{tenant="globex"}`]; int(got) != crossB {
		t.Errorf("globex's cross-tenant reuse = %v, want %d: the public blocks of each request and nothing private", got, crossB)
	}
	// acme's repeat reuses its private suffix too; only the public part is cross-tenant.
	before := m[`stockpot_tenant_cross_reuse_tokens_total{tenant="acme"}`]
	again := tenantComplete(t, url, "key-acme", prompt, "team-1")
	if got := cachedOf(again); got <= publicTokens {
		t.Errorf("acme's repeat reused %d tokens, want more than the %d public ones", got, publicTokens)
	}
	after := scrape(t, url)[`stockpot_tenant_cross_reuse_tokens_total{tenant="acme"}`]
	if int(after-before) != publicTokens {
		t.Errorf("acme's repeat counted %v cross-tenant tokens, want the %d public ones (its private blocks are its own)", after-before, publicTokens)
	}
	// globex asks why its own continuation missed (cache_report): the report must not quote
	// acme's private continuation of the public prefix, nor say it is cached elsewhere.
	code, out = postKey(t, url+"/v1/completions", "key-globex", map[string]any{"prompt": system + " globex's own question " + longText(200),
		"max_tokens": 1, "temperature": 0, "cache_report": true})
	if code != 200 {
		t.Fatalf("cache_report: %d %s", code, out)
	}
	if strings.Contains(string(out), "ledger") || strings.Contains(string(out), `"cause":"salt"`) {
		t.Errorf("globex's miss report names acme's cache: %s", out)
	}
	code, out = postKey(t, url+"/v1/completions", "key-globex", map[string]any{"prompt": "acme's private plan: " + longText(300),
		"max_tokens": 1, "temperature": 0, "cache_report": true})
	if code != 200 || strings.Contains(string(out), `"cause":"salt"`) {
		t.Errorf("globex's guess of a prompt: %d %s", code, out)
	}
}

// tokenize returns the completion-prompt tokens of text (BOS included), with the backend key.
func tokenize(t *testing.T, url, text string) []int32 {
	t.Helper()
	code, out := postKey(t, url+"/tokenize", backendKey, map[string]any{"prompt": text})
	if code != 200 {
		t.Fatalf("tokenize: %d %s", code, out)
	}
	var r struct{ Tokens []int32 }
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return r.Tokens
}

// TestTenantsFlagErrors: a malformed tenants file fails at start with its line; --tenants
// excludes --api-key; route's --tenants needs --backend-key.
func TestTenantsFlagErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("tenants:\n  - name: acme\n    keys: [\"plain-secret\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("tenants:\n  - name: acme\n    keys: [\""+tenant.HashKey("k")+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		run  func([]string) error
		args []string
		want string
	}{
		{cmdServe, []string{"--tenants", bad}, "line 3"},
		{cmdServe, []string{"--tenants", good, "--api-key", "k"}, "exclusive"},
		{cmdRoute, []string{"--tenants", bad, "--backend-key", "x"}, "line 3"},
		{cmdRoute, []string{"--tenants", good}, "needs --backend-key"},
	} {
		done := make(chan error, 1)
		go func() { done <- tc.run(tc.args) }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: %v, want an error with %q", tc.args, err, tc.want)
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("%v did not fail at start", tc.args)
		}
	}
}

// TestTenantQuotasThroughRouter: a tenant over its requests_per_second gets a 429 with
// Retry-After from the router (in each dialect's shape); another tenant is not slowed by it.
func TestTenantQuotasThroughRouter(t *testing.T) {
	ts, err := tenant.Parse([]byte(`tenants:
  - name: acme
    keys: ["` + tenant.HashKey("key-acme") + `"]
    quotas: {requests_per_second: 0.01, burst: 1}
  - name: globex
    keys: ["` + tenant.HashKey("key-globex") + `"]
`))
	if err != nil {
		t.Fatal(err)
	}
	_, url, stop := tenantReplica(t, ts, 16<<20, offload.Config{})
	t.Cleanup(stop)
	front := tenantRouter(t, ts, url)
	tenantComplete(t, front, "key-acme", "hello", "")
	body, _ := json.Marshal(map[string]any{"prompt": "hello", "max_tokens": 1})
	req, _ := http.NewRequest("POST", front+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer key-acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(out), "requests_per_second") {
		t.Errorf("acme over its rate: %d %s (Retry-After %q)", resp.StatusCode, out, resp.Header.Get("Retry-After"))
	}
	code, out := postKey(t, front+"/v1/messages", "key-acme", map[string]any{"max_tokens": 1, "messages": []map[string]any{{"role": "user", "content": "hi"}}})
	if code != 429 || !strings.HasPrefix(string(out), `{"type":"error","error":{"type":"rate_limit_error"`) {
		t.Errorf("acme over its rate on /v1/messages: %d %s", code, out)
	}
	for range 3 {
		tenantComplete(t, front, "key-globex", "hello", "") // not limited by acme's quota
	}
}
