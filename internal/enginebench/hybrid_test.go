package enginebench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"stockpot/internal/llamaref"
	"stockpot/internal/synth"
)

// The hybrid rows: cold prefill of the long-context hybrids (Kimi-K3, Kimi-Linear, Qwen3.5 at
// the seeds' CPU scale) through `stockpot serve`, K/V f16, against llama-bench -p N on the same
// file, the two alternating length by length, round by round, best of each.
//
//	make bench-hybrid-vs-llama        # or STOCKPOT_HYBRID_LENGTHS=4096,16384,65536
//
// A hybrid's prefill is its recurrent layers' token steps (kernels.DeltaStepT) and the one
// attention layer's quadratic part; the served number is the server's own prefill time
// (usage.timings.prefill_ms) for a prompt nothing of which is cached.

var hybridPresets = []string{"small-kimi-k3", "small-kimi-linear", "small-qwen35"}

func hybridLengths() []int {
	v := os.Getenv("STOCKPOT_HYBRID_LENGTHS")
	if v == "" {
		v = "4096,16384,65536"
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}

// prefill sends a prompt of n token ids (distinct per seed, none cached) and returns the
// server's prefill rate in tokens per second.
func (s *servedReplica) prefill(b *testing.B, n int, seed uint64) float64 {
	b.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	toks := make([]int, n)
	for i := range toks {
		toks[i] = 100 + r.IntN(3900) // ordinary tokens of every preset's 4096-token vocabulary
	}
	body, _ := json.Marshal(map[string]any{"prompt": toks, "max_tokens": 1, "temperature": 0})
	resp, err := http.Post(s.base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
			Cache        struct {
				ComputedTokens int `json:"computed_tokens"`
			} `json:"cache"`
			Timings struct {
				PrefillMS float64 `json:"prefill_ms"`
			} `json:"timings"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		b.Fatalf("served prefill %d: HTTP %d, %v", n, resp.StatusCode, err)
	}
	if out.Usage.Cache.ComputedTokens != n || out.Usage.Timings.PrefillMS <= 0 {
		b.Fatalf("served prefill %d: computed %d tokens in %v ms (a cold prompt computes all)", n, out.Usage.Cache.ComputedTokens, out.Usage.Timings.PrefillMS)
	}
	return float64(n) / (out.Usage.Timings.PrefillMS / 1e3)
}

func BenchmarkHybridVsLlamaCpp(b *testing.B) {
	start := loadAvg()
	_, nRounds := benchTests()
	lengths := hybridLengths()
	type row struct {
		preset    string
		n         int
		ours, ref float64
	}
	var rows []row
	for _, preset := range hybridPresets {
		b.Run(preset, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), preset+".gguf")
			if err := synth.WriteFile(preset, synth.Options{Seed: 1}, path); err != nil {
				b.Fatal(err)
			}
			srv := startServed(b, path, "--kv-type", "f16", "--kv-memory", "4GiB")
			best := map[string]float64{}
			keep := func(k string, v float64) { best[k] = max(best[k], v) }
			seed := uint64(0)
			for b.Loop() {
				for range nRounds {
					for _, n := range lengths {
						ref, err := llamaref.NativeBench(path, []int{n}, 0, threads, llamaref.BenchOptions{KVType: "f16", Repetitions: 1})
						if err != nil {
							b.Logf("llama-bench pp%d round failed: %v", n, err)
						}
						for _, r := range ref {
							keep("ref "+r.Test, r.TokensPerSec)
						}
						seed++
						keep(fmt.Sprintf("pp%d", n), srv.prefill(b, n, seed))
					}
				}
			}
			for _, n := range lengths {
				k := fmt.Sprintf("pp%d", n)
				if best["ref "+k] == 0 {
					b.Fatalf("no llama-bench round gave %s", k)
				}
				rows = append(rows, row{preset, n, best[k], best["ref "+k]})
				b.ReportMetric(best[k]/best["ref "+k], k+"-ratio")
			}
		})
	}
	fmt.Printf("\nHybrid cold prefill, Stockpot (serve, K/V f16, server prefill time) vs native llama-bench -p N, f32 weights, %d threads, best of %d rounds alternating.\n", threads, nRounds)
	fmt.Printf("CPU: %s. Load average %s at start, %s at end.\n\n", cpuDescription(), start, loadAvg())
	fmt.Printf("| model | prefill | Stockpot tok/s | llama.cpp tok/s | ratio |\n|---|---|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Printf("| %s | %d | %.1f | %.1f | %.2f× |\n", r.preset, r.n, r.ours, r.ref, r.ours/r.ref)
	}
}
