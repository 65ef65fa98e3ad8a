package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"stockpot/internal/kvcache"
)

// probeWords is the vocabulary of the probe's prompts.
var probeWords = strings.Fields(`alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike
november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basil cedar
dune ember fjord glade heron iris jade kestrel lotus maple nectar olive pepper quartz raven sage thistle`)

func probeText(rng *rand.Rand, words int) string {
	var b strings.Builder
	for i := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(probeWords[rng.IntN(len(probeWords))])
	}
	return b.String()
}

// streamTTFT sends a streamed one-token completion as key and returns the time to its first
// data event.
func streamTTFT(tb testing.TB, url, key, prompt string) time.Duration {
	tb.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1, "temperature": 0, "stream": true})
	req, _ := http.NewRequest("POST", url+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("probe: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	var ttft time.Duration
	for sc.Scan() {
		if ttft == 0 && strings.HasPrefix(sc.Text(), "data: {") {
			ttft = time.Since(t0)
		}
	}
	return ttft
}

// rocAUC is the probability that a random hit scores above a random miss (ties count half),
// the score being -TTFT: the attacker calls the faster probe the hit.
func rocAUC(hits, misses []time.Duration) float64 {
	var s float64
	for _, h := range hits {
		for _, m := range misses {
			switch {
			case h < m:
				s++
			case h == m:
				s += 0.5
			}
		}
	}
	return s / float64(len(hits)*len(misses))
}

func meanMs(ds ...[]time.Duration) float64 {
	var sum time.Duration
	n := 0
	for _, d := range ds {
		for _, x := range d {
			sum += x
			n++
		}
	}
	return float64(sum) / float64(n) / 1e6
}

// BenchmarkTTFTFloorProbe is the timing attack the TTFT floor defends against, run against a
// real engine (the synthetic model): a victim key sends secret prompts, then an attacker key
// probes, half of its probes starting with a victim's prompt (a guessed prefix, 3/4 of the
// probe, then its own words) and half with fresh words, and classifies each probe by its TTFT
// (faster = hit). It reports the classifier's ROC AUC (1.0: the attacker always tells; 0.5:
// chance), the mean TTFT of all requests, of the victim's (new prompts) and of the hits.
//
//	go test -run '^$' -bench TTFTFloorProbe -benchtime 1x ./cmd/stockpot/
func BenchmarkTTFTFloorProbe(b *testing.B) {
	const secrets, prefixWords, suffixWords = 96, 150, 50
	for _, mode := range []struct {
		name  string
		floor time.Duration
	}{{"off", 0}, {"on-1ms", time.Millisecond}, {"on-100ms", 100 * time.Millisecond}} {
		b.Run(mode.name, func(b *testing.B) {
			var auc, all, victim, hitMean, missMean float64
			for range b.N {
				o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, blockSize: 16, kvBudget: 64 << 20, kvType: kvcache.F32,
					prefixCache: true, dedup: true, maxBatch: 512, maxRunning: 8, keys: []string{"victim", "attacker"}, ttftFloor: mode.floor}
				inst, err := newInstance(o)
				if err != nil {
					b.Fatal(err)
				}
				ts := httptest.NewServer(inst.handler(context.Background()))
				rng := rand.New(rand.NewPCG(14, 5))
				var vict []time.Duration
				prompts := make([]string, secrets)
				for i := range prompts {
					prompts[i] = probeText(rng, prefixWords)
					vict = append(vict, streamTTFT(b, ts.URL, "victim", prompts[i]+" "+probeText(rng, suffixWords/2)))
				}
				type probe struct {
					text string
					hit  bool
				}
				var probes []probe
				for i := range prompts {
					probes = append(probes, probe{prompts[i] + " " + probeText(rng, suffixWords), true},
						probe{probeText(rng, prefixWords) + " " + probeText(rng, suffixWords), false})
				}
				rng.Shuffle(len(probes), func(i, j int) { probes[i], probes[j] = probes[j], probes[i] })
				var hits, misses []time.Duration
				for _, p := range probes {
					d := streamTTFT(b, ts.URL, "attacker", p.text)
					if p.hit {
						hits = append(hits, d)
					} else {
						misses = append(misses, d)
					}
				}
				ts.Close()
				inst.Close()
				auc, all, victim, hitMean, missMean = rocAUC(hits, misses), meanMs(vict, hits, misses), meanMs(vict), meanMs(hits), meanMs(misses)
				if testing.Verbose() {
					slices.Sort(hits)
					slices.Sort(misses)
					fmt.Printf("%s: hits p10/p50/p90 %v %v %v, misses %v %v %v\n", mode.name, hits[len(hits)/10], hits[len(hits)/2], hits[len(hits)*9/10],
						misses[len(misses)/10], misses[len(misses)/2], misses[len(misses)*9/10])
				}
			}
			b.ReportMetric(auc, "auc")
			b.ReportMetric(all, "mean_ttft_ms")
			b.ReportMetric(victim, "victim_ttft_ms")
			b.ReportMetric(hitMean, "hit_ttft_ms")
			b.ReportMetric(missMean, "miss_ttft_ms")
		})
	}
}

// TestServeTTFTFloor: on the real engine, an attacker key that sends a victim's prompt is
// told a miss (cached 0) with --ttft-floor and a hit without it, while the victim's own repeat
// reports its hit either way.
func TestServeTTFTFloor(t *testing.T) {
	prompt := probeText(rand.New(rand.NewPCG(1, 2)), 120)
	for _, floor := range []time.Duration{0, time.Millisecond} {
		_, ts := newTestInstance(t, func(o *serveOptions) { o.keys, o.ttftFloor = []string{"victim", "attacker"}, floor })
		cached := func(key string) int {
			t.Helper()
			body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 2, "temperature": 0})
			req, _ := http.NewRequest("POST", ts.URL+"/v1/completions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var out struct{ Usage apiUsage }
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
				t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
			}
			return *out.Usage.PromptTokensDetails.CachedTokens
		}
		cached("victim")
		victim, attacker := cached("victim"), cached("attacker")
		if victim == 0 {
			t.Fatalf("floor %v: the victim's repeat reused nothing: the test proves nothing", floor)
		}
		switch {
		case floor == 0 && attacker != victim:
			t.Errorf("without a floor the attacker's probe reported %d cached, want the hit's %d", attacker, victim)
		case floor > 0 && attacker != 0:
			t.Errorf("with a floor the attacker's probe reported %d cached tokens, want 0 (a miss)", attacker)
		}
	}
}
