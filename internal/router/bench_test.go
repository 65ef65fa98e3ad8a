package router

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
)

const cannedCompletion = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"stub","choices":[{"index":0,"text":" ok","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":64,"completion_tokens":1,"total_tokens":65,"prompt_tokens_details":{"cached_tokens":48}}}`

// BenchmarkAddedLatency measures the router's added latency against a
// stub backend answering a canned completion, routed and direct requests
// interleaved at a steady rate in the same run. It reports p50/p99 of both
// and their difference (added-p50-us, added-p99-us), plus the router's own
// pre-upstream time (overhead-mean-us: body read + parse + decision).
func BenchmarkAddedLatency(b *testing.B) {
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			if r.URL.Path == "/health" {
				w.WriteHeader(200)
				return
			}
			http.NotFound(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, cannedCompletion)
	}))
	defer stub.Close()
	toks := make([]int32, 512)
	for i := range toks {
		toks[i] = int32(i * 7 % 4096)
	}
	tokJSON := fmt.Sprint(toks)
	tokJSON = "[" + string(bytes.ReplaceAll([]byte(tokJSON[1:len(tokJSON)-1]), []byte(" "), []byte(","))) + "]"
	cases := []struct {
		policy, body string
		session      bool
	}{
		{"round-robin", `{"prompt":"hello","max_tokens":1}`, false},
		{"prefix", `{"prompt":"hello","max_tokens":1}`, true},
		{"kv-aware", `{"prompt":` + tokJSON + `,"max_tokens":1}`, false},
	}
	for _, c := range cases {
		b.Run(c.policy, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Policy = c.policy
			cfg.Backends = []string{stub.URL}
			reg := prometheus.NewRegistry()
			cfg.Registerer, cfg.Gatherer = reg, reg
			rt, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer rt.Close()
			front := httptest.NewServer(rt.Handler())
			defer front.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			do := func(base string) time.Duration {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/completions", bytes.NewReader([]byte(c.body)))
				req.Header.Set("Content-Type", "application/json")
				if c.session {
					req.Header.Set("X-Session-ID", "s1")
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				d := time.Since(t0)
				if resp.StatusCode != 200 {
					b.Fatalf("HTTP %d", resp.StatusCode)
				}
				return d
			}
			for range 50 { // warm connections on both paths
				do(stub.URL)
				do(front.URL)
			}
			var direct, routed []time.Duration
			tick := time.NewTicker(500 * time.Microsecond) // steady 2000 pairs/s offered
			defer tick.Stop()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				<-tick.C
				if i%2 == 0 {
					direct = append(direct, do(stub.URL))
					routed = append(routed, do(front.URL))
				} else {
					routed = append(routed, do(front.URL))
					direct = append(direct, do(stub.URL))
				}
			}
			b.StopTimer()
			pct := func(ds []time.Duration, p float64) float64 {
				s := slices.Clone(ds)
				slices.Sort(s)
				return float64(s[int(p*float64(len(s)-1))]) / 1e3
			}
			b.ReportMetric(pct(direct, 0.5), "direct-p50-us")
			b.ReportMetric(pct(direct, 0.99), "direct-p99-us")
			b.ReportMetric(pct(routed, 0.5), "routed-p50-us")
			b.ReportMetric(pct(routed, 0.99), "routed-p99-us")
			b.ReportMetric(pct(routed, 0.5)-pct(direct, 0.5), "added-p50-us")
			b.ReportMetric(pct(routed, 0.99)-pct(direct, 0.99), "added-p99-us")
			mfs, _ := reg.Gather()
			for _, mf := range mfs {
				if mf.GetName() == "stockpot_router_overhead_seconds" {
					h := mf.GetMetric()[0].GetHistogram()
					b.ReportMetric(h.GetSampleSum()/float64(h.GetSampleCount())*1e6, "overhead-mean-us")
				}
			}
		})
	}
}

// BenchmarkPick is the policy's share of the overhead: kv-aware hashes a
// 512-token prompt (32 blocks) and walks 4 replicas' indexes.
func BenchmarkPick(b *testing.B) {
	t := &testing.T{}
	bs := testBackends(t, 4)
	toks := make([]int32, 512)
	for i := range toks {
		toks[i] = int32(i)
	}
	hs := prefix.BlockHashes(prefix.Root([]byte{0}, ""), toks, 4)
	for i, be := range bs {
		storeChain(be, hs[:len(hs)*(i+1)/4], kvtier.Device)
	}
	for _, name := range []string{"random", "prefix", "kv-aware"} {
		b.Run(name, func(b *testing.B) {
			p, _ := NewPolicy(name, PolicyConfig{PrefixTokens: 256})
			b.ReportAllocs()
			for b.Loop() {
				p.Pick(&Request{Tokens: toks}, bs)
			}
		})
	}
	b.Run("block-hashes-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			prefix.BlockHashes(prefix.Root([]byte{0}, ""), toks, 4)
		}
	})
}
