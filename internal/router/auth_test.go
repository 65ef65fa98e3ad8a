package router

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvevents"
	"stockpot/internal/syncbuf"
)

// seen is one request a recordingBackend received.
type seen struct {
	path, auth, xAPIKey string
}

// recordingBackend is a replica stand-in that records every request's path
// and credentials. With key set it refuses requests without "Bearer key"
// as `serve --api-key` does (401); /health is open either way unless
// guardHealth. It serves /health, /tokenize, a canned completion and a real
// kv-events stream and snapshot.
type recordingBackend struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newRecordingBackend(t *testing.T, key string, guardHealth bool) *recordingBackend {
	t.Helper()
	pub, err := kvevents.NewPublisher(kvevents.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	pub.SetIdentity("00", 16)
	rb := &recordingBackend{}
	rb.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rb.mu.Lock()
		rb.reqs = append(rb.reqs, seen{path: r.URL.Path, auth: r.Header.Get("Authorization"), xAPIKey: r.Header.Get("X-Api-Key")})
		rb.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		if key != "" && (r.URL.Path != "/health" || guardHealth) && r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":{"message":"bad key","type":"authentication_error"}}`, http.StatusUnauthorized)
			return
		}
		switch {
		case r.URL.Path == "/health":
		case strings.HasPrefix(r.URL.Path, "/v1/kv-events"):
			pub.Handler().ServeHTTP(w, r)
		case r.URL.Path == "/tokenize":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, cannedCompletion)
		}
	}))
	t.Cleanup(rb.Close)
	return rb
}

func (rb *recordingBackend) seen() []seen {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return append([]seen(nil), rb.reqs...)
}

// authRouter starts a router over backends with the given keys; its log
// goes to the returned buffer.
func authRouter(t *testing.T, mod func(*Config), backends ...string) (*Router, string, *syncbuf.Buffer) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Policy = "round-robin"
	cfg.Backends = backends
	cfg.HealthInterval = time.Hour
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	logs := &syncbuf.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	if mod != nil {
		mod(&cfg)
	}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(rt.Handler())
	t.Cleanup(func() { front.Close(); rt.Close() })
	return rt, front.URL, logs
}

// call does one request with headers (name, value pairs) and returns the
// status and body.
func call(t *testing.T, method, url, body string, hdr ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// wantAPIError checks body is an OpenAI error of type typ.
func wantAPIError(t *testing.T, what string, code, wantCode int, body, typ string) {
	t.Helper()
	var e struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
		} `json:"error"`
	}
	if code != wantCode || json.Unmarshal([]byte(body), &e) != nil || e.Error.Type != typ || e.Error.Message == "" {
		t.Fatalf("%s: HTTP %d %s; want %d with an OpenAI error of type %s", what, code, body, wantCode, typ)
	}
}

const (
	clientKey  = "client-key-c1"
	adminKey   = "admin-key-a1"
	backendKey = "backend-key-b1"
)

// TestTakeoverRefused: nobody without the admin key can list, add or
// remove backends; the refused attempts are logged without the keys; a
// client's request afterwards is served by the listed backend and the
// would-be attacker's server receives nothing at all.
func TestTakeoverRefused(t *testing.T) {
	good := newRecordingBackend(t, backendKey, false)
	attacker := newRecordingBackend(t, "", false)
	rt, front, logs := authRouter(t, func(c *Config) {
		c.APIKeys, c.AdminKeys, c.BackendKey = []string{clientKey}, []string{adminKey}, backendKey
	}, good.URL)
	goodID := rt.Backends()[0].ID
	takeover := `{"url":"` + attacker.URL + `"}`
	for _, cred := range [][]string{
		nil,
		{"Authorization", "Bearer " + clientKey}, // a client key is not an admin key
		{"Authorization", "Bearer wrong-admin-guess"},
		{"X-Api-Key", "wrong-admin-guess"},
		{"Authorization", "Basic " + adminKey}, // only Bearer carries a key
	} {
		// A key the router knows for something else is a 403, any other a 401.
		status, typ := 401, "authentication_error"
		if len(cred) == 2 && cred[1] == "Bearer "+clientKey {
			status, typ = 403, "permission_error"
		}
		code, body := call(t, "POST", front+"/backends", takeover, cred...)
		wantAPIError(t, "POST /backends "+strings.Join(cred, ": "), code, status, body, typ)
		code, body = call(t, "DELETE", front+"/backends/"+goodID, "", cred...)
		wantAPIError(t, "DELETE /backends", code, status, body, typ)
		code, body = call(t, "GET", front+"/backends", "", cred...)
		wantAPIError(t, "GET /backends", code, status, body, typ)
		if strings.Contains(body, good.URL) {
			t.Fatalf("refused GET /backends leaks the backend URL: %s", body)
		}
	}
	if bs := rt.Backends(); len(bs) != 1 || bs[0].ID != goodID {
		t.Fatalf("membership changed by refused calls: %+v", bs)
	}
	for i := range 3 {
		code, body := call(t, "POST", front+"/v1/completions", `{"prompt":"hi"}`, "Authorization", "Bearer "+clientKey)
		if code != 200 {
			t.Fatalf("client request %d: HTTP %d %s", i, code, body)
		}
	}
	if n := len(attacker.seen()); n != 0 {
		t.Fatalf("the attacker's server received %d requests: %+v", n, attacker.seen())
	}
	log := logs.String()
	for _, want := range []string{"membership call refused", "admin_key=missing", "admin_key=wrong", "remote=127.0.0.1"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	for _, secret := range []string{clientKey, adminKey, "wrong-admin-guess"} {
		if strings.Contains(log, secret) {
			t.Errorf("log holds a key (%s):\n%s", secret, log)
		}
	}

	// With the admin key, membership works and is logged as accepted.
	code, body := call(t, "GET", front+"/backends", "", "Authorization", "Bearer "+adminKey)
	if code != 200 || !strings.Contains(body, good.URL) {
		t.Fatalf("GET /backends with the admin key: HTTP %d %s", code, body)
	}
	other := newRecordingBackend(t, backendKey, false)
	code, body = call(t, "POST", front+"/backends", `{"url":"`+other.URL+`"}`, "X-Api-Key", adminKey)
	if code != http.StatusCreated {
		t.Fatalf("POST /backends with the admin key (x-api-key): HTTP %d %s", code, body)
	}
	var added struct{ ID string }
	_ = json.Unmarshal([]byte(body), &added)
	code, body = call(t, "DELETE", front+"/backends/"+added.ID, "", "Authorization", "Bearer "+adminKey)
	if code != http.StatusNoContent {
		t.Fatalf("DELETE /backends with the admin key: HTTP %d %s", code, body)
	}
	if log := logs.String(); !strings.Contains(log, "membership call accepted") || !strings.Contains(log, "admin_key=matched") {
		t.Errorf("accepted changes not logged:\n%s", log)
	}
}

// TestMembershipOffWithoutAdminKey: a router started without --admin-key
// refuses every /backends call with a 403 that says what is missing.
func TestMembershipOffWithoutAdminKey(t *testing.T) {
	good := newRecordingBackend(t, "", false)
	attacker := newRecordingBackend(t, "", false)
	rt, front, logs := authRouter(t, nil, good.URL)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/backends", `{"url":"` + attacker.URL + `"}`},
		{"DELETE", "/backends/" + rt.Backends()[0].ID, ""},
		{"GET", "/backends", ""},
	} {
		code, body := call(t, c.method, front+c.path, c.body, "Authorization", "Bearer anything")
		wantAPIError(t, c.method+" "+c.path, code, http.StatusForbidden, body, "permission_error")
		if !strings.Contains(body, "--admin-key") {
			t.Fatalf("%s %s: the 403 does not name --admin-key: %s", c.method, c.path, body)
		}
	}
	if len(rt.Backends()) != 1 || len(attacker.seen()) != 0 {
		t.Fatalf("membership changed: %+v; attacker saw %d requests", rt.Backends(), len(attacker.seen()))
	}
	if !strings.Contains(logs.String(), "admin_key=not-configured") {
		t.Errorf("refusal not logged:\n%s", logs.String())
	}
}

// TestForwardReplacesClientKey: a router that checks client keys forwards
// the backend key in their place (or nothing), whichever header the client
// used; a router without client keys passes the client's header through.
func TestForwardReplacesClientKey(t *testing.T) {
	for _, c := range []struct {
		name               string
		apiKeys            []string
		backendKey         string
		hdr                []string
		wantCode           int
		wantAuth, wantXKey string
	}{
		{"bearer", []string{clientKey}, backendKey, []string{"Authorization", "Bearer " + clientKey}, 200, "Bearer " + backendKey, ""},
		{"x-api-key", []string{clientKey}, backendKey, []string{"X-Api-Key", clientKey}, 200, "Bearer " + backendKey, ""},
		{"second key", []string{"other", clientKey}, backendKey, []string{"Authorization", "bearer " + clientKey}, 200, "Bearer " + backendKey, ""},
		{"no backend key", []string{clientKey}, "", []string{"Authorization", "Bearer " + clientKey}, 200, "", ""},
		{"wrong key", []string{clientKey}, backendKey, []string{"Authorization", "Bearer nope"}, 401, "", ""},
		{"no key", []string{clientKey}, backendKey, nil, 401, "", ""},
		{"transparent", nil, backendKey, []string{"Authorization", "Bearer passed-through"}, 200, "Bearer passed-through", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			be := newRecordingBackend(t, "", false)
			_, front, _ := authRouter(t, func(cfg *Config) { cfg.APIKeys, cfg.BackendKey = c.apiKeys, c.backendKey }, be.URL)
			for _, path := range []string{"/v1/completions", "/v1/chat/completions", "/tokenize", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"} {
				code, body := call(t, "POST", front+path, `{"prompt":"hi"}`, c.hdr...)
				if code != c.wantCode {
					t.Fatalf("%s: HTTP %d %s, want %d", path, code, body, c.wantCode)
				}
				if code == 401 {
					wantAPIError(t, path, code, 401, body, "authentication_error")
				}
			}
			fwd := 0
			for _, s := range be.seen() {
				if s.path == "/health" {
					continue
				}
				fwd++
				if s.auth != c.wantAuth || s.xAPIKey != c.wantXKey {
					t.Errorf("backend got %s with Authorization %q, x-api-key %q; want %q, %q", s.path, s.auth, s.xAPIKey, c.wantAuth, c.wantXKey)
				}
				if c.apiKeys != nil && (strings.Contains(s.auth, clientKey) || strings.Contains(s.xAPIKey, clientKey)) {
					t.Errorf("the client's key reached the backend on %s", s.path)
				}
			}
			if want := map[int]int{200: 6, 401: 0}[c.wantCode]; fwd != want {
				t.Errorf("backend got %d forwarded requests, want %d", fwd, want)
			}
		})
	}
}

// TestOwnCallsCarryBackendKey: the router's health checks, /tokenize (the
// prefix policy's) and kv-events subscription (stream and snapshot) carry
// the backend key, so they work behind a replica's --api-key.
func TestOwnCallsCarryBackendKey(t *testing.T) {
	be := newRecordingBackend(t, backendKey, true)
	on := true
	rt, front, _ := authRouter(t, func(c *Config) {
		c.Policy, c.Events = "prefix", &on
		c.HealthInterval = 20 * time.Millisecond
		c.APIKeys, c.BackendKey = []string{clientKey}, backendKey
	}, be.URL)
	waitUntil(t, "the event stream to sync", func() bool {
		ev := rt.Backends()[0].Events
		return ev != nil && ev.Synced
	})
	code, body := call(t, "POST", front+"/v1/completions", `{"prompt":"a prompt the prefix policy tokenizes"}`, "Authorization", "Bearer "+clientKey)
	if code != 200 {
		t.Fatalf("HTTP %d %s", code, body)
	}
	paths := map[string]bool{}
	for _, s := range be.seen() {
		paths[s.path] = true
		if s.auth != "Bearer "+backendKey {
			t.Errorf("%s reached the backend with Authorization %q", s.path, s.auth)
		}
	}
	for _, p := range []string{"/health", "/tokenize", "/v1/kv-events", "/v1/kv-events/snapshot", "/v1/completions"} {
		if !paths[p] {
			t.Errorf("the router never called %s (saw %v)", p, paths)
		}
	}
	if st := rt.Backends()[0]; st.State != "healthy" {
		t.Errorf("backend %s behind --api-key: health checks fail (%s)", st.State, st.LastError)
	}
}

// TestMetricsKey: with a metrics key /metrics needs it (or the admin key),
// and a client key gets a 403; /health is always open.
func TestMetricsKey(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	_, front, _ := authRouter(t, func(c *Config) {
		c.APIKeys, c.AdminKeys, c.MetricsKeys = []string{clientKey}, []string{adminKey}, []string{"metrics-key"}
	}, be.URL)
	code, body := call(t, "GET", front+"/metrics", "")
	wantAPIError(t, "GET /metrics without a key", code, 401, body, "authentication_error")
	code, body = call(t, "GET", front+"/metrics", "", "Authorization", "Bearer "+clientKey)
	wantAPIError(t, "GET /metrics with a client key", code, 403, body, "permission_error")
	for _, k := range []string{"metrics-key", adminKey} {
		if code, body := call(t, "GET", front+"/metrics", "", "Authorization", "Bearer "+k); code != 200 ||
			!strings.Contains(body, `stockpot_router_unauthorized_total{scope="metrics"} 2`) {
			t.Fatalf("GET /metrics with %s: HTTP %d (want 200 and 2 refusals counted)", k, code)
		}
	}
	if code, _ := call(t, "GET", front+"/health", ""); code != 200 {
		t.Fatalf("/health: HTTP %d", code)
	}
	// With keys but no metrics or admin key, /metrics is closed (403 naming the flags), unless
	// it is public on purpose; with no key of any kind it is open.
	_, closed, _ := authRouter(t, func(c *Config) { c.APIKeys = []string{clientKey} }, be.URL)
	code, body = call(t, "GET", closed+"/metrics", "")
	wantAPIError(t, "GET /metrics with client keys only", code, 403, body, "permission_error")
	_, public, _ := authRouter(t, func(c *Config) { c.APIKeys, c.PublicMetrics = []string{clientKey}, true }, be.URL)
	_, open, _ := authRouter(t, nil, be.URL)
	for _, u := range []string{public, open} {
		if code, _ := call(t, "GET", u+"/metrics", ""); code != 200 {
			t.Fatalf("/metrics (public or no keys): HTTP %d, want open", code)
		}
	}
}

// TestRouterEndpointKeys: the dashboard takes its own key or the admin key, a
// client key gets a 403 there, and with no key of any kind it is open.
func TestRouterEndpointKeys(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	_, front, _ := authRouter(t, func(c *Config) {
		c.APIKeys, c.AdminKeys, c.DashboardKeys = []string{clientKey}, []string{adminKey}, []string{"dash-key"}
	}, be.URL)
	for _, tc := range []struct {
		path, key string
		want      int
	}{
		{"/dashboard/state", "", 401}, {"/dashboard/state", "nope", 401}, {"/dashboard/state", clientKey, 403},
		{"/dashboard/state", "dash-key", 200}, {"/dashboard/state", adminKey, 200}, {"/dashboard/state?key=dash-key", "", 200},
		{"/backends", "dash-key", 403}, {"/v1/cache", clientKey, 403}, {"/metrics", "dash-key", 403}, {"/metrics", "nope", 401},
	} {
		var hdr []string
		if tc.key != "" {
			hdr = []string{"Authorization", "Bearer " + tc.key}
		}
		if code, body := call(t, "GET", front+tc.path, "", hdr...); code != tc.want {
			t.Errorf("GET %s with %q: HTTP %d, want %d (%s)", tc.path, tc.key, code, tc.want, body)
		}
	}
	_, closed, _ := authRouter(t, func(c *Config) { c.APIKeys = []string{clientKey} }, be.URL)
	if code, _ := call(t, "GET", closed+"/dashboard/state", "", "Authorization", "Bearer "+clientKey); code != 403 {
		t.Errorf("dashboard with client keys only: HTTP %d, want 403", code)
	}
	_, open, _ := authRouter(t, nil, be.URL)
	if code, _ := call(t, "GET", open+"/dashboard/state", ""); code != 200 {
		t.Errorf("dashboard without keys: HTTP %d, want 200", code)
	}
}

// TestJSONRouteErrors: unknown routes and wrong methods get the API's JSON
// 404 and 405, not the mux's plain text.
func TestJSONRouteErrors(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	_, front, _ := authRouter(t, nil, be.URL)
	code, body := call(t, "GET", front+"/nope", "")
	wantAPIError(t, "GET /nope", code, 404, body, "not_found_error")
	code, body = call(t, "GET", front+"/v1/completions", "")
	wantAPIError(t, "GET /v1/completions", code, 405, body, "invalid_request_error")
	code, body = call(t, "PUT", front+"/backends/x", "")
	wantAPIError(t, "PUT /backends/x", code, 405, body, "invalid_request_error")
}
