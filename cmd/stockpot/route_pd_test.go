package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/handoff"
	"stockpot/internal/router"
)

// pdRouter is an in-process router over cfg's backends, with its own registry for /metrics.
func pdRouter(t *testing.T, mut func(*router.Config)) (*router.Router, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := router.DefaultConfig()
	cfg.HealthInterval = 50 * time.Millisecond
	cfg.Registerer, cfg.Gatherer = reg, reg
	mut(&cfg)
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	ts := httptest.NewServer(rt.Handler())
	t.Cleanup(ts.Close)
	return rt, ts.URL
}

// TestRoutePD: `route` orchestrating prefill/decode disaggregation over real in-process
// replicas (a prefill, a decode with the prefill as --prefill-peer, and a `both` replica as
// the reference answer):
//   - roles learned from /health; GET /backends and the dashboard state show them;
//   - completions and chat, greedy and seeded, whole and streamed, answer exactly as the
//     both replica does, by handoff (the decode's usage.cache.transfer_tokens > 0);
//   - a short prompt goes straight to the decode (short_tail);
//   - with the first prefill backend a closed port, the prefill is retried on the other and
//     the handoff succeeds;
//   - with every prefill down the answer still comes, computed by the decode.
func TestRoutePD(t *testing.T) {
	const model = "synthetic:tiny-llama-spm"
	closed := "http://" + freePort(t) // a port nobody listens on
	closed2 := "http://" + freePort(t)
	_, both := handoffInstance(t, model, handoff.RoleBoth)
	_, prefill := handoffInstance(t, model, handoff.RolePrefill)
	_, decode := handoffInstance(t, model, handoff.RoleDecode, closed, prefill)

	metrics := func(url string) map[string]float64 { return scrape(t, url) }
	pdPath := func(m map[string]float64, path string) float64 {
		return m[`stockpot_router_pd_requests_total{path="`+path+`"}`]
	}
	// text is a prompt of about 150 tokens that shares no block with another tag's.
	text := func(tag string) string {
		return tag + ": " + strings.Repeat("The stock simmers on the back of the stove; every cook takes a ladle. ", 8)
	}
	type tcase struct {
		name, path string
		body       map[string]any
	}
	cases := func(tag string) []tcase {
		return []tcase{
			{"completions greedy", "/v1/completions", map[string]any{"prompt": text(tag + " greedy"), "max_tokens": 10, "temperature": 0, "return_token_ids": true, "ignore_eos": true}},
			{"completions seeded", "/v1/completions", map[string]any{"prompt": text(tag + " seeded"), "max_tokens": 10, "temperature": 0.9, "top_p": 0.95, "seed": 11, "return_token_ids": true, "ignore_eos": true}},
			{"chat seeded", "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": text(tag + " chat")}}, "max_tokens": 10, "temperature": 0.7, "seed": 3, "return_token_ids": true, "ignore_eos": true}},
		}
	}
	// same checks that the router's answer to c is the both replica's; byTransfer: the decode's
	// usage says the prompt came by transfer (else: that nothing did).
	same := func(rurl string, c tcase, byTransfer bool) {
		t.Helper()
		want := generate(t, both, c.path, c.body)
		got := generate(t, rurl, c.path, c.body)
		if want.Status != 200 || got.Status != 200 {
			t.Fatalf("%s: both %d %s, router %d %s", c.name, want.Status, want.Body, got.Status, got.Body)
		}
		if got.Text != want.Text || fmt.Sprint(got.IDs) != fmt.Sprint(want.IDs) {
			t.Errorf("%s: through the router %q %v, one replica %q %v", c.name, got.Text, got.IDs, want.Text, want.IDs)
		}
		if tr := num(got.Cache, "transfer_tokens"); byTransfer != (tr > 0) {
			t.Errorf("%s: usage.cache %v, want transfer_tokens > 0: %v", c.name, got.Cache, byTransfer)
		}
	}
	streamed := func(rurl string, c tcase) {
		t.Helper()
		body := map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}}
		for k, v := range c.body {
			if k != "return_token_ids" {
				body[k] = v
			}
		}
		want := generate(t, both, c.path, c.body)
		if got := streamText(t, rurl+c.path, body); got != want.Text {
			t.Errorf("%s streamed: through the router %q, one replica %q", c.name, got, want.Text)
		}
	}

	t.Run("handoff", func(t *testing.T) {
		rt, rurl := pdRouter(t, func(c *router.Config) {
			c.Backends = []string{prefill, decode} // roles from /health
			c.PD.MinPrefillTokens = 48
		})
		roles := func() map[string]router.BackendStatus {
			out := map[string]router.BackendStatus{}
			for _, s := range rt.Backends() {
				out[s.URL] = s
			}
			return out
		}
		waitUntil(t, "roles from /health", func() bool {
			r := roles()
			return r[prefill].Role == router.RolePrefill && r[decode].Role == router.RoleDecode
		})
		if r := roles(); r[prefill].RoleFrom != "health" || r[prefill].Pool != "prefill" || r[decode].Pool != "decode" {
			t.Errorf("/backends: %+v %+v", r[prefill], r[decode])
		}
		for _, c := range cases("whole") {
			same(rurl, c, true)
		}
		for _, c := range cases("streamed") {
			streamed(rurl, c)
		}
		m := metrics(rurl)
		if pdPath(m, "handoff") != 6 || m[`stockpot_router_pd_prefill_seconds_count{outcome="ok"}`] != 6 {
			t.Errorf("handoffs counted %v (prefill hops %v), want 6", pdPath(m, "handoff"), m[`stockpot_router_pd_prefill_seconds_count{outcome="ok"}`])
		}
		// A short prompt skips the prefill.
		same(rurl, tcase{"short", "/v1/completions", map[string]any{"prompt": "A short one.", "max_tokens": 6, "temperature": 0, "ignore_eos": true}}, false)
		if m := metrics(rurl); pdPath(m, "short_tail") != 1 || pdPath(m, "handoff") != 6 {
			t.Errorf("short prompt: short_tail %v handoff %v, want 1 and 6", pdPath(m, "short_tail"), pdPath(m, "handoff"))
		}
		// The dashboard state names each backend's role and the handoff's decisions.
		resp, err := http.Get(rurl + "/dashboard/state")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st struct {
			Snapshot struct {
				Backends []struct{ URL, Role, Pool string }
			}
			Decisions []struct {
				Reason      string
				Transferred int `json:"transfer_tokens"`
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, b := range st.Snapshot.Backends {
			got[b.URL] = b.Role + "/" + b.Pool
		}
		if got[prefill] != "prefill/prefill" || got[decode] != "decode/decode" {
			t.Errorf("dashboard backends %v", got)
		}
		reasons := map[string]int{}
		for _, d := range st.Decisions {
			reasons[d.Reason]++
			if d.Reason == "decode-handoff" && d.Transferred == 0 {
				t.Errorf("a handoff decision with nothing transferred: %+v", d)
			}
		}
		if reasons["decode-handoff"] != 6 || reasons["decode-short-tail"] != 1 || reasons["prefill-fallback-affinity"]+reasons["prefill-cache"]+reasons["prefill-fallback-least-loaded"] != 6 {
			t.Errorf("dashboard decisions by reason %v", reasons)
		}
	})

	t.Run("prefill retried", func(t *testing.T) {
		_, rurl := pdRouter(t, func(c *router.Config) {
			c.PrefillBackends, c.DecodeBackends = []string{closed, prefill}, []string{decode}
			c.Policy = "round-robin"     // two requests: one of them picks the closed port first
			c.HealthInterval = time.Hour // keep the closed port a candidate until a request finds it
			c.PD.MinPrefillTokens = 48
		})
		for _, c := range cases("retry")[:2] {
			same(rurl, c, true)
		}
		m := metrics(rurl)
		if m["stockpot_router_pd_prefill_retries_total"] != 1 || m[`stockpot_router_pd_prefill_failures_total{reason="connect"}`] != 1 || pdPath(m, "handoff") != 2 {
			t.Errorf("retries %v, connect failures %v, handoffs %v, want 1, 1, 2", m["stockpot_router_pd_prefill_retries_total"],
				m[`stockpot_router_pd_prefill_failures_total{reason="connect"}`], pdPath(m, "handoff"))
		}
	})

	t.Run("every prefill down", func(t *testing.T) {
		_, rurl := pdRouter(t, func(c *router.Config) {
			c.PrefillBackends, c.DecodeBackends = []string{closed, closed2}, []string{decode}
			c.HealthInterval = time.Hour
			c.PD.MinPrefillTokens = 48
		})
		cs := cases("down")
		same(rurl, cs[0], false) // both prefills tried, the decode computes
		same(rurl, cs[2], false) // both marked down: no prefill pool
		m := metrics(rurl)
		if pdPath(m, "prefill_failed") != 1 || pdPath(m, "no_pools") != 1 || m["stockpot_router_pd_prefill_retries_total"] != 1 {
			t.Errorf("prefill_failed %v, no_pools %v, retries %v, want 1, 1, 1", pdPath(m, "prefill_failed"), pdPath(m, "no_pools"), m["stockpot_router_pd_prefill_retries_total"])
		}
	})
}
