package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"stockpot/internal/api"
	"stockpot/internal/engine"
)

// floorServer is a server with keys a, b and c and a TTFT floor, recording every plan.
func floorServer(t *testing.T, floor time.Duration, answer string) (*Server, *prometheus.Registry, func() []floorPlan) {
	t.Helper()
	s, reg := newTestServer(t, newFakeGen(answer), func(c *Config) {
		c.APIKeys, c.TTFTFloor, c.BlockSize, c.ContextLength, c.MaxPromptTokens = []string{"a", "b", "c"}, floor, 16, 512, 500
		c.MaxBodyBytes = 1 << 16
	})
	var mu sync.Mutex
	var plans []floorPlan
	s.floor.onPlan = func(p floorPlan) {
		mu.Lock()
		plans = append(plans, p)
		mu.Unlock()
	}
	return s, reg, func() []floorPlan {
		mu.Lock()
		defer mu.Unlock()
		out := plans
		plans = nil
		return out
	}
}

// complete posts a completion as key and returns its usage.
func complete(t *testing.T, s *Server, key, prompt, salt string) api.Usage {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 64, "cache_salt": salt})
	rec := do(s.Handler(), "POST", "/v1/completions", string(body), "Authorization", "Bearer "+key)
	if rec.Code != 200 {
		t.Fatalf("completion as %s: %d %s", key, rec.Code, rec.Body)
	}
	return *decode[api.CompletionResponse](t, rec).Usage
}

// TestTTFTFloorMechanism: a request is padded exactly when its prompt holds blocks its
// principal does not know (whatever the cache holds: the fake engine always reports a hit),
// and a padded request's usage reads as a miss past what its principal knows; own repeats,
// continuations of own answers, and repeats after paying once are not padded.
func TestTTFTFloorMechanism(t *testing.T) {
	const answer = "0123456789abcdefghijklmnopqrstuvwxyzABCDEF" // 42 tokens + EOS: output blocks
	s, reg, plans := floorServer(t, time.Millisecond, answer)
	p := strings.Repeat("secret prompt of the victim. ", 4) // 116 bytes + BOS = 117 tokens, 7 blocks
	type step struct {
		key, prompt, salt string
		padded            bool
		known             int // tokens of known prefix blocks in the plan
	}
	for i, st := range []step{
		{"a", p, "", true, 0},                      // new to a: padded though the engine says hit
		{"a", p, "", false, 112},                   // a's own repeat
		{"b", p, "", true, 0},                      // b probes a's prompt: padded, reported as a miss
		{"b", p, "", false, 112},                   // b paid once: it knows the blocks now
		{"c", p, "other", true, 0},                 // another salt is another chain
		{"a", p + "and more text.", "", true, 112}, // a continues: its known prefix reused
		{"a", p + answer, "", false, 144},          // a's prompt plus the answer it got: all known
	} {
		u := complete(t, s, st.key, st.prompt, st.salt)
		ps := plans()
		if len(ps) != 1 {
			t.Fatalf("step %d: %d plans", i, len(ps))
		}
		pl := ps[0]
		if pl.padded != st.padded || pl.knownTokens != st.known {
			t.Errorf("step %d (%s): padded %v known %d, want %v %d", i, st.key, pl.padded, pl.knownTokens, st.padded, st.known)
		}
		real := fakeUsage(u.PromptTokens)
		switch {
		case st.padded:
			if want := min(real.CachedTokens(), st.known); u.PromptTokensDetails.CachedTokens != want ||
				u.Cache.ComputedTokens != u.PromptTokens-want || u.Cache.DiscardedTokens != 0 || u.Timings.RestoreMs != 0 {
				t.Errorf("step %d: padded usage %+v, want %d cached, the rest computed, no discards or restore", i, u, want)
			}
			if u.Timings.TTFTMs < 1 {
				t.Errorf("step %d: padded ttft_ms %v under the 1ms floor", i, u.Timings.TTFTMs)
			}
		default:
			if u.PromptTokensDetails.CachedTokens != real.CachedTokens() || u.Cache.DiscardedTokens != real.DiscardedTokens {
				t.Errorf("step %d: unpadded usage %+v, want the engine's %+v", i, u, real)
			}
		}
	}
	if got := metricValue(t, s.floor.padded.WithLabelValues("true")); got != 4 {
		t.Errorf("padded requests counted %v, want 4", got)
	}
	if got := metricValue(t, s.floor.padded.WithLabelValues("false")); got != 3 {
		t.Errorf("unpadded requests counted %v, want 3", got)
	}
	if got := metricValue(t, s.floor.masked); got <= 0 {
		t.Errorf("masked tokens counted %v", got)
	}
	if mfs, _ := reg.Gather(); !strings.Contains(fmt.Sprint(mfs), "stockpot_ttft_floor_pad_seconds_total") {
		t.Error("no stockpot_ttft_floor_pad_seconds_total")
	}
}

// TestTTFTFloorOff: without a floor no plan is made and the usage is the engine's.
func TestTTFTFloorOff(t *testing.T) {
	s, _, plans := floorServer(t, 0, "x")
	u := complete(t, s, "a", strings.Repeat("p", 100), "")
	if ps := plans(); len(ps) != 0 {
		t.Errorf("%d plans without a floor", len(ps))
	}
	if u.PromptTokensDetails.CachedTokens != fakeUsage(101).CachedTokens() {
		t.Errorf("usage %+v changed without a floor", u)
	}
}

// TestTTFTFloorStream: a streamed padded request is masked in its final usage chunk, its
// chunks all arrive, and an unpadded repeat streams the engine's usage.
func TestTTFTFloorStream(t *testing.T) {
	s, _, plans := floorServer(t, 2*time.Millisecond, "streamed answer")
	p := strings.Repeat("stream me please. ", 5)
	stream := func(key string) (string, api.Usage) {
		body, _ := json.Marshal(map[string]any{"prompt": p, "max_tokens": 32, "stream": true, "stream_options": map[string]any{"include_usage": true}})
		rec := do(s.Handler(), "POST", "/v1/completions", string(body), "Authorization", "Bearer "+key)
		if rec.Code != 200 {
			t.Fatalf("stream: %d %s", rec.Code, rec.Body)
		}
		var text strings.Builder
		var u api.Usage
		for _, ev := range sseEvents(t, rec.Body.String()) {
			if ev == "[DONE]" {
				continue
			}
			var c api.CompletionResponse
			if err := json.Unmarshal([]byte(ev), &c); err != nil {
				t.Fatal(err)
			}
			for _, ch := range c.Choices {
				text.WriteString(ch.Text)
			}
			if c.Usage != nil {
				u = *c.Usage
			}
		}
		return text.String(), u
	}
	text, u := stream("a")
	if text != "streamed answer" || u.PromptTokensDetails.CachedTokens != 0 || u.Timings.TTFTMs < 2 {
		t.Errorf("padded stream: %q, usage %+v", text, u)
	}
	if ps := plans(); len(ps) != 1 || !ps[0].padded {
		t.Errorf("plans %+v, want one padded", ps)
	}
	text, u = stream("a")
	if text != "streamed answer" || u.PromptTokensDetails.CachedTokens != fakeUsage(u.PromptTokens).CachedTokens() {
		t.Errorf("own repeat: %q, usage %+v", text, u)
	}
}

// TestLedger: knowledge is per principal and per chain prefix, a block forgets its oldest
// knower past ledgerKnowers, and the ledger forgets its least recent blocks past its capacity.
func TestLedger(t *testing.T) {
	l := newLedger(4)
	toks := make([]int32, 64)
	for i := range toks {
		toks[i] = int32(i)
	}
	keys := floorKeys("", toks, 16, nil)
	if len(keys) != 4 {
		t.Fatalf("%d keys for 4 blocks", len(keys))
	}
	if other := floorKeys("salt", toks, 16, nil); other[0] == keys[0] {
		t.Error("the salt does not change the chain")
	}
	if ext := floorKeys("", toks, 16, keys[:2:2]); ext[3] != keys[3] {
		t.Error("extending a chain differs from computing it whole")
	}
	l.learn(1, keys[:2])
	if got := l.knownPrefix(1, keys); got != 2 {
		t.Errorf("known prefix %d, want 2", got)
	}
	if got := l.knownPrefix(2, keys); got != 0 {
		t.Errorf("another principal knows %d", got)
	}
	for p := uint64(2); p <= 5; p++ {
		l.learn(p, keys[:1])
	}
	if l.knownPrefix(1, keys) != 0 || l.knownPrefix(5, keys) != 1 {
		t.Error("a fifth knower did not replace the oldest")
	}
	l.learn(9, keys)
	more := floorKeys("x", toks, 16, nil)
	l.learn(9, more[:1]) // capacity 4: the least recent block goes
	if n := l.len(); n != 4 {
		t.Errorf("ledger holds %d blocks, want 4", n)
	}
	if got := l.knownPrefix(9, keys); got != 0 {
		t.Errorf("the least recently used block was kept (known prefix %d)", got)
	}
}

// TestMissEstimator: the estimate follows a linear TTFT plus the residuals' high quantile,
// and is 0 until enough samples came.
func TestMissEstimator(t *testing.T) {
	var e missEstimator
	if e.estimate(100) != 0 {
		t.Error("an estimate before any sample")
	}
	// TTFT = 5ms + 0.1ms per token, every tenth sample 2ms slow and every tenth 2ms fast.
	for i := range 400 {
		x := 16 * (1 + i%32)
		y := 5*time.Millisecond + time.Duration(x)*100*time.Microsecond
		if i%10 == 0 {
			y += 2 * time.Millisecond
		} else if i%10 == 5 {
			y -= 2 * time.Millisecond
		}
		e.observe(x, y)
	}
	got := e.estimate(256)
	fit := 5*time.Millisecond + 256*100*time.Microsecond
	if got < fit+time.Millisecond || got > fit+3*time.Millisecond {
		t.Errorf("estimate(256) %v, want about the fit %v + 2ms (the p95 residual)", got, fit)
	}
}

// TestMaskUsage: reuse past the known tokens becomes computed, in chain order.
func TestMaskUsage(t *testing.T) {
	u := engine.Usage{PromptTokens: 100, DeviceTokens: 48, HostTokens: 32, ComputedTokens: 20, DiscardedTokens: 16,
		DiscardedBy: map[string]int{"checksum": 16}, QueueMs: 1, RestoreMs: 3, PrefillMs: 2, TTFTMs: 6,
		Pins: []engine.PinResult{{Requested: 64, Pinned: 64, Created: 0}}}
	if n := maskUsage(&u, 64, 40*time.Millisecond); n != 16 {
		t.Errorf("masked %d, want 16", n)
	}
	if u.DeviceTokens != 48 || u.HostTokens != 16 || u.ComputedTokens != 36 || u.DiscardedTokens != 0 || u.DiscardedBy != nil {
		t.Errorf("masked usage %+v", u)
	}
	if u.TTFTMs != 40 || u.RestoreMs != 0 || u.PrefillMs != 39 || u.Pins[0].Created != 0 {
		t.Errorf("masked timings or pins %+v", u)
	}
	u2 := engine.Usage{PromptTokens: 100, DeviceTokens: 96, ComputedTokens: 4, Pins: []engine.PinResult{{Requested: 96, Pinned: 96}}}
	maskUsage(&u2, 0, time.Millisecond)
	if u2.DeviceTokens != 0 || u2.ComputedTokens != 100 || u2.Pins[0].Created != 96 {
		t.Errorf("fully masked %+v", u2)
	}
}

func metricValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
