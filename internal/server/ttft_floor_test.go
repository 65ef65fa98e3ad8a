package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/api"
	"stockpot/internal/runner"
)

// floorServer is a server with keys a, b and c and a TTFT floor, recording every plan.
func floorServer(t *testing.T, floor time.Duration, answer string) (*Server, *prometheus.Registry, func() []runner.FloorPlan) {
	t.Helper()
	var mu sync.Mutex
	var plans []runner.FloorPlan
	s, reg := newTestServer(t, newFakeGen(answer), func(c *Config) {
		c.APIKeys, c.TTFTFloor, c.BlockSize, c.ContextLength, c.MaxPromptTokens = []string{"a", "b", "c"}, floor, 16, 512, 500
		c.MaxBodyBytes = 1 << 16
		c.onFloorPlan = func(p runner.FloorPlan) {
			mu.Lock()
			plans = append(plans, p)
			mu.Unlock()
		}
	})
	return s, reg, func() []runner.FloorPlan {
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
		if pl.Padded != st.padded || pl.KnownTokens != st.known {
			t.Errorf("step %d (%s): padded %v known %d, want %v %d", i, st.key, pl.Padded, pl.KnownTokens, st.padded, st.known)
		}
		// The charge: a padded request reuses nothing past its known prefix (the engine
		// computes the rest, as the miss it is told as); an unpadded one is not capped.
		switch capped := s.gen.(*fakeGen).lastRequest().MaxReuseTokens; {
		case st.padded && (capped == nil || *capped != st.known):
			t.Errorf("step %d: padded request's MaxReuseTokens %v, want %d", i, capped, st.known)
		case !st.padded && capped != nil:
			t.Errorf("step %d: unpadded request capped at %d", i, *capped)
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
	if got := counterValue(t, reg, "stockpot_ttft_floor_requests_total", "padded", "true"); got != 4 {
		t.Errorf("padded requests counted %v, want 4", got)
	}
	if got := counterValue(t, reg, "stockpot_ttft_floor_requests_total", "padded", "false"); got != 3 {
		t.Errorf("unpadded requests counted %v, want 3", got)
	}
	if got := counterValue(t, reg, "stockpot_ttft_floor_masked_tokens_total", "", ""); got <= 0 {
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
	if ps := plans(); len(ps) != 1 || !ps[0].Padded {
		t.Errorf("plans %+v, want one padded", ps)
	}
	text, u = stream("a")
	if text != "streamed answer" || u.PromptTokensDetails.CachedTokens != fakeUsage(u.PromptTokens).CachedTokens() {
		t.Errorf("own repeat: %q, usage %+v", text, u)
	}
}

// TestTTFTFloorCalibrated: the floor protects from the first request. Without calibration the
// first padded request's target is the bare floor (the estimate needs estimatorMinSamples
// requests: a hit answered at once); after CalibrateFloor it is the engine's miss TTFT (the
// fake engine reports 3.125ms for every prompt). The calibration's prompts are misses that
// nobody can hit: capped at 0 reuse, each under its own salt, nothing offloaded.
func TestTTFTFloorCalibrated(t *testing.T) {
	const floor = time.Microsecond
	want := time.Duration(fakeUsage(1).TTFTMs * float64(time.Millisecond))
	prompt := strings.Repeat("first request after a start. ", 3)
	for _, calibrate := range []bool{false, true} {
		s, _, plans := floorServer(t, floor, "x")
		g := s.gen.(*fakeGen)
		if calibrate {
			if err := s.CalibrateFloor(t.Context()); err != nil {
				t.Fatal(err)
			}
			salts := map[string]bool{}
			for _, r := range g.reqs {
				if r.MaxReuseTokens == nil || *r.MaxReuseTokens != 0 || r.MaxOffloadTokens == nil || *r.MaxOffloadTokens != 0 || r.MaxTokens != 1 {
					t.Errorf("calibration request %+v: want reuse 0, offload 0, one token", r)
				}
				salts[r.CacheSalt] = true
			}
			if len(g.reqs) != 2*runner.CalibrationRounds || len(salts) != len(g.reqs) {
				t.Errorf("%d calibration requests under %d salts, want %d, each its own", len(g.reqs), len(salts), 2*runner.CalibrationRounds)
			}
			if len(plans()) != 0 {
				t.Error("the calibration went through the floor's plans")
			}
		}
		complete(t, s, "a", prompt, "")
		ps := plans()
		if len(ps) != 1 || !ps[0].Padded {
			t.Fatalf("plans %+v, want one padded", ps)
		}
		switch got := ps[0].Target; {
		case calibrate && got < want:
			t.Errorf("calibrated: the first request's target %v, want at least the engine's miss TTFT %v", got, want)
		case !calibrate && got != floor:
			t.Errorf("uncalibrated: the first request's target %v, want the bare floor %v", got, floor)
		}
	}
	// Without a floor there is nothing to calibrate and the engine is not called.
	s, _, _ := floorServer(t, 0, "x")
	if err := s.CalibrateFloor(t.Context()); err != nil || len(s.gen.(*fakeGen).reqs) != 0 {
		t.Errorf("calibration without a floor: %v, %d requests", err, len(s.gen.(*fakeGen).reqs))
	}
}

// TestKeyIsolation: under Config.KeyIsolation each key's requests carry a salt of its own,
// the same for its repeats, whatever cache_salt the other key sends; without it two keys of
// one tenant share the salt (and so the blocks).
func TestKeyIsolation(t *testing.T) {
	for _, isolate := range []bool{false, true} {
		g := newFakeGen("x")
		s, _ := newTestServer(t, g, func(c *Config) {
			c.APIKeys, c.KeyIsolation = []string{"a", "b"}, isolate
		})
		salt := func(key, client string) string {
			t.Helper()
			body, _ := json.Marshal(map[string]any{"prompt": "the same prompt", "max_tokens": 1, "cache_salt": client})
			if rec := do(s.Handler(), "POST", "/v1/completions", string(body), "Authorization", "Bearer "+key); rec.Code != 200 {
				t.Fatalf("as %s: %d %s", key, rec.Code, rec.Body)
			}
			return g.lastRequest().CacheSalt
		}
		a, a2, b := salt("a", ""), salt("a", ""), salt("b", "")
		if a != a2 {
			t.Errorf("isolate %v: a's repeat changed its salt", isolate)
		}
		if !isolate {
			if a != b {
				t.Errorf("without isolation two keys' salts differ: %q %q", a, b)
			}
			continue
		}
		if a == b || !strings.HasPrefix(a, keyTag) || !strings.HasPrefix(b, keyTag) {
			t.Errorf("isolated salts %q %q: want distinct, each under the key tag", a, b)
		}
		// b cannot name a's namespace with any cache_salt: its salts all start with its own.
		for _, try := range []string{a, a[len(keyTag):], keyTag, "\x00", strings.Repeat("\x00", 49)} {
			if got := salt("b", try); got == a || !strings.HasPrefix(got, b) {
				t.Errorf("b with cache_salt %q got salt %q: not under b's own prefix", try, got)
			}
		}
	}
}
