package main

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stockpot/internal/lint"
	"stockpot/internal/miss"
	"stockpot/internal/pipeline"
)

// lintFile runs the lint analysis as `stockpot lint --model synthetic:default` does.
func lintFile(t *testing.T, tok pipeline.Tokenizer, path string) lint.Report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, bad, err := readLog(f)
	if err != nil {
		t.Fatal(err)
	}
	rep := lint.Analyze(entries, func(l lint.Line) (lint.Prompt, error) { return renderLocal(tok, l) }, tok, lint.Config{BlockSize: 16})
	rep.Malformed = append(bad, rep.Malformed...)
	return rep
}

func writeEntries(t *testing.T, path string, entries []lint.Entry) {
	t.Helper()
	var b strings.Builder
	for _, e := range entries {
		line, err := json.Marshal(map[string]any{"session_id": e.Line.Session, "body": json.RawMessage(e.Line.Body)})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLintExamples: on the shipped example log lint finds every planted cause where it was
// planted, reports the malformed line and goes on, and each fix's estimated hit rate is
// within 2 points of what linting the actually fixed log gives.
func TestLintExamples(t *testing.T) {
	lf, err := openModel(defaultModel, nopWriter{})
	if err != nil {
		t.Fatal(err)
	}
	tok := pipeline.FromTokenizer(lf.tok)
	path := filepath.Join("..", "..", "examples", "lint", "agent.jsonl")
	rep := lintFile(t, tok, path)

	if rep.Requests != 21 || rep.Sessions != 6 {
		t.Errorf("%d requests in %d sessions, want 21 in 6", rep.Requests, rep.Sessions)
	}
	if len(rep.Malformed) != 1 || rep.Malformed[0].Line != 11 {
		t.Errorf("malformed %+v, want line 11 only", rep.Malformed)
	}
	planted := map[string]struct {
		cause  miss.Cause
		detail string
	}{
		"stamp":  {miss.Timestamp, "a date or time differs"},
		"tools":  {miss.Reordered, "tools reordered"},
		"keys":   {miss.Reordered, "JSON keys reordered"},
		"spaces": {miss.Whitespace, "whitespace differs"},
	}
	found := map[string]int{}
	for _, m := range rep.Misses {
		want, ok := planted[m.Session]
		if !ok {
			t.Errorf("line %d: a %s miss in session %q, where nothing was planted", m.Line, m.Cause, m.Session)
			continue
		}
		if m.Cause != want.cause || m.Detail != want.detail {
			t.Errorf("line %d (session %s): %s (%s), want %s (%s)", m.Line, m.Session, m.Cause, m.Detail, want.cause, want.detail)
		}
		found[m.Session]++
	}
	for s := range planted {
		if found[s] != 3 { // every request after a session's first
			t.Errorf("session %s: %d misses found, want 3", s, found[s])
		}
	}
	if rep.Causes[miss.Template] != 0 || rep.Causes[miss.UUID] != 0 {
		t.Errorf("causes %v: nothing planted for template or uuid", rep.Causes)
	}

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := readLog(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	check := func(name string, estimate float64, fixed []lint.Entry) {
		p := filepath.Join(dir, name+".jsonl")
		writeEntries(t, p, fixed)
		again := lintFile(t, tok, p)
		t.Logf("%s: estimated %.1f%%, the fixed log lints at %.1f%%", name, 100*estimate, 100*again.HitRate)
		if !(math.Abs(again.HitRate-estimate) <= 0.02) {
			t.Errorf("%s: estimated %.1f%%, the fixed log lints at %.1f%%", name, 100*estimate, 100*again.HitRate)
		}
		if again.HitRate <= rep.HitRate {
			t.Errorf("%s: fixing did not raise the hit rate (%.1f%% -> %.1f%%)", name, 100*rep.HitRate, 100*again.HitRate)
		}
	}
	if len(rep.Fixes) != 3 {
		t.Fatalf("fixes %+v, want timestamps, order and whitespace", rep.Fixes)
	}
	for _, fx := range rep.Fixes {
		for _, f := range lint.Fixers {
			if f.Name == fx.Name {
				check(fx.Name, fx.HitRate, lint.Apply(entries, f))
			}
		}
	}
	check("all", rep.AllFixed, lint.FixAll(entries))
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// replayRate sends every entry to a real serve (max_tokens 1, greedy) in log order and
// returns the share of prompt tokens its usage reports cached.
func replayRate(t *testing.T, url string, entries []lint.Entry) float64 {
	t.Helper()
	cached, prompt := 0, 0
	for _, e := range entries {
		// Only the top level changes: the tools and messages go as logged, in their key order.
		var body map[string]json.RawMessage
		if err := json.Unmarshal(e.Line.Body, &body); err != nil {
			t.Fatal(err)
		}
		body["max_tokens"], body["temperature"] = json.RawMessage("1"), json.RawMessage("0")
		delete(body, "model") // the log names the model it was sent to
		path := e.Line.Path
		if path == "" {
			path = pipeline.DialectOf(e.Line.Body)
		}
		code, out := post(t, url+path, body)
		if code != 200 {
			t.Fatalf("line %d: %s: status %d: %s", e.Number, path, code, out)
		}
		var r struct {
			Usage struct {
				Cache struct {
					Device   int `json:"device_tokens"`
					Host     int `json:"host_tokens"`
					Disk     int `json:"disk_tokens"`
					Remote   int `json:"remote_tokens"`
					Computed int `json:"computed_tokens"`
				} `json:"cache"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatal(err)
		}
		c := r.Usage.Cache
		cached += c.Device + c.Host + c.Disk + c.Remote
		prompt += c.Device + c.Host + c.Disk + c.Remote + c.Computed
	}
	return float64(cached) / float64(prompt)
}

// TestLintMatchesServe: lint's hit rate, now and with every cause fixed, is within 2 points
// of what a real serve (same model, same block size) reports for the same requests replayed.
func TestLintMatchesServe(t *testing.T) {
	if testing.Short() {
		t.Skip("replays 40 requests through the default model")
	}
	lf, err := openModel(defaultModel, nopWriter{})
	if err != nil {
		t.Fatal(err)
	}
	tok := pipeline.FromTokenizer(lf.tok)
	f, err := os.Open(filepath.Join("..", "..", "examples", "lint", "agent.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := readLog(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	render := func(l lint.Line) (lint.Prompt, error) { return renderLocal(tok, l) }
	rep := lint.Analyze(entries, render, tok, lint.Config{BlockSize: 16})
	for _, run := range []struct {
		name     string
		entries  []lint.Entry
		estimate float64
	}{{"now", entries, rep.HitRate}, {"all fixed", lint.FixAll(entries), rep.AllFixed}} {
		_, ts := newTestInstance(t, func(o *serveOptions) {
			o.model = defaultModel
			o.engine.KVMemory = 512 << 20 // nothing evicted: lint's cache is unbounded
		})
		got := replayRate(t, ts.URL, run.entries)
		t.Logf("%s: lint %.1f%%, serve %.1f%%", run.name, 100*run.estimate, 100*got)
		if !(math.Abs(got-run.estimate) <= 0.02) {
			t.Errorf("%s: lint says %.1f%%, a replay through serve reuses %.1f%%", run.name, 100*run.estimate, 100*got)
		}
	}
}

// captureStdout runs fn with os.Stdout going to a pipe and returns what it wrote.
func captureStdout(t *testing.T, fn func() error) (string, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		var b strings.Builder
		buf := make([]byte, 1<<16)
		for {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		done <- []byte(b.String())
	}()
	ferr := fn()
	os.Stdout = old
	w.Close()
	out := <-done
	r.Close()
	return string(out), ferr
}

// TestLintCommand: the CLI's text and JSON reports and its exit status for CI.
func TestLintCommand(t *testing.T) {
	log := filepath.Join("..", "..", "examples", "lint", "agent.jsonl")
	out, err := captureStdout(t, func() error { return cmdLint([]string{"--json", "--fail-under", "0.8", log}) })
	if !errors.Is(err, lint.ErrUnder) {
		t.Errorf("--fail-under 0.8 on a 27%% log: error %v, want ErrUnder", err)
	}
	var rep lint.Report
	if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
		t.Fatalf("--json output: %v\n%s", jerr, out)
	}
	if rep.Requests != 21 || len(rep.Fixes) != 3 || rep.Malformed[0].Line != 11 {
		t.Errorf("JSON report: %d requests, fixes %+v, malformed %+v", rep.Requests, rep.Fixes, rep.Malformed)
	}
	out, err = captureStdout(t, func() error { return cmdLint([]string{"--fail-under", "0.2", log}) })
	if err != nil {
		t.Errorf("--fail-under 0.2: %v", err)
	}
	for _, want := range []string{"hit rate now: 26.6%", "fix timestamps", "fix order", "fix whitespace", "tools reordered", "JSON keys reordered", "line 11: skipped"} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	clean := filepath.Join("..", "..", "examples", "lint", "clean.jsonl")
	if _, err := captureStdout(t, func() error { return cmdLint([]string{"--fail-under", "0.6", clean}) }); err != nil {
		t.Errorf("clean log under 0.6: %v", err)
	}
	for _, args := range [][]string{{}, {"a", "b"}, {"--fail-under", "2", log}, {"--block-size", "0", log}, {"/nonexistent.jsonl"}} {
		if _, err := captureStdout(t, func() error { return cmdLint(args) }); err == nil {
			t.Errorf("lint %q: no error", args)
		}
	}
}

// TestLintTarget: --target tokenizes through a running serve's /tokenize and decodes through
// /detokenize, and finds what the local model finds.
func TestLintTarget(t *testing.T) {
	_, ts := newTestInstance(t, func(o *serveOptions) { o.model = defaultModel })
	log := filepath.Join("..", "..", "examples", "lint", "agent.jsonl")
	out, err := captureStdout(t, func() error { return cmdLint([]string{"--json", "--target", ts.URL, log}) })
	if err != nil {
		t.Fatal(err)
	}
	var remote lint.Report
	if err := json.Unmarshal([]byte(out), &remote); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lf, err := openModel(defaultModel, nopWriter{})
	if err != nil {
		t.Fatal(err)
	}
	local := lintFile(t, pipeline.FromTokenizer(lf.tok), log)
	if remote.HitRate != local.HitRate || remote.AllFixed != local.AllFixed || len(remote.Misses) != len(local.Misses) {
		t.Errorf("--target: rate %.3f all fixed %.3f, %d misses; --model: %.3f %.3f %d",
			remote.HitRate, remote.AllFixed, len(remote.Misses), local.HitRate, local.AllFixed, len(local.Misses))
	}
	for i := range min(len(remote.Misses), len(local.Misses)) {
		if r, l := remote.Misses[i], local.Misses[i]; r.Line != l.Line || r.Cause != l.Cause || r.Offset != l.Offset {
			t.Errorf("miss %d: --target line %d %s@%d, --model line %d %s@%d", i, r.Line, r.Cause, r.Offset, l.Line, l.Cause, l.Offset)
		}
	}
}
