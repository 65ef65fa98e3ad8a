package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"stockpot/internal/bench"
)

// fakeCompletions streams a fixed answer with usage that has no cached_tokens.
func fakeCompletions(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/completions" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\" b\"}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":2,\"total_tokens\":52}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	return s
}

func TestCmdBench(t *testing.T) {
	s := fakeCompletions(t)
	out := t.TempDir()
	t.Setenv("STOCKPOT_SESSIONS", "2") // flags also read STOCKPOT_<FLAG>
	err := cmdBench([]string{"--target", s.URL, "--workload", "random", "--turns", "3", "--max-tokens", "2",
		"--prefix-tokens", "20", "--turn-tokens", "5", "--quiet", "--out", out})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Requests      int      `json:"requests"`
		Errors        int      `json:"errors"`
		ServerHitRate *float64 `json:"server_hit_rate"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 6 || rep.Errors != 0 || rep.ServerHitRate != nil {
		t.Errorf("report: have %+v, want 6 requests (2 sessions from the environment × 3), 0 errors, null server hit rate", rep)
	}
	if _, err := os.Stat(filepath.Join(out, "report.html")); err != nil {
		t.Error(err)
	}
}

// TestCmdBenchTools: --tools N runs the agent's tools mode on /v1/chat/completions (implied),
// every request carrying the N tool schemas, and the report names the mode and the count.
func TestCmdBenchTools(t *testing.T) {
	var requests, withTools atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Tools []json.RawMessage `json:"tools"`
		}
		json.NewDecoder(r.Body).Decode(&body)
		requests.Add(1)
		if len(body.Tools) == 9 {
			withTools.Add(1)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"completion_tokens\":1,\"total_tokens\":51}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	out := t.TempDir()
	err := cmdBench([]string{"--target", s.URL, "--workload", "agent", "--tools", "9", "--tool-result-tokens", "20",
		"--sessions", "2", "--turns", "3", "--concurrency", "1", "--max-tokens", "1", "--prefix-tokens", "20",
		"--turn-tokens", "5", "--quiet", "--out", out})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Requests int    `json:"requests"`
		Errors   int    `json:"errors"`
		Mode     string `json:"mode"`
		Tools    int    `json:"tools"`
		Endpoint string `json:"endpoint"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 6 || rep.Errors != 0 || rep.Mode != "tools" || rep.Tools != 9 || rep.Endpoint != "/v1/chat/completions" {
		t.Errorf("report: have %+v, want 6 requests, 0 errors, mode tools, 9 tools, /v1/chat/completions", rep)
	}
	if requests.Load() != 6 || withTools.Load() != 6 {
		t.Errorf("server saw %d requests, %d with 9 tools; want 6 and 6", requests.Load(), withTools.Load())
	}
}

func TestCmdBenchBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "nope", "--target", "http://127.0.0.1:1"}, "--workload"},
		{[]string{"--workload", "trace", "--target", "http://127.0.0.1:1"}, "--trace"},
		{[]string{"--target", "127.0.0.1:1"}, "http://"},
		{[]string{"--prices", "/nonexistent.json"}, "--prices"},
		{[]string{"extra"}, "unexpected"},
		{[]string{"--workload", "docqa", "--tools", "8", "--target", "http://127.0.0.1:1"}, "--tools"},
		{[]string{"--tools", "99", "--target", "http://127.0.0.1:1"}, "--tools"},
		{[]string{"--tools", "-1", "--target", "http://127.0.0.1:1"}, "--tools"},
	} {
		err := cmdBench(append(tc.args, "--quiet"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cmdBench(%q): have %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestCmdBenchLongCtx: --workload longctx takes --lengths and --admin-key, writes the longctx
// section, and refuses a malformed or out-of-range --lengths before sending anything.
func TestCmdBenchLongCtx(t *testing.T) {
	s := fakeCompletions(t) // no /v1/models, /tokenize, /metrics or cache API: cold and pool only
	out := t.TempDir()
	if err := cmdBench([]string{"--target", s.URL, "--workload", "longctx", "--lengths", "100, 200", "--quiet", "--out", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Workload string `json:"workload"`
		Requests int    `json:"requests"`
		LongCtx  *struct {
			Lengths []struct {
				Target int `json:"target_tokens"`
				Steps  []struct {
					Source string `json:"source"`
				} `json:"steps"`
			} `json:"lengths"`
			Notes []string `json:"notes"`
		} `json:"longctx"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Workload != "longctx" || rep.LongCtx == nil || len(rep.LongCtx.Lengths) != 2 || rep.LongCtx.Lengths[1].Target != 200 ||
		len(rep.LongCtx.Lengths[0].Steps) != 2 || rep.Requests != 4 {
		t.Errorf("report: %s", b)
	}
	if len(rep.LongCtx.Notes) == 0 || !strings.Contains(rep.LongCtx.Notes[0], "--admin-key") {
		t.Errorf("notes %q: want the missing --admin-key said", rep.LongCtx.Notes)
	}
	for _, c := range []struct{ lengths, want string }{
		{"32768,12x", `--lengths: "12x" is not a whole number`},
		{",", "--lengths: no lengths"},
		{"10", "--lengths: 10 tokens is outside"},
	} {
		err := cmdBench([]string{"--target", s.URL, "--workload", "longctx", "--lengths", c.lengths, "--quiet", "--out", t.TempDir()})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--lengths %q: %v, want %q", c.lengths, err, c.want)
		}
	}
}

// TestCmdBenchAccept: --accept against in-process servers. With the prefix cache on, every
// step passes (the second document's first question shares the template's first block, so
// it is warm, not cold) and cmdBench returns nil (exit status 0); with it off, the warm step fails and
// cmdBench returns bench.ErrAcceptFailed (main exits 1), after writing the reports with their
// accept section. Thresholds out of [0, 1] are refused before anything is sent.
func TestCmdBenchAccept(t *testing.T) {
	args := func(url, out string, extra ...string) []string {
		return append([]string{"--target", url, "--accept", "--workload", "docqa", "--sessions", "2", "--turns", "2",
			"--doc-tokens", "128", "--question-tokens", "8", "--max-tokens", "3", "--quiet", "--out", out}, extra...)
	}
	_, on := newTestInstance(t, nil)
	var b bytes.Buffer
	if err := benchTo(&b, args(on.URL, t.TempDir(), "--accept-warm-min", "0.995")); err != nil {
		t.Fatalf("prefix cache on: %v\n%s", err, b.String())
	}
	for _, re := range []string{`(?m)^docqa cold +any +0\.0% .*< 1\.0% of prompt +PASS`, `(?m)^docqa warm +device .*≥ 99\.5% of reusable +PASS`, `(?m)^accept: PASS \(2 steps\)$`} {
		if !regexp.MustCompile(re).MatchString(b.String()) {
			t.Errorf("no line matching %s in:\n%s", re, b.String())
		}
	}

	_, off := newTestInstance(t, func(o *serveOptions) { o.engine.PrefixCache = false })
	b.Reset()
	out := t.TempDir()
	err := benchTo(&b, args(off.URL, out))
	if !errors.Is(err, bench.ErrAcceptFailed) || !strings.Contains(err.Error(), "1 of 2 steps failed") {
		t.Fatalf("prefix cache off: err %v, want the gate failed\n%s", err, b.String())
	}
	if !regexp.MustCompile(`(?m)^docqa warm +none +0\.0% .* FAIL +reused 0 of \d+ reusable tokens \(no tier served any\)`).MatchString(b.String()) {
		t.Errorf("no FAIL line for the warm step in:\n%s", b.String())
	}
	var rep struct {
		Accept *struct {
			Pass  bool `json:"pass"`
			Steps []struct {
				Name     string `json:"name"`
				Pass     bool   `json:"pass"`
				Requests int    `json:"requests"`
				Missed   int    `json:"missed_requests"`
			} `json:"steps"`
		} `json:"accept"`
	}
	raw, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &rep); err != nil || rep.Accept == nil || rep.Accept.Pass || len(rep.Accept.Steps) != 2 ||
		rep.Accept.Steps[1].Missed < 2 || rep.Accept.Steps[1].Missed != rep.Accept.Steps[1].Requests {
		t.Errorf("report.json accept section: %+v (%v)", rep.Accept, err)
	}

	for _, bad := range [][]string{{"--accept-cold-max", "2"}, {"--accept-warm-min", "-0.5"}, {"--rate", "1"}} {
		err := benchTo(&b, args(on.URL, t.TempDir(), bad...))
		if err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: have %v, want an error naming %s", bad, err, bad[0])
		}
	}
}
