package bench

import (
	"context"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestAcceptGateRealServer runs the acceptance gate against real `stockpot serve` processes
// (the default model, 2 threads): with the prefix cache on and a host tier it passes, step by
// step (longctx: cold, warm from the pool, warm from host; docqa: its cold first questions and
// warm later ones); with --prefix-cache=false the warm steps fail. Token counts are asserted,
// never times.
func TestAcceptGateRealServer(t *testing.T) {
	on := startServer(t, "--admin-key", "adm", "--host-cache", "64MiB", "--threads", "2")
	ctx := context.Background()

	cfg := DefaultConfig()
	cfg.Target, cfg.AdminKey, cfg.Accept, cfg.MaxTokens = on, "adm", true, 4
	cfg.Workload, cfg.Lengths = "longctx", []int{2048}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a := rep.Accept
	if a == nil || !a.Pass || rep.AcceptError() != nil {
		t.Fatalf("longctx gate: %+v", a)
	}
	var got []string
	for _, st := range a.Steps {
		got = append(got, st.Name+"/"+st.Tier+"/"+verdict(st.Pass))
		if st.Reused == nil || st.Recomputed == nil {
			t.Fatalf("%s: counters not read: %+v", st.Name, st)
		}
		switch st.Kind {
		case "cold":
			if *st.Reused != 0 {
				t.Errorf("%s: reused %v on a fresh server", st.Name, *st.Reused)
			}
		case "warm":
			// One prompt of P tokens: ⌊(P−1)/16⌋·16 reusable, all of it from the step's tier.
			if st.Reusable == nil || *st.Reused != float64(*st.Reusable) || *st.OtherTiers != 0 || st.Full != 1 {
				t.Errorf("%s: reused %v of %v reusable, %v from other tiers, %d full", st.Name, *st.Reused, st.Reusable, *st.OtherTiers, st.Full)
			}
			if st.ServerHitClasses["warm"] != 1 {
				t.Errorf("%s: engine hit classes %v, want one warm request", st.Name, st.ServerHitClasses)
			}
		}
	}
	if want := "longctx 2048 cold/any/PASS longctx 2048 device/device/PASS longctx 2048 host/host/PASS"; strings.Join(got, " ") != want {
		t.Errorf("steps %q, want %q", strings.Join(got, " "), want)
	}
	if a.TPOTCold == nil || a.TPOTWarm == nil {
		t.Errorf("TPOT cold %v, warm %v: want both measured (max_tokens 4)", a.TPOTCold, a.TPOTWarm)
	}

	docqa := acceptDocQA(on)
	docqa.AdminKey = "adm"
	rep, err = Run(ctx, docqa)
	if err != nil {
		t.Fatal(err)
	}
	if a := rep.Accept; a == nil || !a.Pass || len(a.Steps) != 2 || a.Steps[0].Name != "docqa cold" || a.Steps[1].Tier != "device" ||
		a.Steps[1].Full != 2 || a.Steps[1].Partial != 0 || a.Steps[0].Requests != 2 {
		t.Errorf("docqa gate: %+v", a)
	}
	if rep.TPOTCold == nil || rep.TPOTWarm == nil {
		t.Errorf("report tpot_cold_ms %v, tpot_warm_ms %v", rep.TPOTCold, rep.TPOTWarm)
	}

	off := startServer(t, "--prefix-cache=false", "--threads", "2")
	rep, err = Run(ctx, acceptDocQA(off))
	if err != nil {
		t.Fatal(err)
	}
	a = rep.Accept
	if a == nil || a.Pass || !errors.Is(rep.AcceptError(), ErrAcceptFailed) || len(a.Steps) != 2 {
		t.Fatalf("gate against --prefix-cache=false: %+v", a)
	}
	if cold, warm := a.Steps[0], a.Steps[1]; !cold.Pass || warm.Pass || warm.Tier != "none" || warm.Missed != 2 || *warm.Reused != 0 {
		t.Errorf("steps against --prefix-cache=false: cold %+v, warm %+v; want cold PASS, warm FAIL with 2 missed", cold, warm)
	}
}

// acceptDocQA is a small docqa acceptance run: 2 documents of 256 tokens, 2 questions each.
func acceptDocQA(target string) Config {
	cfg := DefaultConfig()
	cfg.Target, cfg.Workload, cfg.Accept = target, "docqa", true
	cfg.Sessions, cfg.Turns, cfg.DocTokens, cfg.QuestionTokens, cfg.MaxTokens = 2, 2, 256, 16, 4
	return cfg
}

// TestAcceptExitStatus runs `stockpot bench --accept` as a process: exit status 0 and a PASS
// line per step against a cache that works, 1 and a FAIL line for the warm step against
// --prefix-cache=false.
func TestAcceptExitStatus(t *testing.T) {
	bin := stockpotBinary(t)
	args := []string{"bench", "--accept", "--workload", "docqa", "--sessions", "2", "--turns", "2", "--doc-tokens", "256",
		"--question-tokens", "16", "--max-tokens", "4", "--quiet", "--out", t.TempDir(), "--target"}
	for _, c := range []struct {
		serve []string
		code  int
		lines []string
	}{
		{nil, 0, []string{`(?m)^docqa cold +any +0\.0% \(0 ÷ \d+\) +n/a +< 1\.0% of prompt +PASS`,
			`(?m)^docqa warm +device +\d+\.\d% \(\d+ ÷ \d+\) +100\.0% \((\d+) ÷ (\d+)\) +≥ 99\.0% of reusable +PASS`, `(?m)^accept: PASS \(2 steps\)$`}},
		{[]string{"--prefix-cache=false"}, 1, []string{`(?m)^docqa cold +any .* PASS`,
			`(?m)^docqa warm +none +0\.0% \(0 ÷ \d+\) +0\.0% \(0 ÷ \d+\) +≥ 99\.0% of reusable +FAIL`, `(?m)^accept: FAIL \(acceptance gate failed: 1 of 2 steps failed\)$`}},
	} {
		base := startServer(t, append([]string{"--threads", "2"}, c.serve...)...)
		out, err := exec.Command(bin, append(args, base)...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != c.code {
			t.Errorf("serve %v: exit status %d, want %d; output:\n%s", c.serve, code, c.code, out)
		}
		for _, re := range c.lines {
			if !regexp.MustCompile(re).Match(out) {
				t.Errorf("serve %v: no line matching %s in:\n%s", c.serve, re, out)
			}
		}
	}
}
