package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"stockpot/internal/soak"
)

// TestSoakHostile runs `stockpot soak --hostile` at a tenth of the probe's counts on kimi-k3's
// tokenizer (the probe's quadratic case): every hostile shape at once against one serve with
// no key. The server's peak RSS (the kernel's VmHWM) must stay within the bound README states,
// every request must get an answer in the API's shape (a 4xx refusal, or a 503/529 while the
// request memory budget is full: never a dropped connection or a 5xx of another kind),
// /health must answer throughout the flood of half-sent headers, and the server must serve a
// completion afterwards. Memory and answers are judged, never latency.
func TestSoakHostile(t *testing.T) {
	bin := buildStockpot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // a watchdog
	defer cancel()
	var progress strings.Builder
	rep, err := soak.RunHostile(ctx, soak.HostileConfig{
		Bin: bin, Model: "synthetic:tiny-kimi-k3", Dir: t.TempDir(), Scale: 0.1, Progress: &progress,
		Args: []string{"--kv-memory", "64MiB", "--threads", "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s%s", progress.String(), rep)
	if !rep.OK() {
		t.Errorf("peak RSS %d over the bound %d, or not alive after (%v %s)", rep.PeakRSS, rep.Bound, rep.Alive, rep.AliveDetail)
	}
	if rep.HealthAsked == 0 || rep.HealthFailed != 0 {
		t.Errorf("/health during the flood: %d asked, %d failed", rep.HealthAsked, rep.HealthFailed)
	}
	for _, s := range rep.Shapes {
		if s.Name == "half-headers" {
			continue
		}
		for status, n := range s.Statuses {
			switch {
			case status == "503" || status == "529": // the request memory budget, full: retry later
			case strings.HasPrefix(status, "2"), strings.HasPrefix(status, "4"):
			default:
				t.Errorf("%s: %d answered %s (%s)", s.Name, n, status, s.Samples[status])
			}
		}
	}
}
