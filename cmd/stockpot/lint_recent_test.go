package main

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"stockpot/internal/lint"
	"stockpot/internal/pipeline"
)

// sendEntries sends every entry to a running serve (max_tokens 1, greedy) in log order, with
// the entry's session as X-Session-ID.
func sendEntries(t *testing.T, url, key string, entries []lint.Entry) {
	t.Helper()
	for _, e := range entries {
		// Only the top level changes: the tools and messages go as logged, in their key order.
		var body map[string]json.RawMessage
		if err := json.Unmarshal(e.Line.Body, &body); err != nil {
			t.Fatal(err)
		}
		body["max_tokens"], body["temperature"] = json.RawMessage("1"), json.RawMessage("0")
		delete(body, "model")
		b, _ := json.Marshal(body)
		path := e.Line.Path
		if path == "" {
			path = pipeline.DialectOf(e.Line.Body)
		}
		req, _ := http.NewRequest(http.MethodPost, url+path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-ID", e.Line.Session)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("line %d: %s: status %d: %s", e.Number, path, resp.StatusCode, out)
		}
	}
}

// TestLintRecent: the example log's requests sent to a real serve, then `lint --target URL
// --key KEY` with no log reads them back from GET /v1/requests/recent and reports what
// `lint --model` reports on the file (whose malformed line was never sent): the same rates,
// causes, sessions and divergences.
func TestLintRecent(t *testing.T) {
	_, ts := newTestInstance(t, func(o *serveOptions) {
		o.model, o.server.AdminKeys = defaultModel, []string{"adm"}
	})
	log := filepath.Join("..", "..", "examples", "lint", "agent.jsonl")
	f, err := os.Open(log)
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := readLog(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	sendEntries(t, ts.URL, "", entries)

	out, err := captureStdout(t, func() error { return cmdLint([]string{"--json", "--target", ts.URL, "--key", "adm"}) })
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
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
	t.Logf("recent: %d requests, %d sessions, rate %.3f, all fixed %.3f, causes %v", remote.Requests, remote.Sessions, remote.HitRate, remote.AllFixed, remote.Causes)
	if remote.Requests != local.Requests || remote.Sessions != local.Sessions || remote.PromptTokens != local.PromptTokens {
		t.Errorf("recent: %d requests in %d sessions, %d tokens; the file: %d in %d, %d",
			remote.Requests, remote.Sessions, remote.PromptTokens, local.Requests, local.Sessions, local.PromptTokens)
	}
	if remote.HitRate != local.HitRate || remote.AllFixed != local.AllFixed || !maps.Equal(remote.Causes, local.Causes) {
		t.Errorf("recent: rate %.3f all fixed %.3f causes %v; the file: %.3f %.3f %v",
			remote.HitRate, remote.AllFixed, remote.Causes, local.HitRate, local.AllFixed, local.Causes)
	}
	if len(remote.Fixes) != len(local.Fixes) {
		t.Errorf("recent fixes %+v, the file's %+v", remote.Fixes, local.Fixes)
	}
	for i := range min(len(remote.Fixes), len(local.Fixes)) {
		if r, l := remote.Fixes[i], local.Fixes[i]; r.Name != l.Name || r.HitRate != l.HitRate {
			t.Errorf("fix %d: recent %s %.3f, the file %s %.3f", i, r.Name, r.HitRate, l.Name, l.HitRate)
		}
	}
	if len(remote.Misses) != len(local.Misses) || len(remote.Malformed) != 0 {
		t.Errorf("recent: %d misses, malformed %+v; the file: %d misses", len(remote.Misses), remote.Malformed, len(local.Misses))
	}
	for i := range min(len(remote.Misses), len(local.Misses)) {
		if r, l := remote.Misses[i], local.Misses[i]; r.Session != l.Session || r.Cause != l.Cause || r.Detail != l.Detail || r.Offset != l.Offset {
			t.Errorf("miss %d: recent %s %s (%s) @%d, the file %s %s (%s) @%d", i, r.Session, r.Cause, r.Detail, r.Offset, l.Session, l.Cause, l.Detail, l.Offset)
		}
	}

	// The text report too, and the key from STOCKPOT_KEY.
	t.Setenv("STOCKPOT_KEY", "adm")
	text, err := captureStdout(t, func() error { return cmdLint([]string{"--target", ts.URL}) })
	if err != nil || !strings.Contains(text, "hit rate now: 26.6%") || !strings.Contains(text, "JSON keys reordered") {
		t.Errorf("text report (%v):\n%s", err, text)
	}
}

// TestLintRecentErrors: a wrong or missing key, or a serve without --admin-key, is a clear
// error naming the flag to pass; no LOG and no --target is a usage error.
func TestLintRecentErrors(t *testing.T) {
	_, on := newTestInstance(t, func(o *serveOptions) { o.server.AdminKeys = []string{"adm"} })
	_, off := newTestInstance(t, nil)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", on.URL}, "401: pass the server's --admin-key as --key"},
		{[]string{"--target", on.URL, "--key", "wrong"}, "401: the server refused --key"},
		{[]string{"--target", off.URL, "--key", "adm"}, "403: the server was started without --admin-key"},
		{[]string{"--model", defaultModel}, "want exactly one LOG.jsonl, or none with --target"},
	} {
		_, err := captureStdout(t, func() error { return cmdLint(c.args) })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lint %q: error %v, want %q", c.args, err, c.want)
		}
	}
	// Nothing sent yet: an empty report, not an error.
	out, err := captureStdout(t, func() error { return cmdLint([]string{"--target", on.URL, "--key", "adm"}) })
	if err != nil || !strings.Contains(out, "0 requests") {
		t.Errorf("empty ring: %v\n%s", err, out)
	}
}
