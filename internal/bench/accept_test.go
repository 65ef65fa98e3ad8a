package bench

import (
	"bytes"
	"strings"
	"testing"
)

// TestJudgeStep checks the verdict of one step against hand-computed shares: the cold share
// is of the prompt, the warm share of the reusable tokens, a longctx tier counts only its own
// tokens, and a missing counter is "not reported", never 0.
func TestJudgeStep(t *testing.T) {
	cfg := DefaultConfig()
	src := func(computed, device, host float64) map[string]float64 {
		return map[string]float64{"computed": computed, "device": device, "host": host, "disk": 0, "remote": 0}
	}
	for _, c := range []struct {
		name   string
		obs    []acceptObs
		pass   bool
		reason string
	}{
		{"cold, nothing reused", []acceptObs{{kind: "cold", server: src(2048, 0, 0)}}, true, "reused 0 of 2048"},
		{"cold, 1% reused is too much", []acceptObs{{kind: "cold", server: src(1584, 16, 0)}}, false, "earlier traffic"},
		{"warm, every reusable token", []acceptObs{{kind: "warm", server: src(16, 2032, 0), reusable: 2032, knownReuse: true}}, true, "1 full, 0 partial, 0 missed"},
		{"warm agent turns: 85% of the prompt is still all of the reusable",
			[]acceptObs{{kind: "warm", server: src(300, 1700, 0), reusable: 1700, knownReuse: true}}, true, "reused 1700 of 1700"},
		{"warm, one partial of two", []acceptObs{
			{kind: "warm", server: src(16, 2032, 0), reusable: 2032, knownReuse: true},
			{kind: "warm", server: src(1040, 1008, 0), reusable: 2032, knownReuse: true}}, false, "1 full, 1 partial, 0 missed"},
		{"host tier served by device does not count", []acceptObs{{kind: "warm", countTier: "host", tier: "host",
			server: src(16, 2032, 0), reusable: 2032, knownReuse: true}}, false, "2032 from other tiers"},
		{"no counters", []acceptObs{{kind: "warm", reusable: 2032, knownReuse: true}}, false, "not reported"},
		{"one request failed", []acceptObs{{kind: "warm", err: "HTTP 500"}, {kind: "warm", server: src(16, 2032, 0)}}, false, "1 of 2 requests failed"},
		{"reusable unknown", []acceptObs{{kind: "warm", server: src(16, 2032, 0)}}, false, "reusable tokens unknown"},
	} {
		st := judgeStep(cfg, c.obs)
		if st.Pass != c.pass || !strings.Contains(st.Reason, c.reason) {
			t.Errorf("%s: have pass %v, %q; want pass %v, reason containing %q", c.name, st.Pass, st.Reason, c.pass, c.reason)
		}
	}
}

// TestWriteVerdict: one line per step in the order measured, notes, and the overall line.
func TestWriteVerdict(t *testing.T) {
	cfg := DefaultConfig()
	obs := []acceptObs{
		{step: "longctx 2048 cold", kind: "cold", tier: "any", server: map[string]float64{"computed": 2048}},
		{step: "longctx 2048 device", kind: "warm", tier: "device", countTier: "device", reusable: 2032, knownReuse: true,
			server: map[string]float64{"computed": 16, "device": 2032}},
		{step: "longctx 2048 host", kind: "warm", tier: "host", countTier: "host", reusable: 2032, knownReuse: true},
	}
	r := &Report{Accept: judge(cfg, obs)}
	var b bytes.Buffer
	if err := r.WriteVerdict(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	want := []string{"step ", "longctx 2048 cold ", "longctx 2048 device ", "longctx 2048 host "}
	for i, w := range want {
		if !strings.HasPrefix(lines[i+1], w) {
			t.Errorf("line %d %q: want it to start with %q", i+1, lines[i+1], w)
		}
	}
	for i, v := range []string{"PASS", "PASS", "FAIL"} {
		if !strings.Contains(lines[i+2], v) {
			t.Errorf("line %q: want %s", lines[i+2], v)
		}
	}
	if !strings.Contains(lines[4], "not reported") || !strings.Contains(b.String(), "accept: FAIL (acceptance gate failed: 1 of 3 steps failed)") {
		t.Errorf("verdict:\n%s", b.String())
	}
}
