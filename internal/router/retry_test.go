package router

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stubBackend answers /health, and /v1/completions by mode: "ok", "500",
// "drop" (hijack and close the connection before any byte), "stream".
func stubBackend(t *testing.T, mode string, hits *atomic.Int64) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		if r.URL.Path != "/v1/completions" {
			http.NotFound(w, r)
			return
		}
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		switch mode {
		case "500":
			http.Error(w, `{"error":{"message":"boom"}}`, 500)
		case "drop":
			c, _, _ := w.(http.Hijacker).Hijack()
			c.Close()
		case "stream":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
			w.(http.Flusher).Flush()
			io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\ndata: [DONE]\n\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, cannedCompletion)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestRetryBeforeFirstByte: a 5xx or a dropped connection on one backend
// is retried on another, for plain and streamed requests; the client sees
// only the good answer.
func TestRetryBeforeFirstByte(t *testing.T) {
	for _, bad := range []string{"500", "drop"} {
		for _, good := range []string{"ok", "stream"} {
			t.Run(bad+"/"+good, func(t *testing.T) {
				var badHits, goodHits atomic.Int64
				b1 := stubBackend(t, bad, &badHits)
				b2 := stubBackend(t, good, &goodHits)
				cfg := DefaultConfig()
				cfg.Policy = "round-robin"
				cfg.Backends = []string{b1.URL, b2.URL}
				cfg.HealthInterval = time.Hour
				reg := prometheus.NewRegistry()
				cfg.Registerer, cfg.Gatherer = reg, reg
				rt, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer rt.Close()
				front := httptest.NewServer(rt.Handler())
				defer front.Close()
				for i := range 4 {
					resp, err := http.Post(front.URL+"/v1/completions", "application/json", bytes.NewReader([]byte(`{"prompt":"x","stream":true}`)))
					if err != nil {
						t.Fatal(err)
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Fatalf("request %d: HTTP %d %s", i, resp.StatusCode, body)
					}
					if good == "stream" && !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
						t.Fatalf("stream cut: %q", body)
					}
				}
				if badHits.Load() == 0 || goodHits.Load() != 4 {
					t.Fatalf("bad backend hit %d times, good %d (want >0 and 4)", badHits.Load(), goodHits.Load())
				}
				mfs, _ := reg.Gather()
				for _, mf := range mfs {
					if mf.GetName() == "stockpot_router_cached_tokens_total" {
						v := mf.GetMetric()[0].GetCounter().GetValue()
						if want := map[string]float64{"ok": 4 * 48, "stream": 4 * 8}[good]; v != want {
							t.Errorf("cached tokens from usage: have %v want %v", v, want)
						}
					}
				}
			})
		}
	}
}

// TestAllBackendsFail: the client gets the last 5xx, or a 502 in OpenAI shape.
func TestAllBackendsFail(t *testing.T) {
	var hits atomic.Int64
	b1 := stubBackend(t, "drop", &hits)
	cfg := DefaultConfig()
	cfg.Policy = "random"
	cfg.Backends = []string{b1.URL}
	cfg.HealthInterval = time.Hour
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	front := httptest.NewServer(rt.Handler())
	defer front.Close()
	resp, err := http.Post(front.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(body), `"error"`) {
		t.Fatalf("HTTP %d %s, want 502 with an OpenAI error", resp.StatusCode, body)
	}
	// The backend is now down: the next request gets a 503 at once.
	resp, _ = http.Post(front.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x"}`))
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("HTTP %d, want 503 with no healthy backend", resp.StatusCode)
	}
}

func TestMembership(t *testing.T) {
	var hits atomic.Int64
	b1, b2 := stubBackend(t, "ok", &hits), stubBackend(t, "ok", &hits)
	cfg := DefaultConfig()
	cfg.Policy = "prefix"
	cfg.HealthInterval = time.Hour
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	id1, err := rt.AddBackend(b1.URL)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := rt.AddBackend(b1.URL + "/"); again != id1 || len(rt.Backends()) != 1 {
		t.Fatalf("re-adding the same URL: id %s (want %s), %d backends", again, id1, len(rt.Backends()))
	}
	if _, err := rt.AddBackend("ftp://x"); err == nil {
		t.Fatal("ftp URL accepted")
	}
	if _, err := rt.AddBackend(b2.URL); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemoveBackend(b2.URL); err != nil || len(rt.Backends()) != 1 {
		t.Fatalf("remove by URL: %v, %d left", err, len(rt.Backends()))
	}
	if err := rt.RemoveBackend(id1); err != nil || len(rt.Backends()) != 0 {
		t.Fatalf("remove by ID: %v, %d left", err, len(rt.Backends()))
	}
	if err := rt.RemoveBackend(id1); err == nil {
		t.Fatal("removing twice: no error")
	}
}
