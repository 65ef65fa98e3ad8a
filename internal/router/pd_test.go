package router

import (
	"bytes"
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

// TestSplitPools: dedicated backends make the pools; a both backend stands in for a pool only
// while it has no dedicated member; with no dedicated member at all there is nothing to
// disaggregate.
func TestSplitPools(t *testing.T) {
	mk := func(role Role) *Backend {
		b, _ := newBackend("http://" + string(role) + ".example:1")
		if role != "" {
			b.fixedRole.Store(&role)
		}
		return b
	}
	p, d, both := mk(RolePrefill), mk(RoleDecode), mk(RoleBoth)
	for _, tc := range []struct {
		name      string
		cands     []*Backend
		pre, dec  []*Backend
		dedicated bool
	}{
		{"dedicated pools", []*Backend{p, d, both}, []*Backend{p}, []*Backend{d}, true},
		{"no decode: both decodes", []*Backend{p, both}, []*Backend{p}, []*Backend{both}, true},
		{"no prefill: both prefills", []*Backend{d, both}, []*Backend{both}, []*Backend{d}, true},
		{"only both", []*Backend{both}, []*Backend{both}, []*Backend{both}, false},
		{"prefill alone", []*Backend{p}, []*Backend{p}, nil, true},
	} {
		pre, dec, ded := splitPools(tc.cands)
		if !sameBackends(pre, tc.pre) || !sameBackends(dec, tc.dec) || ded != tc.dedicated {
			t.Errorf("%s: prefill %v decode %v dedicated %v, want %v %v %v", tc.name, ids(pre), ids(dec), ded, ids(tc.pre), ids(tc.dec), tc.dedicated)
		}
	}
}

func sameBackends(a, b []*Backend) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func ids(bs []*Backend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.URL.Host)
	}
	return out
}

// pdStub is a stand-in replica of a role for the orchestration's failure classes a real replica
// does not produce (a 5xx, an answer without params, a hang): it records what it was sent.
type pdStub struct {
	*httptest.Server
	role   string
	answer func(w http.ResponseWriter, body map[string]json.RawMessage) // nil: as a stockpot replica
	mu     sync.Mutex
	got    []map[string]json.RawMessage
	hdrs   []http.Header
}

var stubKV = `{"do_remote_prefill":true,"remote_host":"127.0.0.1","remote_port":1,"remote_request_id":"xfer-stub","remote_block_ids":[0,1],"stockpot_first_token":7}`

func newPDStub(t *testing.T, role string, answer func(http.ResponseWriter, map[string]json.RawMessage)) *pdStub {
	s := &pdStub{role: role, answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			io.WriteString(w, `{"status":"ok","role":"`+s.role+`"}`)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var body map[string]json.RawMessage
		_ = json.Unmarshal(raw, &body)
		s.mu.Lock()
		s.got, s.hdrs = append(s.got, body), append(s.hdrs, r.Header.Clone())
		s.mu.Unlock()
		if s.answer != nil {
			s.answer(w, body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		out := map[string]any{"role": s.role, "usage": map[string]any{"prompt_tokens": 3}}
		if _, ok := body["kv_transfer_params"]; ok && s.role == "prefill" {
			out["kv_transfer_params"] = json.RawMessage(stubKV)
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *pdStub) requests() []map[string]json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]json.RawMessage(nil), s.got...)
}

func newPDRouter(t *testing.T, mut func(*Config)) (*Router, *httptest.Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Policy = "round-robin"
	cfg.HealthInterval = 20 * time.Millisecond
	cfg.Registerer, cfg.Gatherer = reg, reg
	mut(&cfg)
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	ts := httptest.NewServer(rt.Handler())
	t.Cleanup(ts.Close)
	return rt, ts, reg
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func tokenPrompt(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i % 50
	}
	return p
}

func postJSON(t *testing.T, url string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	code, out, _ := postJSONHeader(t, url, body, hdr...)
	return code, out
}

func postJSONHeader(t *testing.T, url string, body any, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out, resp.Header
}

// TestPDRolesFromHealth: /health's role makes the pools, GET /backends shows each backend's
// role, where it came from and its pool; a role given by flag holds against what /health says;
// POST /backends takes a role and refuses an unknown one with a 400 naming the field.
func TestPDRolesFromHealth(t *testing.T) {
	p, d, b := newPDStub(t, "prefill", nil), newPDStub(t, "decode", nil), newPDStub(t, "both", nil)
	rt, ts, _ := newPDRouter(t, func(c *Config) {
		c.Backends = []string{p.URL, d.URL}
		c.DecodeBackends = []string{b.URL} // reports both; the flag holds
		c.AdminKeys = []string{"adm"}
	})
	byURL := func() map[string]BackendStatus {
		out := map[string]BackendStatus{}
		for _, s := range rt.Backends() {
			out[s.URL] = s
		}
		return out
	}
	waitFor(t, "roles from /health", func() bool { return byURL()[p.URL].RoleFrom == "health" && byURL()[b.URL].ReportedRole != "" })
	st := byURL()
	for _, c := range []struct {
		url             string
		role            Role
		from, pool, rep string
	}{{p.URL, RolePrefill, "health", "prefill", ""}, {d.URL, RoleDecode, "health", "decode", ""}, {b.URL, RoleDecode, "flag", "decode", "both"}} {
		if s := st[c.url]; s.Role != c.role || s.RoleFrom != c.from || s.Pool != c.pool || string(s.ReportedRole) != c.rep {
			t.Errorf("%s: role %q from %q pool %q reported %q, want %q %q %q %q", c.url, s.Role, s.RoleFrom, s.Pool, s.ReportedRole, c.role, c.from, c.pool, c.rep)
		}
	}
	code, out := postJSON(t, ts.URL+"/backends", map[string]string{"url": "http://127.0.0.1:9", "role": "prefil"}, "Authorization", "Bearer adm")
	var e struct {
		Error struct{ Param string } `json:"error"`
	}
	_ = json.Unmarshal(out, &e)
	if code != 400 || e.Error.Param != "role" {
		t.Errorf("POST /backends with role prefil: %d %s, want 400 naming role", code, out)
	}
	code, out = postJSON(t, ts.URL+"/backends", map[string]string{"url": "http://127.0.0.1:9", "role": "prefill"}, "Authorization", "Bearer adm")
	if code != 201 || byURL()["http://127.0.0.1:9"].Role != RolePrefill {
		t.Errorf("POST /backends with role prefill: %d %s, role %q", code, out, byURL()["http://127.0.0.1:9"].Role)
	}
	// Ordinary endpoints go to the decode pool.
	for range 3 {
		if code, out := postJSON(t, ts.URL+"/v1/messages", map[string]any{"max_tokens": 1}); code != 200 || strings.Contains(string(out), `"role":"prefill"`) {
			t.Errorf("/v1/messages while disaggregating: %d %s, want the decode's answer", code, out)
		}
	}
}

// TestPDOrchestration: what the router sends each hop, and every failure class of the prefill.
func TestPDOrchestration(t *testing.T) {
	count := func(reg *prometheus.Registry, name string, labels ...string) float64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		metric:
			for _, m := range mf.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, lp := range m.GetLabel() {
						found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
					}
					if !found {
						continue metric
					}
				}
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return float64(m.Histogram.GetSampleCount())
			}
		}
		return 0
	}
	long := map[string]any{"prompt": tokenPrompt(300), "max_tokens": 5, "stream_options": map[string]any{"include_usage": true},
		"min_tokens": 2, "temperature": 0}

	t.Run("handoff", func(t *testing.T) {
		p, d := newPDStub(t, "prefill", nil), newPDStub(t, "decode", nil)
		rt, ts, reg := newPDRouter(t, func(c *Config) { c.PrefillBackends, c.DecodeBackends = []string{p.URL}, []string{d.URL} })
		code, out, hdr := postJSONHeader(t, ts.URL+"/v1/completions", long, "Authorization", "Bearer client-key", "X-Request-Id", "r1")
		if code != 200 || !strings.Contains(string(out), `"role":"decode"`) {
			t.Fatalf("handoff: %d %s", code, out)
		}
		id := map[string]string{}
		for _, st := range rt.Backends() {
			id[st.URL] = st.ID
		}
		if hdr.Get("X-Stockpot-Backend") != id[d.URL] || hdr.Get("X-Stockpot-Prefill-Backend") != id[p.URL] {
			t.Errorf("answer headers: backend %q, prefill backend %q, want %q and %q", hdr.Get("X-Stockpot-Backend"), hdr.Get("X-Stockpot-Prefill-Backend"), id[d.URL], id[p.URL])
		}
		pr, dr := p.requests(), d.requests()
		if len(pr) != 1 || len(dr) != 1 {
			t.Fatalf("prefill got %d requests, decode %d, want 1 each", len(pr), len(dr))
		}
		if string(pr[0]["max_tokens"]) != "1" || string(pr[0]["stream"]) != "false" || pr[0]["stream_options"] != nil || pr[0]["min_tokens"] != nil ||
			!strings.Contains(string(pr[0]["kv_transfer_params"]), `"do_remote_decode":true`) {
			t.Errorf("prefill request: %v", pr[0])
		}
		if string(dr[0]["kv_transfer_params"]) != stubKV || string(dr[0]["max_tokens"]) != "5" || string(dr[0]["min_tokens"]) != "2" || dr[0]["stream_options"] == nil {
			t.Errorf("decode request: %v", dr[0])
		}
		for i, h := range []http.Header{p.hdrs[0], d.hdrs[0]} {
			if h.Get("Authorization") != "Bearer client-key" || h.Get("X-Request-Id") != "r1" {
				t.Errorf("hop %d headers %v: the client's pass through as on any forwarded request", i, h)
			}
		}
		if count(reg, "stockpot_router_pd_requests_total", "path", "handoff") != 1 || count(reg, "stockpot_router_pd_prefill_seconds", "outcome", "ok") != 1 {
			t.Errorf("handoff not counted")
		}
		// A short prompt goes straight to the decode.
		if code, _ := postJSON(t, ts.URL+"/v1/completions", map[string]any{"prompt": tokenPrompt(10), "max_tokens": 1}); code != 200 ||
			len(p.requests()) != 1 || len(d.requests()) != 2 || count(reg, "stockpot_router_pd_requests_total", "path", "short_tail") != 1 {
			t.Errorf("short prompt: %d, prefill %d requests, decode %d", code, len(p.requests()), len(d.requests()))
		}
		// A request with the client's own kv_transfer_params is routed as it is.
		own := map[string]any{"prompt": tokenPrompt(300), "kv_transfer_params": map[string]any{"do_remote_prefill": true}}
		if code, _ := postJSON(t, ts.URL+"/v1/completions", own); code != 200 || count(reg, "stockpot_router_pd_requests_total", "path", "client_params") != 1 {
			t.Errorf("client params: %d", code)
		}
	})

	t.Run("failures", func(t *testing.T) {
		fail5xx := newPDStub(t, "prefill", func(w http.ResponseWriter, _ map[string]json.RawMessage) {
			http.Error(w, `{"error":{"message":"boom"}}`, 503)
		})
		noParams := newPDStub(t, "prefill", func(w http.ResponseWriter, _ map[string]json.RawMessage) { io.WriteString(w, `{"choices":[]}`) })
		d := newPDStub(t, "decode", nil)
		_, ts, reg := newPDRouter(t, func(c *Config) {
			c.PrefillBackends, c.DecodeBackends = []string{fail5xx.URL, noParams.URL}, []string{d.URL}
			c.Outlier.Consecutive = -1
		})
		code, out := postJSON(t, ts.URL+"/v1/completions", long)
		if code != 200 || !strings.Contains(string(out), `"role":"decode"`) {
			t.Fatalf("every prefill failing: %d %s, want the decode's answer", code, out)
		}
		if dr := d.requests(); len(dr) != 1 || dr[0]["kv_transfer_params"] != nil || string(dr[0]["max_tokens"]) != "5" {
			t.Errorf("decode request after failed prefills: %v, want the client's body unchanged", dr)
		}
		for _, c := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"stockpot_router_pd_prefill_failures_total", []string{"reason", "5xx"}, 1},
			{"stockpot_router_pd_prefill_failures_total", []string{"reason", "no_params"}, 1},
			{"stockpot_router_pd_prefill_retries_total", nil, 1},
			{"stockpot_router_pd_requests_total", []string{"path", "prefill_failed"}, 1},
			{"stockpot_router_pd_prefill_seconds", []string{"outcome", "failed"}, 1},
		} {
			if got := count(reg, c.name, c.labels...); got != c.want {
				t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
			}
		}
	})

	t.Run("refused and timeout", func(t *testing.T) {
		refuse := newPDStub(t, "prefill", func(w http.ResponseWriter, _ map[string]json.RawMessage) {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"message":"no"}}`)
		})
		d := newPDStub(t, "decode", nil)
		_, ts, reg := newPDRouter(t, func(c *Config) { c.PrefillBackends, c.DecodeBackends = []string{refuse.URL}, []string{d.URL} })
		if code, _ := postJSON(t, ts.URL+"/v1/completions", long); code != 200 || count(reg, "stockpot_router_pd_requests_total", "path", "prefill_refused") != 1 ||
			count(reg, "stockpot_router_pd_prefill_retries_total") != 0 {
			t.Errorf("refused prefill: %d, want the decode's answer, counted, not retried", code)
		}

		release := make(chan struct{})
		hang := newPDStub(t, "prefill", func(w http.ResponseWriter, _ map[string]json.RawMessage) { <-release })
		t.Cleanup(func() { close(release) }) // before the stub's Close, which waits for its handlers
		_, ts2, reg2 := newPDRouter(t, func(c *Config) {
			c.PrefillBackends, c.DecodeBackends = []string{hang.URL}, []string{d.URL}
			c.PD.PrefillTimeout = 300 * time.Millisecond
		})
		if code, _ := postJSON(t, ts2.URL+"/v1/completions", long); code != 200 ||
			count(reg2, "stockpot_router_pd_prefill_failures_total", "reason", "timeout") != 1 || count(reg2, "stockpot_router_pd_requests_total", "path", "prefill_failed") != 1 {
			t.Errorf("hanging prefill: %d, want the decode's answer after the timeout, counted", code)
		}
	})

	t.Run("no pools", func(t *testing.T) {
		p := newPDStub(t, "prefill", nil)
		_, ts, reg := newPDRouter(t, func(c *Config) { c.PrefillBackends = []string{p.URL} })
		// No decode at all: the prefill answers as an ordinary replica.
		if code, out := postJSON(t, ts.URL+"/v1/completions", long); code != 200 || count(reg, "stockpot_router_pd_requests_total", "path", "no_pools") != 1 ||
			p.requests()[0]["kv_transfer_params"] != nil {
			t.Errorf("no decode pool: %d %s", code, out)
		}
	})
}
