package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pathHits counts a stub's requests by kind.
type pathHits struct{ completions, tokenize, other atomic.Int64 }

func (h *pathHits) count(path string) {
	switch path {
	case "/health":
	case "/v1/completions":
		h.completions.Add(1)
	case "/tokenize":
		h.tokenize.Add(1)
	default:
		h.other.Add(1)
	}
}

func (h *pathHits) total() int64 { return h.completions.Load() + h.tokenize.Load() + h.other.Load() }

// Passive health end to end: beside a good backend, one whose every answer is a 503 (its
// /health too, but health checks run once an hour here: only passive health can act). With
// prefix routing of text prompts the router asks a backend's /tokenize for each new prompt
// and routes by its tokens, so both calls reach the bad one until it is ejected. After
// Consecutive failures it gets nothing more, neither routed requests nor /tokenize, every
// client answer is the good backend's 200, and the ejection shows in the metrics and in
// GET /backends. Which backend each call picks first is random (least-loaded ties) and
// rendezvous by prompt; the assertions hold for every order.
func TestPassiveHealthEjectsFailingBackend(t *testing.T) {
	var badHits, goodHits pathHits
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		badHits.count(r.URL.Path)
		_, _ = io.Copy(io.Discard, r.Body)
		http.Error(w, `{"error":{"message":"engine down"}}`, http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		goodHits.count(r.URL.Path)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/health":
			io.WriteString(w, `{"status":"ok"}`)
		case "/tokenize":
			io.WriteString(w, `{"tokens":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}`)
		default:
			io.WriteString(w, cannedCompletion)
		}
	}))
	defer good.Close()

	const threshold = 3
	cfg := DefaultConfig()
	cfg.Policy = "prefix"
	cfg.Backends = []string{bad.URL, good.URL}
	cfg.HealthInterval = time.Hour
	cfg.Outlier.Consecutive, cfg.Outlier.BaseEjection = threshold, time.Hour
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	front := httptest.NewServer(rt.Handler())
	defer front.Close()
	badID := ""
	for _, b := range rt.Backends() {
		if b.URL == bad.URL {
			badID = b.ID
		}
	}

	send := func(i int) {
		t.Helper()
		body := fmt.Sprintf(`{"prompt":"prompt number %d, new bytes each time"}`, i)
		resp, err := http.Post(front.URL+"/v1/completions", "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Stockpot-Backend") == badID {
			t.Fatalf("request %d: %d from %s: %s", i, resp.StatusCode, resp.Header.Get("X-Stockpot-Backend"), rb)
		}
	}
	// A request fails at most twice on the bad backend (its /tokenize, its completion), and
	// each call goes there with odds about 1/2: keep going until it has failed threshold
	// times (64 requests short of that: odds below 2^-50).
	i := 0
	for ; i < 64 && badHits.total() < threshold; i++ {
		send(i)
	}
	if got := badHits.total(); got != threshold {
		t.Fatalf("the bad backend saw %d requests after %d client requests, want exactly %d (the threshold)", got, i, threshold)
	}
	completions, tokenize := badHits.completions.Load(), badHits.tokenize.Load()
	for j := range 40 {
		send(i + j)
	}
	if badHits.completions.Load() != completions || badHits.tokenize.Load() != tokenize || badHits.other.Load() != 0 {
		t.Fatalf("after ejection the bad backend still got completions %d→%d, tokenize %d→%d, other %d",
			completions, badHits.completions.Load(), tokenize, badHits.tokenize.Load(), badHits.other.Load())
	}
	if goodHits.tokenize.Load() == 0 || goodHits.completions.Load() < 40 {
		t.Fatalf("the good backend got %d tokenize and %d completions", goodHits.tokenize.Load(), goodHits.completions.Load())
	}

	var ejections, ejected float64 = -1, -1
	for _, mf := range mustGather(t, rt) {
		switch mf.GetName() {
		case "stockpot_router_backend_ejections_total":
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == badID {
					ejections = m.GetCounter().GetValue()
				}
			}
		case "stockpot_router_backends_ejected":
			ejected = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if ejections != 1 || ejected != 1 {
		t.Fatalf("stockpot_router_backend_ejections_total{backend=%s} %v, stockpot_router_backends_ejected %v; want 1 and 1", badID, ejections, ejected)
	}
	for _, st := range rt.Backends() {
		want := "in-service"
		if st.ID == badID {
			want = "ejected"
		}
		if st.Passive != want {
			js, _ := json.Marshal(st)
			t.Errorf("backend %s: passive %q, want %q (%s)", st.ID, st.Passive, want, js)
		}
	}
}
