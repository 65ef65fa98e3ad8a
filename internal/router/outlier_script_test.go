package router

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// outlierScenario drives the passive-health state machine (outliers) from
// testdata/outlier/*.txt scripts on a fake clock.
//
// Commands:
//
//	config [failures=N] [base=D] [max=D] [percent=P]   newOutliers (zero fields: defaults)
//	fleet b=(a,b,…)                the backends (the fleet size failure sees)
//	tick d=D                       the clock moves on
//	fail b=B [n=N]                 N failed answers from B (default 1)
//	ok b=B                         a successful answer from B
//	candidate b=B                  may B be offered a routed request? (candidate)
//	serving b=B                    may B take /tokenize? (serving)
//	start b=B                      a routed request starts on B (start: takes a half-open probe)
//	abandon b=B                    the client left a request on B
//	health b=B                     an active health check of B passed
//	remove b=B                     B leaves the fleet
//
// After every command it prints what changed and each backend's state: its state, failures
// in a row, and for an ejected one when it turns half-open (relative to the script's start).
type outlierScenario struct {
	t     *testing.T
	o     *outliers
	fleet []string
	t0    time.Time
	now   time.Time
	out   strings.Builder
}

func (s *outlierScenario) run(d *datadriven.TestData) {
	t := s.t
	name := func() string {
		var b string
		d.ScanArgs(t, "b", &b)
		return b
	}
	event := func(b string, e outlierEvent) {
		switch e {
		case ejectedNow:
			fmt.Fprintf(&s.out, "%s ejected\n", b)
		case returnedNow:
			fmt.Fprintf(&s.out, "%s returned\n", b)
		}
	}
	switch d.Cmd {
	case "config":
		cfg := OutlierConfig{}
		if d.HasArg("failures") {
			d.ScanArgs(t, "failures", &cfg.Consecutive)
		}
		for _, a := range []struct {
			key string
			v   *time.Duration
		}{{"base", &cfg.BaseEjection}, {"max", &cfg.MaxEjection}} {
			if d.HasArg(a.key) {
				var v string
				d.ScanArgs(t, a.key, &v)
				dur, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("%s: %s=%q: %v", d.Pos, a.key, v, err)
				}
				*a.v = dur
			}
		}
		if d.HasArg("percent") {
			d.ScanArgs(t, "percent", &cfg.MaxEjectedPercent)
		}
		cfg, err := cfg.validate()
		if err != nil {
			fmt.Fprintf(&s.out, "error: %v\n", err)
			return
		}
		fmt.Fprintf(&s.out, "failures=%d base=%v max=%v percent=%d\n", cfg.Consecutive, cfg.BaseEjection, cfg.MaxEjection, cfg.MaxEjectedPercent)
		s.o = newOutliers(cfg)
	case "fleet":
		s.fleet = listArg(d, "b")
	case "tick":
		var v string
		d.ScanArgs(t, "d", &v)
		dur, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: d=%q: %v", d.Pos, v, err)
		}
		s.now = s.now.Add(dur)
	case "fail":
		b, n := name(), 1
		if d.HasArg("n") {
			d.ScanArgs(t, "n", &n)
		}
		for range n {
			event(b, s.o.failure(b, s.now, len(s.fleet)))
		}
	case "ok":
		b := name()
		event(b, s.o.success(b, s.now))
	case "candidate":
		b := name()
		fmt.Fprintf(&s.out, "candidate %s: %v\n", b, s.o.candidate(b, s.now))
	case "serving":
		b := name()
		fmt.Fprintf(&s.out, "serving %s: %v\n", b, s.o.serving(b, s.now))
	case "start":
		b := name()
		fmt.Fprintf(&s.out, "start %s: %v\n", b, s.o.start(b, s.now))
	case "abandon":
		s.o.abandon(name())
	case "health":
		s.o.healthPass(name(), s.now)
	case "remove":
		b := name()
		s.o.remove(b)
		for i, x := range s.fleet {
			if x == b {
				s.fleet = append(s.fleet[:i:i], s.fleet[i+1:]...)
				break
			}
		}
	default:
		t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	}
}

// print writes each backend's state and the count out.
func (s *outlierScenario) print() {
	if s.o == nil {
		return
	}
	var parts []string
	for _, b := range s.fleet {
		st, n := s.o.state(b, s.now)
		p := fmt.Sprintf("%s=%s/%d", b, st, n)
		if h := s.o.mu.hosts[b]; h != nil && st == ejected {
			p += fmt.Sprintf(" until +%v", h.until.Sub(s.t0))
		}
		parts = append(parts, p)
	}
	fmt.Fprintf(&s.out, "t=+%v out=%d %s\n", s.now.Sub(s.t0), s.o.ejectedCount(), strings.Join(parts, " "))
}

func TestOutlierScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/outlier", func(t *testing.T, path string) {
		t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
		s := &outlierScenario{t: t, t0: t0, now: t0}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			s.t = t
			s.out.Reset()
			s.run(d)
			s.print()
			return s.out.String()
		})
	})
}
