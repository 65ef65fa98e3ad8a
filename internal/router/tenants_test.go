package router

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"stockpot/internal/tenant"
)

// headerBackend answers a canned completion and records each request's headers, and the
// binding a signed identity on it must verify for (method, target, body digest).
type headerBackend struct {
	*httptest.Server
	mu    sync.Mutex
	hdrs  []http.Header
	binds []tenant.Binding
}

func newHeaderBackend(t *testing.T) *headerBackend {
	t.Helper()
	hb := &headerBackend{}
	hb.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/health" {
			hb.mu.Lock()
			hb.hdrs = append(hb.hdrs, r.Header.Clone())
			hb.binds = append(hb.binds, tenant.Binding{Method: r.Method, Target: r.URL.RequestURI(), Body: tenant.BodyDigest(body)})
			hb.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, cannedCompletion)
	}))
	t.Cleanup(hb.Close)
	return hb
}

func (hb *headerBackend) last(t *testing.T) http.Header {
	t.Helper()
	hb.mu.Lock()
	defer hb.mu.Unlock()
	if len(hb.hdrs) == 0 {
		t.Fatal("the backend got no request")
	}
	return hb.hdrs[len(hb.hdrs)-1]
}

// lastBinding is the method, target and body digest of the last request.
func (hb *headerBackend) lastBinding() tenant.Binding {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.binds[len(hb.binds)-1]
}

func routerTenants(t *testing.T) *tenant.Set {
	t.Helper()
	s, err := tenant.Parse([]byte(`tenants:
  - name: acme
    keys: ["` + tenant.HashKey("key-a") + `"]
    public_reads: true
  - name: globex
    keys: ["` + tenant.HashKey("key-b") + `"]
    quotas: {requests_per_second: 0.001, burst: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const tenantCompletion = `{"model":"m","prompt":[1,2,3],"max_tokens":1}`

// TestRouterTenants: the router authenticates tenants itself, forwards a signed identity in
// place of the client's key (a client's own identity header never passes), and applies
// quotas with a 429 in the dialect's shape.
func TestRouterTenants(t *testing.T) {
	hb := newHeaderBackend(t)
	ts := routerTenants(t)
	_, url, _ := authRouter(t, func(c *Config) { c.Tenants, c.BackendKey = ts, "bk" }, hb.URL)
	for _, tc := range []struct {
		path   string
		hdr    []string
		status int
		want   string
	}{
		{"/v1/completions", nil, 401, `"authentication_error"`},
		{"/v1/completions", []string{"Authorization", "Bearer nope"}, 401, `"authentication_error"`},
		{"/v1/messages", []string{"X-Api-Key", "nope"}, 401, `{"type":"error","error":{"type":"authentication_error"`},
		// A client claiming an identity gets nothing for it.
		{"/v1/completions", []string{tenant.Header, tenant.Sign("bk", ts.Lookup("acme"), tenant.Binding{Method: "POST", Target: "/v1/completions", Body: tenant.BodyDigest([]byte(tenantCompletion))}, time.Now())}, 401, ""},
	} {
		code, body := call(t, "POST", url+tc.path, tenantCompletion, tc.hdr...)
		if code != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s %v: %d %s, want %d %s", tc.path, tc.hdr, code, body, tc.status, tc.want)
		}
	}
	forged := "v1 name=globex ns=globex pub=1 iat=0 nonce=00000000000000000000000000000000 sig=00"
	if code, body := call(t, "POST", url+"/v1/completions", tenantCompletion, "Authorization", "Bearer key-a", tenant.Header, forged); code != 200 {
		t.Fatalf("acme: %d %s", code, body)
	}
	h := hb.last(t)
	if got := h.Get("Authorization"); got != "Bearer bk" {
		t.Errorf("forwarded Authorization %q, want the backend key", got)
	}
	bind := hb.lastBinding()
	c, err := tenant.Verify("bk", h.Get(tenant.Header), bind, time.Now(), nil)
	if err != nil || c.Name != "acme" || c.Namespace != "acme" || !c.PublicReads {
		t.Errorf("forwarded identity %q: %+v %v, want acme's, signed", h.Get(tenant.Header), c, err)
	}
	// Bound to the request as the replica got it: method, path and body.
	if bind.Method != "POST" || bind.Target != "/v1/completions" || c.Body != bind.Body || bind.Body != tenant.BodyDigest([]byte(tenantCompletion)) {
		t.Errorf("forwarded identity signed for body %x, the replica got %+v", c.Body, bind)
	}
	if _, err := tenant.Verify("bk", h.Get(tenant.Header), tenant.RequestBinding("POST", "/v1/chat/completions"), time.Now(), nil); !errors.Is(err, tenant.ErrHeaderSignature) {
		t.Errorf("forwarded identity on another path: %v, want ErrHeaderSignature", err)
	}
	// A query travels with the path and is signed with it.
	if code, body := call(t, "POST", url+"/v1/completions?trace=1", tenantCompletion, "Authorization", "Bearer key-a"); code != 200 {
		t.Fatalf("acme with a query: %d %s", code, body)
	}
	bind = hb.lastBinding()
	if _, err := tenant.Verify("bk", hb.last(t).Get(tenant.Header), bind, time.Now(), nil); err != nil || bind.Target != "/v1/completions?trace=1" {
		t.Errorf("forwarded identity with a query (%+v): %v", bind, err)
	}
	if vs := h.Values(tenant.Header); len(vs) != 1 {
		t.Errorf("forwarded %d identity headers, want 1", len(vs))
	}
	// Quotas: globex has one request, then 429 with Retry-After, in each dialect's shape.
	if code, body := call(t, "POST", url+"/v1/completions", tenantCompletion, "Authorization", "Bearer key-b"); code != 200 {
		t.Fatalf("globex: %d %s", code, body)
	}
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"messages":[]}`))
	req.Header.Set("Authorization", "Bearer key-b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), `"rate_limit_exceeded"`) {
		t.Errorf("over quota: %d %s Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if code, body := call(t, "POST", url+"/v1/messages", `{}`, "X-Api-Key", "key-b"); code != 429 || !strings.Contains(body, `"rate_limit_error"`) || !strings.HasPrefix(body, `{"type":"error"`) {
		t.Errorf("messages over quota: %d %s", code, body)
	}
	// Non-generation routes take no slot.
	if code, _ := call(t, "POST", url+"/tokenize", `{"prompt":"x"}`, "Authorization", "Bearer key-b"); code != 200 {
		t.Errorf("tokenize over quota: %d", code)
	}
	// The dashboard names every tenant's traffic: with tenants and no admin key it is off.
	if code, _ := call(t, "GET", url+"/dashboard/state", "", "Authorization", "Bearer key-a"); code != 403 {
		t.Errorf("dashboard with a tenant's key: %d, want 403", code)
	}
}

// TestRouterDropsClientIdentity: without tenants the router passes clients' headers through,
// but never a tenant identity header: only the router signs one.
func TestRouterDropsClientIdentity(t *testing.T) {
	hb := newHeaderBackend(t)
	_, url, _ := authRouter(t, nil, hb.URL)
	if code, body := call(t, "POST", url+"/v1/completions", tenantCompletion, tenant.Header, tenant.Sign("guess", &tenant.Tenant{Name: "a", Namespace: "a"}, tenant.Binding{}, time.Now())); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if got := hb.last(t).Get(tenant.Header); got != "" {
		t.Errorf("the client's identity header reached the backend: %q", got)
	}
}

func TestRouterTenantsConfig(t *testing.T) {
	ts := routerTenants(t)
	for name, mod := range map[string]func(*Config){
		"no backend key": func(c *Config) { c.Tenants = ts },
		"with api keys":  func(c *Config) { c.Tenants, c.BackendKey, c.APIKeys = ts, "bk", []string{"k"} },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestRoutingByNamespace: the router hashes a tenant's prompt under the salt its replica
// derives, so two tenants' equal prompts, salts and sessions share no block hash and no
// affinity key.
func TestRoutingByNamespace(t *testing.T) {
	ts := routerTenants(t)
	a, b := ts.Lookup("acme"), ts.Lookup("globex")
	toks := make([]int32, 64)
	for i := range toks {
		toks[i] = int32(i)
	}
	ra := &Request{Tokens: toks, Salt: a.Salt("s"), Namespace: a.Salt(""), SessionID: "sess", CacheKey: ""}
	rb := &Request{Tokens: toks, Salt: b.Salt("s"), Namespace: b.Salt(""), SessionID: "sess"}
	ha, hb := ra.blockHashes([]byte("id"), 16), rb.blockHashes([]byte("id"), 16)
	seen := map[string]bool{}
	for _, h := range ha {
		seen[h.String()] = true
	}
	for _, h := range hb {
		if seen[h.String()] {
			t.Fatalf("tenants share block hash %s", h.Short())
		}
	}
	ka, _ := ra.affinityKey(256)
	kb, _ := rb.affinityKey(256)
	if ka == kb {
		t.Error("tenants' equal session ids give one affinity key")
	}
	legacy := &Request{Tokens: toks, Salt: "s"}
	if got, want := legacy.blockHashes([]byte("id"), 16)[0], (&Request{Tokens: toks, Salt: (*tenant.Tenant)(nil).Salt("s")}).blockHashes([]byte("id"), 16)[0]; got != want {
		t.Error("without tenants the salt changed")
	}
}

// TestStatusRecorderFlushes: the tenants' wrapper keeps streams flushing (and body deadlines
// settable) through http.ResponseController.
func TestStatusRecorderFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	if err := http.NewResponseController(&statusRecorder{ResponseWriter: rec}).Flush(); err != nil {
		t.Fatalf("Flush through the recorder: %v", err)
	}
	if !rec.Flushed {
		t.Fatal("the flush did not reach the writer")
	}
}

// TestRouterTenantStreams: a tenant's stream is relayed event by event: the first event
// reaches the client while the backend still holds the rest.
func TestRouterTenantStreams(t *testing.T) {
	release := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, okChunk)
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(backend.Close)
	_, url, _ := authRouter(t, func(c *Config) { c.Tenants, c.BackendKey = routerTenants(t), "bk" }, backend.URL)
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the router's cleanup (LIFO), which waits for the stream
	req, _ := http.NewRequest("POST", url+"/v1/completions", strings.NewReader(`{"prompt":[1,2],"stream":true}`))
	req.Header.Set("Authorization", "Bearer key-a")
	type firstEvent struct {
		resp *http.Response
		text string
		err  error
	}
	first := make(chan firstEvent, 1)
	go func() { // the headers, too, must come before the backend's end
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			first <- firstEvent{err: err}
			return
		}
		buf := make([]byte, len(okChunk))
		n, _ := io.ReadFull(resp.Body, buf)
		first <- firstEvent{resp: resp, text: string(buf[:n])}
	}()
	var resp *http.Response
	select {
	case got := <-first:
		if got.err != nil {
			t.Fatal(got.err)
		}
		resp = got.resp
		defer resp.Body.Close()
		if got.text != okChunk {
			t.Fatalf("first event %q, want %q", got.text, okChunk)
		}
	case <-time.After(3 * time.Minute):
		unblock()
		t.Fatal("the first event did not arrive before the stream ended: the router buffered it")
	}
	unblock()
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("rest of the stream: %q", rest)
	}
}
