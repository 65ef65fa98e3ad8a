package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/tenant"
)

func testTenants(t *testing.T, extra string) *tenant.Set {
	t.Helper()
	src := `tenants:
  - name: acme
    keys: ["` + tenant.HashKey("key-a") + `"]
    public_reads: true
  - name: globex
    keys: ["` + tenant.HashKey("key-b") + `"]
` + extra
	s, err := tenant.Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const completionBody = `{"model":"test-model","prompt":"hello","max_tokens":2}`

func completionWithSalt(salt string) string {
	b, _ := json.Marshal(salt)
	return `{"model":"test-model","prompt":"hello","max_tokens":2,"cache_salt":` + string(b) + `}`
}

// TestTenantAuthAndSalt: keys name tenants, the salt is derived from the tenant's namespace,
// and no cache_salt of one tenant reaches another's namespace.
func TestTenantAuthAndSalt(t *testing.T) {
	gen := newFakeGen("x")
	ts := testTenants(t, "")
	s, _ := newTestServer(t, gen, func(c *Config) { c.Tenants, c.BackendKey = ts, "bk" })
	h := s.Handler()
	for _, tc := range []struct {
		path, body string
		hdr        []string
		status     int
		errType    string
	}{
		{"/v1/completions", completionBody, nil, 401, `"authentication_error"`},
		{"/v1/completions", completionBody, []string{"Authorization", "Bearer nope"}, 401, `"authentication_error"`},
		{"/v1/messages", `{"model":"test-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, []string{"X-Api-Key", "nope"}, 401, `"type":"authentication_error"`},
		{"/v1/models", "", []string{"Authorization", "Bearer key-a"}, 200, ""},
		// The router's own key reads /tokenize but generates for nobody.
		{"/tokenize", `{"prompt":"hi"}`, []string{"Authorization", "Bearer bk"}, 200, ""},
		{"/v1/completions", completionBody, []string{"Authorization", "Bearer bk"}, 403, `"tenant_required"`},
		// The dashboard shows every tenant's requests: with tenants, only the admin key opens it.
		{"/dashboard/state", "", []string{"Authorization", "Bearer key-a"}, 403, `"permission_error"`},
	} {
		method := "POST"
		if tc.body == "" {
			method = "GET"
		}
		rec := do(h, method, tc.path, tc.body, tc.hdr...)
		if rec.Code != tc.status || !strings.Contains(rec.Body.String(), tc.errType) {
			t.Errorf("%s %v: %d %s, want %d %s", tc.path, tc.hdr, rec.Code, rec.Body, tc.status, tc.errType)
		}
	}
	// The block events are the router's alone: a tenant's key is forbidden there.
	events := s.RequireEventsKey(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	for hdr, status := range map[string]int{"Bearer key-a": 403, "Bearer bk": 200, "Bearer nope": 401, "": 401} {
		if rec := do(events, "GET", "/v1/kv-events", "", "Authorization", hdr); rec.Code != status {
			t.Errorf("kv-events %q: %d, want %d", hdr, rec.Code, status)
		}
	}
	acme, globex := ts.Lookup("acme"), ts.Lookup("globex")
	if rec := do(h, "POST", "/v1/completions", completionWithSalt("s1"), "Authorization", "Bearer key-a"); rec.Code != 200 {
		t.Fatalf("acme: %d %s", rec.Code, rec.Body)
	}
	if r := gen.lastRequest(); r.CacheSalt != acme.Salt("s1") || r.Tenant != "acme" || !r.PublicReads {
		t.Fatalf("acme's engine request: salt %q tenant %q public %v, want %q acme true", r.CacheSalt, r.Tenant, r.PublicReads, acme.Salt("s1"))
	}
	// globex tries to name acme's namespace with every salt it can think of.
	for _, try := range []string{"", "s1", acme.Salt("s1"), acme.Salt(""), "acme", tenant.PublicSalt(), "\x00stockpot/tenant\x00\x04\x00\x00\x00acmes1"} {
		if rec := do(h, "POST", "/v1/completions", completionWithSalt(try), "Authorization", "Bearer key-b"); rec.Code != 200 {
			t.Fatalf("globex salt %q: %d %s", try, rec.Code, rec.Body)
		}
		r := gen.lastRequest()
		if r.CacheSalt != globex.Salt(try) || r.Tenant != "globex" || r.PublicReads {
			t.Errorf("globex salt %q: engine salt %q tenant %q public %v", try, r.CacheSalt, r.Tenant, r.PublicReads)
		}
		for _, other := range []string{acme.Salt("s1"), acme.Salt(""), tenant.PublicSalt()} {
			if r.CacheSalt == other {
				t.Errorf("globex with cache_salt %q reached salt %q", try, other)
			}
		}
	}
}

// TestTenantForwardedIdentity: behind the router a request names its tenant in the signed
// header; an unsigned, forged, stale or replayed header is refused, never trusted.
func TestTenantForwardedIdentity(t *testing.T) {
	gen := newFakeGen("x")
	ts := testTenants(t, "")
	now := time.Unix(3_000_000, 0)
	s, _ := newTestServer(t, gen, func(c *Config) { c.Tenants, c.BackendKey, c.Now = ts, "bk", func() time.Time { return now } })
	h := s.Handler()
	acme := ts.Lookup("acme")
	// sign is the router's header for a POST of body to path.
	sign := func(key string, t *tenant.Tenant, path, body string, at time.Time) string {
		return tenant.Sign(key, t, tenant.Binding{Method: "POST", Target: path, Body: tenant.BodyDigest([]byte(body))}, at)
	}
	good := sign("bk", acme, "/v1/completions", completionWithSalt("s"), now)
	if rec := do(h, "POST", "/v1/completions", completionWithSalt("s"), tenant.Header, good); rec.Code != 200 {
		t.Fatalf("signed identity: %d %s", rec.Code, rec.Body)
	}
	if r := gen.lastRequest(); r.CacheSalt != acme.Salt("s") || r.Tenant != "acme" {
		t.Fatalf("signed identity: salt %q tenant %q", r.CacheSalt, r.Tenant)
	}
	stranger := &tenant.Tenant{Name: "initech", Namespace: "initech"}
	chat := `{"model":"test-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for name, tc := range map[string]struct {
		method, path, body string
		hdr                []string
		status             int
	}{
		"replayed":         {"POST", "/v1/completions", completionWithSalt("s"), []string{tenant.Header, good}, 401},
		"wrong key":        {"POST", "/v1/completions", completionBody, []string{tenant.Header, sign("guess", acme, "/v1/completions", completionBody, now)}, 401},
		"stale":            {"POST", "/v1/completions", completionBody, []string{tenant.Header, sign("bk", acme, "/v1/completions", completionBody, now.Add(-time.Minute))}, 401},
		"forged namespace": {"POST", "/v1/completions", completionBody, []string{tenant.Header, strings.Replace(sign("bk", acme, "/v1/completions", completionBody, now), "ns=acme", "ns=globex", 1)}, 401},
		// A client's own header is refused even with a good key beside it.
		"client header":  {"POST", "/v1/completions", completionBody, []string{"Authorization", "Bearer key-b", tenant.Header, "v2 name=acme ns=acme pub=1 iat=0 nonce=x body=y sig=z"}, 401},
		"unknown tenant": {"POST", "/v1/completions", completionBody, []string{tenant.Header, sign("bk", stranger, "/v1/completions", completionBody, now)}, 403},
		// The binding: a header signed for one request is refused on any other (each header
		// is fresh here, so the replay guard is not what refuses it).
		"other path":               {"POST", "/v1/chat/completions", completionBody, []string{tenant.Header, sign("bk", acme, "/v1/completions", completionBody, now)}, 401},
		"other query":              {"POST", "/v1/completions?x=1", completionBody, []string{tenant.Header, sign("bk", acme, "/v1/completions", completionBody, now)}, 401},
		"other method":             {"PUT", "/v1/completions", completionBody, []string{tenant.Header, sign("bk", acme, "/v1/completions", completionBody, now)}, 401},
		"other body":               {"POST", "/v1/completions", completionWithSalt("acme"), []string{tenant.Header, sign("bk", acme, "/v1/completions", completionBody, now)}, 401},
		"no body":                  {"POST", "/v1/completions", "", []string{tenant.Header, sign("bk", acme, "/v1/completions", completionBody, now)}, 401},
		"chat body on completions": {"POST", "/v1/completions", chat, []string{tenant.Header, sign("bk", acme, "/v1/chat/completions", chat, now)}, 401},
		// An old router's header says so.
		"v1 header": {"POST", "/v1/completions", completionBody, []string{tenant.Header, "v1 name=acme ns=acme pub=1 iat=0 nonce=00000000000000000000000000000000 sig=00"}, 401},
	} {
		rec := do(h, tc.method, tc.path, tc.body, tc.hdr...)
		if rec.Code != tc.status {
			t.Errorf("%s: %d %s, want %d", name, rec.Code, rec.Body, tc.status)
		}
		if tc.status == 401 && !strings.Contains(rec.Body.String(), `"authentication_error"`) && !strings.Contains(rec.Body.String(), `"invalid_api_key"`) {
			t.Errorf("%s: %s, want the API's 401 shape", name, rec.Body)
		}
	}
	if rec := do(h, "POST", "/v1/completions", completionBody, tenant.Header, "v1 name=acme ns=acme pub=1 iat=0 nonce=00000000000000000000000000000000 sig=00"); !strings.Contains(rec.Body.String(), "another version") {
		t.Errorf("v1 header: %s, want the version named", rec.Body)
	}
	if rec := do(h, "POST", "/v1/completions", completionWithSalt("acme"), tenant.Header, sign("bk", acme, "/v1/completions", completionBody, now)); !strings.Contains(rec.Body.String(), "body differs") {
		t.Errorf("other body: %s, want the body named", rec.Body)
	}
	// The same header on the Anthropic route is refused in Anthropic's shape.
	msg := `{"model":"test-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	if rec := do(h, "POST", "/v1/messages", msg, tenant.Header, sign("bk", acme, "/v1/messages", completionBody, now)); rec.Code != 401 || !strings.HasPrefix(rec.Body.String(), `{"type":"error"`) {
		t.Errorf("messages with another body: %d %s, want 401 in Anthropic's shape", rec.Code, rec.Body)
	}
	// Without --backend-key no header is trusted at all.
	s2, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.Tenants, c.Now = ts, func() time.Time { return now } })
	if rec := do(s2.Handler(), "POST", "/v1/completions", completionBody, tenant.Header, sign("", acme, "/v1/completions", completionBody, now)); rec.Code != 401 {
		t.Errorf("header without a backend key: %d, want 401", rec.Code)
	}
	// A replica without a tenants file takes the signed identity as it is.
	gen3 := newFakeGen("x")
	s3, _ := newTestServer(t, gen3, func(c *Config) { c.BackendKey, c.Now = "bk", func() time.Time { return now } })
	if rec := do(s3.Handler(), "POST", "/v1/completions", completionWithSalt("s"), tenant.Header, sign("bk", stranger, "/v1/completions", completionWithSalt("s"), now)); rec.Code != 200 {
		t.Fatalf("fileless replica: %d %s", rec.Code, rec.Body)
	}
	if r := gen3.lastRequest(); r.CacheSalt != stranger.Salt("s") {
		t.Errorf("fileless replica: salt %q, want %q", r.CacheSalt, stranger.Salt("s"))
	}
}

// TestTenantQuotas: a breached quota is a 429 with Retry-After, in each dialect's error
// shape, counted per tenant and quota.
func TestTenantQuotas(t *testing.T) {
	ts := testTenants(t, `  - name: slow
    keys: ["`+tenant.HashKey("key-slow")+`"]
    quotas: {requests_per_second: 0.5, burst: 1}
  - name: narrow
    keys: ["`+tenant.HashKey("key-narrow")+`"]
    quotas: {concurrent: 1}
`)
	now := time.Unix(4_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	gen := newFakeGen("x")
	s, reg := newTestServer(t, gen, func(c *Config) { c.Tenants, c.Now = ts, clock })
	h := s.Handler()
	slow := []string{"Authorization", "Bearer key-slow"}
	if rec := do(h, "POST", "/v1/completions", completionBody, slow...); rec.Code != 200 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	rec := do(h, "POST", "/v1/completions", completionBody, slow...)
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "2" {
		t.Fatalf("second: %d Retry-After %q, want 429 and 2", rec.Code, rec.Header().Get("Retry-After"))
	}
	if e := decode[api.ErrorBody](t, rec); e.Error.Code == nil || *e.Error.Code != "rate_limit_exceeded" || e.Error.Param == nil || *e.Error.Param != tenant.QuotaRate {
		t.Errorf("429 body: %s", rec.Body)
	}
	msgs := `{"model":"test-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	rec = do(h, "POST", "/v1/messages", msgs, "X-Api-Key", "key-slow")
	if rec.Code != 429 || !strings.Contains(rec.Body.String(), `"type":"rate_limit_error"`) || !strings.HasPrefix(rec.Body.String(), `{"type":"error"`) || rec.Header().Get("Retry-After") == "" {
		t.Errorf("messages 429: %d %s (Retry-After %q)", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	// Non-generation routes take no quota.
	if rec := do(h, "POST", "/tokenize", `{"prompt":"hi"}`, slow...); rec.Code != 200 {
		t.Errorf("tokenize under a spent rate: %d", rec.Code)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	if rec := do(h, "POST", "/v1/completions", completionBody, slow...); rec.Code != 200 {
		t.Errorf("after the refill: %d %s", rec.Code, rec.Body)
	}

	// Concurrency: one request held running, the next is refused until it ends.
	gen.block = true
	ctx, cancel := context.WithCancel(context.Background())
	held := httptest.NewRequest("POST", "/v1/completions", strings.NewReader(completionBody)).WithContext(ctx)
	held.Header.Set("Authorization", "Bearer key-narrow")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.ServeHTTP(httptest.NewRecorder(), held) }()
	for s.limiter.Running(ts.Lookup("narrow")) == 0 {
		time.Sleep(time.Millisecond)
	}
	rec = do(h, "POST", "/v1/chat/completions", `{"model":"test-model","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer key-narrow")
	if rec.Code != 429 || rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), `"concurrent"`) {
		t.Errorf("concurrent: %d %s Retry-After %q", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	cancel()
	wg.Wait()
	if n := s.limiter.Running(ts.Lookup("narrow")); n != 0 {
		t.Errorf("running after the request ended: %d", n)
	}
	if got := counterValueLabels(t, reg, "stockpot_tenant_quota_rejections_total", map[string]string{"tenant": "slow", "quota": "requests_per_second"}); got != 2 {
		t.Errorf("slow's rate rejections = %v, want 2", got)
	}
	if got := counterValueLabels(t, reg, "stockpot_tenant_quota_rejections_total", map[string]string{"tenant": "narrow", "quota": "concurrent"}); got != 1 {
		t.Errorf("narrow's concurrency rejections = %v, want 1", got)
	}
	if got := counterValueLabels(t, reg, "stockpot_tenant_requests_total", map[string]string{"tenant": "slow", "status": "200"}); got != 2 {
		t.Errorf("slow's requests = %v, want 2", got)
	}
	if got := counterValueLabels(t, reg, "stockpot_tenant_prompt_tokens_total", map[string]string{"tenant": "slow", "source": "computed"}); got <= 0 {
		t.Errorf("slow's computed tokens = %v, want > 0", got)
	}
}

// counterValueLabels returns the counter of name whose labels include want.
func counterValueLabels(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mf := gather(t, reg)[name]
	if mf == nil {
		return 0
	}
	for _, m := range mf.Metric {
		n := 0
		for _, lp := range m.Label {
			if want[lp.GetName()] == lp.GetValue() {
				n++
			}
		}
		if n == len(want) && m.Counter != nil {
			return m.Counter.GetValue()
		}
	}
	return 0
}

// TestPrewarmPublicAndTenant: prewarm's public marks public blocks in the public namespace,
// tenant computes in that tenant's.
func TestPrewarmPublicAndTenant(t *testing.T) {
	fa := &publicAdmin{fakeCacheAdmin: fakeCacheAdmin{poolBlocks: 8, blockSize: 16}}
	ts := testTenants(t, "")
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.Tenants, c.AdminKeys, c.CacheAdmin = ts, []string{"adm"}, fa })
	h := s.Handler()
	if rec := do(h, "POST", cachePrewarmPath, `{"prompt":"the tools preamble","public":true}`, "Authorization", adminAuth); rec.Code != 200 {
		t.Fatalf("public prewarm: %d %s", rec.Code, rec.Body)
	}
	if p := fa.prewarmed[0]; p.CacheSalt != tenant.PublicSalt() || fa.marked != tenant.PublicSalt() {
		t.Errorf("public prewarm: salt %q marked %q", p.CacheSalt, fa.marked)
	}
	if rec := do(h, "POST", cachePrewarmPath, `{"prompt":"x","tenant":"globex","cache_salt":"s"}`, "Authorization", adminAuth); rec.Code != 200 {
		t.Fatalf("tenant prewarm: %d %s", rec.Code, rec.Body)
	}
	if p := fa.prewarmed[1]; p.CacheSalt != ts.Lookup("globex").Salt("s") {
		t.Errorf("tenant prewarm: salt %q", p.CacheSalt)
	}
	for body, want := range map[string]string{
		`{"prompt":"x","tenant":"nobody"}`:              "no tenant",
		`{"prompt":"x","public":true,"cache_salt":"s"}`: "own namespace",
	} {
		if rec := do(h, "POST", cachePrewarmPath, body, "Authorization", adminAuth); rec.Code != 400 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d %s", body, rec.Code, rec.Body)
		}
	}
}

type publicAdmin struct {
	fakeCacheAdmin
	marked string
}

func (p *publicAdmin) MarkPublic(salt string, tokens []int32) (int, error) {
	p.marked = salt
	return len(tokens) / p.blockSize, nil
}

// TestResponsesPerTenant: previous_response_id finds only the tenant's own stored responses,
// so no tenant continues (and so reads) another's conversation.
func TestResponsesPerTenant(t *testing.T) {
	ts := testTenants(t, "")
	s, _ := newTestServer(t, newFakeGen("acme's secret answer"), func(c *Config) { agentConfig(c); c.Tenants = ts })
	h := s.Handler()
	rec := do(h, "POST", "/v1/responses", `{"input":"remember me","max_output_tokens":20}`, "Authorization", "Bearer key-a")
	if rec.Code != 200 {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	first := decode[api.Response](t, rec)
	next := `{"input":"and now?","max_output_tokens":20,"previous_response_id":"` + first.ID + `"}`
	if rec := do(h, "POST", "/v1/responses", next, "Authorization", "Bearer key-b"); rec.Code != 404 {
		t.Errorf("globex continued acme's response: %d %s", rec.Code, rec.Body)
	}
	if rec := do(h, "POST", "/v1/responses", next, "Authorization", "Bearer key-a"); rec.Code != 200 {
		t.Errorf("acme could not continue its own response: %d %s", rec.Code, rec.Body)
	}
}
