package bench

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{[]float64{5}, 0.99, 5},
		{[]float64{1, 2}, 0.5, 1.5},
		{[]float64{1, 2, 3, 4, 5}, 0.5, 3},
		{[]float64{1, 2, 3, 4, 5}, 0.95, 4.8},
		{[]float64{1, 2, 3, 4, 5}, 1, 5},
		{[]float64{1, 2, 3, 4, 5}, 0, 1},
		{[]float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}, 0.99, 99.1},
	} {
		if have := percentile(tc.xs, tc.q); math.Abs(have-tc.want) > 1e-9 {
			t.Errorf("percentile(%v, %v): have %v, want %v", tc.xs, tc.q, have, tc.want)
		}
	}
	if summarize(nil) != nil {
		t.Error("summarize(nil): have non-nil, want nil (no samples is not 0 ms)")
	}
	in := []float64{3, 1, 2}
	s := summarize(in)
	if s.P50 != 2 || s.Mean != 2 || s.Count != 3 {
		t.Errorf("summarize(%v): have %+v", in, s)
	}
	if !reflect.DeepEqual(in, []float64{3, 1, 2}) {
		t.Errorf("summarize changed its input: %v", in)
	}
}

func TestReusable(t *testing.T) {
	for _, tc := range []struct{ shared, p, b, want int }{
		{0, 100, 16, 0},
		{15, 100, 16, 0},   // less than a block: nothing
		{16, 100, 16, 16},  // one whole block
		{47, 100, 16, 32},  // partial block dropped
		{100, 100, 16, 96}, // fully cached: last token recomputed, (P−1)/B blocks
		{96, 97, 16, 96},   // P−1 = 96 is block-aligned
		{97, 97, 16, 96},
		{200, 33, 16, 32}, // shared longer than the prompt
		{10, 1, 16, 0},
		{10, 0, 16, 0},
	} {
		if have := reusable(tc.shared, tc.p, tc.b); have != tc.want {
			t.Errorf("reusable(shared=%d, P=%d, B=%d): have %d, want %d", tc.shared, tc.p, tc.b, have, tc.want)
		}
	}
}

func TestNaiveAgentRate(t *testing.T) {
	for _, tc := range []struct {
		turns int
		want  float64
	}{{1, 0}, {3, 0.5}, {10, 9.0 / 11}, {0, 0}} {
		if have := naiveAgentRate(tc.turns); math.Abs(have-tc.want) > 1e-12 {
			t.Errorf("naiveAgentRate(%d): have %v, want %v", tc.turns, have, tc.want)
		}
	}
}

func seq(from, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = int32(from + i)
	}
	return s
}

func cat(parts ...[]int32) []int32 {
	var out []int32
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestPredictReuse checks the predictor against hand-computed answers for an agent session,
// a concurrent sibling and a failed request, with B = 4.
func TestPredictReuse(t *testing.T) {
	sys := seq(1000, 10)
	u1, a1, u2 := seq(2000, 5), seq(3000, 6), seq(4000, 3)
	ms := time.Millisecond
	reqs := []predictInput{
		// Turn 1: nothing cached.
		{Start: 0, End: 10 * ms, Prompt: cat(sys, u1), Output: a1, Tokens: 15, OK: true},
		// Turn 2 starts when turn 1 ended: shares prompt 1 + a1 minus its last token (15+5=20).
		{Start: 10 * ms, End: 20 * ms, Prompt: cat(sys, u1, a1, u2), Tokens: 24, OK: true},
		// Another session in flight with turn 1: shares sys (10 → 8) with its prompt.
		{Start: 5 * ms, End: 30 * ms, Prompt: cat(sys, seq(5000, 7)), Tokens: 17, OK: true},
		// Failed: counted as a query with its own reuse, but leaves nothing for later ones.
		{Start: 40 * ms, End: 41 * ms, Prompt: seq(7000, 9), Tokens: 9, OK: false},
		{Start: 50 * ms, End: 60 * ms, Prompt: seq(7000, 9), Tokens: 9, OK: true},
	}
	have := predictReuse(reqs, 4)
	want := []int{0, 20, 8, 0, 0}
	if !reflect.DeepEqual(have, want) {
		t.Errorf("predictReuse: have %v, want %v", have, want)
	}

	// Rune units are scaled to usage tokens: 8 of 16 runes shared, 32 tokens → 16 tokens.
	a := []int32("aaaaaaaabbbbbbbb")
	b := []int32("aaaaaaaacccccccc")
	have = predictReuse([]predictInput{
		{Start: 0, End: 1, Prompt: a, Tokens: 32, OK: true},
		{Start: 2, End: 3, Prompt: b, Tokens: 32, OK: true},
	}, 4)
	if !reflect.DeepEqual(have, []int{0, 16}) {
		t.Errorf("predictReuse on runes: have %v, want [0 16]", have)
	}
}

const stockpotMetrics = `# HELP stockpot_prefix_cache_queries_total Prompt tokens looked up in the prefix cache.
# TYPE stockpot_prefix_cache_queries_total counter
stockpot_prefix_cache_queries_total 1000
# HELP stockpot_prefix_cache_hits_total Prompt tokens reused from the prefix cache, by tier.
# TYPE stockpot_prefix_cache_hits_total counter
stockpot_prefix_cache_hits_total{tier="device"} 600
stockpot_prefix_cache_hits_total{tier="host"} 150
stockpot_prefix_cache_hits_total{tier="disk"} 0
stockpot_prefix_cache_hits_total{tier="remote"} 0
# HELP stockpot_prompt_tokens_total Prompt tokens by source.
# TYPE stockpot_prompt_tokens_total counter
stockpot_prompt_tokens_total{source="computed"} 250
stockpot_prompt_tokens_total{source="device"} 600
stockpot_prompt_tokens_total{source="host"} 150
stockpot_prompt_tokens_total{source="disk"} 0
stockpot_prompt_tokens_total{source="remote"} 0
# HELP stockpot_prefix_cache_hit_rate hit rate
# TYPE stockpot_prefix_cache_hit_rate gauge
stockpot_prefix_cache_hit_rate NaN
# TYPE stockpot_time_to_first_token_seconds histogram
stockpot_time_to_first_token_seconds_bucket{le="0.1"} 3
stockpot_time_to_first_token_seconds_bucket{le="+Inf"} 4
stockpot_time_to_first_token_seconds_sum 0.5
stockpot_time_to_first_token_seconds_count 4
`

func TestParseCounters(t *testing.T) {
	s, err := parseCounters(strings.NewReader(stockpotMetrics))
	if err != nil {
		t.Fatal(err)
	}
	want := counterSnapshot{Present: true, Queries: 1000, Hits: 750,
		Tiers: map[string]float64{"computed": 250, "device": 600, "host": 150, "disk": 0, "remote": 0}}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("stockpot metrics: have %+v, want %+v", s, want)
	}

	vllm := "# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{model_name=\"m\"} 40\n" +
		"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{model_name=\"m\"} 10\n"
	s, err = parseCounters(strings.NewReader(vllm))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Present || s.Queries != 40 || s.Hits != 10 || s.Tiers != nil {
		t.Errorf("vllm metrics: have %+v, want present 40/10 with no tiers", s)
	}

	s, err = parseCounters(strings.NewReader("# TYPE go_goroutines gauge\ngo_goroutines 7\n"))
	if err != nil || s.Present {
		t.Errorf("no cache counters: have %+v, %v; want not present, no error", s, err)
	}
	if _, err := parseCounters(strings.NewReader("stockpot_prefix_cache_queries_total{ 1\n")); err == nil {
		t.Error("malformed text: have no error, want one")
	}

	before, _ := parseCounters(strings.NewReader(stockpotMetrics))
	after, _ := parseCounters(strings.NewReader(strings.NewReplacer(
		"queries_total 1000", "queries_total 1500",
		`tier="device"} 600`, `tier="device"} 900`,
		`source="device"} 600`, `source="device"} 900`,
		`source="computed"} 250`, `source="computed"} 450`).Replace(stockpotMetrics)))
	d := counterDelta(before, after)
	if !d.Present || d.Queries != 500 || d.Hits != 300 || d.Tiers["device"] != 300 || d.Tiers["computed"] != 200 {
		t.Errorf("delta: have %+v", d)
	}
	if counterDelta(counterSnapshot{}, after).Present {
		t.Error("delta with a missing side: have present, want absent")
	}
}

func testConfig(workload string) Config {
	c := DefaultConfig()
	c.Workload, c.Sessions, c.Turns = workload, 3, 4
	c.PrefixTokens, c.TurnTokens, c.DocTokens, c.QuestionTokens = 200, 30, 300, 20
	return c
}

func TestWorkloadsDeterministic(t *testing.T) {
	for _, w := range Workloads {
		if w == "trace" || w == "longctx" { // a file's contents; sized against the target as it runs (TestLongTextDeterministic)
			continue
		}
		t.Run(w, func(t *testing.T) {
			cfg := testConfig(w)
			a, err := BuildScripts(cfg, 1.3)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := BuildScripts(cfg, 1.3)
			if !reflect.DeepEqual(a, b) {
				t.Error("same seed: scripts differ")
			}
			cfg.Seed++
			c, _ := BuildScripts(cfg, 1.3)
			if reflect.DeepEqual(a, c) {
				t.Error("different seeds: scripts are equal")
			}
			n := 0
			for _, s := range a {
				n += len(s.Steps)
			}
			if n != cfg.Sessions*cfg.Turns {
				t.Errorf("have %d requests, want %d", n, cfg.Sessions*cfg.Turns)
			}
		})
	}
}

func TestWordsLength(t *testing.T) {
	g := &textGen{rng: newRand(1), tokensPerWord: 2}
	if n := len(strings.Fields(g.words(200))); n != 100 {
		t.Errorf("words(200) at 2 tokens a word: have %d words, want 100", n)
	}
}

// TestAgentAppendOnly checks the property the agent's prediction rests on: each turn's
// completion prompt starts with the previous turn's prompt plus its answer.
func TestAgentAppendOnly(t *testing.T) {
	scripts, err := BuildScripts(testConfig("agent"), 1.3)
	if err != nil {
		t.Fatal(err)
	}
	sc := scripts[0]
	var history []Message
	prev := ""
	for i, st := range sc.Steps {
		msgs := append(append([]Message(nil), history...), st.Messages...)
		p := renderCompletion(msgs)
		if !strings.HasPrefix(p, prev) {
			t.Fatalf("turn %d: prompt does not extend the previous prompt and answer", i)
		}
		answer := " answer " + strings.Repeat("x", i)
		history = append(msgs, msg("assistant", answer))
		prev = p + answer
	}
	if !strings.HasPrefix(scripts[1].Steps[0].Messages[0].Content, "You are a coding agent") ||
		!reflect.DeepEqual(scripts[0].Steps[0].Messages[0], scripts[1].Steps[0].Messages[0]) {
		t.Error("sessions do not share the tool-schema prefix")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Target = "" }, "--target"},
		{func(c *Config) { c.Target = "localhost:1" }, "http://"},
		{func(c *Config) { c.Workload = "nope" }, "--workload"},
		{func(c *Config) { c.Workload = "trace" }, "--trace"},
		{func(c *Config) { c.Turns = -1 }, "--turns"},
		{func(c *Config) { c.Rate = -1 }, "--rate"},
		{func(c *Config) { c.Workload, c.Lengths = "longctx", []int{} }, "--lengths: give at least one"},
		{func(c *Config) { c.Workload, c.Lengths = "longctx", []int{32768, 10} }, "--lengths: 10 tokens is outside [64, 4194304]"},
		{func(c *Config) { c.Workload, c.Lengths = "longctx", []int{5 << 20} }, "outside"},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		if _, err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("have %v, want an error naming %s", err, tc.want)
		}
	}
	c := Config{Target: "http://x/"}
	v, err := c.validate()
	if err != nil || v.Target != "http://x" || v.Sessions == 0 || c.Sessions != 0 {
		t.Errorf("validate: have %+v, %v; want defaults filled in a copy", v, err)
	}
	l := Config{Target: "http://x", Workload: "longctx"}
	if v, err := l.validate(); err != nil || !reflect.DeepEqual(v.Lengths, DefaultLengths) || l.Lengths != nil {
		t.Errorf("longctx without lengths: have %v, %v; want DefaultLengths in a copy", v.Lengths, err)
	}
}
