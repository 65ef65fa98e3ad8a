package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestMetricsURLs: behind a router, the server-side numbers come from the replicas' /metrics
// (--metrics-url), summed; the router itself has no prefix-cache counters. Two fake replicas
// share the requests: one reuses every prompt token, the other none, so the fleet's rate is
// their query-weighted sum, exactly.
func TestMetricsURLs(t *testing.T) {
	var mu sync.Mutex
	queries, hits := [2]float64{}, [2]float64{}
	n := 0
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		prompt := len(fmt.Sprint(body["prompt"])) / 4
		mu.Lock()
		i := n % 2
		n++
		queries[i] += float64(prompt)
		if i == 0 {
			hits[i] += float64(prompt)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" w\"}]}\n\n")
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1,\"total_tokens\":%d}}\n\n", prompt, prompt+1)
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	target := httptest.NewServer(mux)
	defer target.Close()
	var replicas []string
	for i := range 2 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(w, "# TYPE %s counter\n%s %g\n# TYPE %s counter\n%s{tier=\"device\"} %g\n",
				metricQueries, metricQueries, queries[i], metricHits, metricHits, hits[i])
		}))
		defer s.Close()
		replicas = append(replicas, s.URL+"/")
	}
	cfg := DefaultConfig()
	cfg.Target, cfg.Workload, cfg.MetricsURLs = target.URL, "sysprompt", replicas
	cfg.Sessions, cfg.Turns, cfg.Concurrency = 2, 3, 1
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	want := (hits[0] + hits[1]) / (queries[0] + queries[1])
	mu.Unlock()
	if rep.ServerHitRate == nil || *rep.ServerHitRate != want || want <= 0 || want >= 1 {
		t.Fatalf("server hit rate %v, want %v summed over the replicas", rep.ServerHitRate, want)
	}
	if rep.TTFT == nil || rep.TTFT.P90 < rep.TTFT.P50 || rep.TTFT.P95 < rep.TTFT.P90 {
		t.Fatalf("TTFT percentiles %+v: want p50 ≤ p90 ≤ p95", rep.TTFT)
	}

	// One replica without the counters: the sum is not reported, never a partial rate.
	cfg.MetricsURLs = append(replicas, target.URL)
	if rep, err = Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if rep.ServerHitRate != nil {
		t.Fatalf("with a replica lacking the counters: rate %v, want not reported", *rep.ServerHitRate)
	}
	cfg.MetricsURLs = []string{"ftp://x"}
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--metrics-url") {
		t.Fatalf("a bad --metrics-url: %v", err)
	}
}
