package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRecentRingBounds: the ring keeps at most maxRecentRequests entries and maxRecentBytes
// of bodies, dropping the oldest, and keeps an oversized body's entry without its body.
func TestRecentRingBounds(t *testing.T) {
	var rr recentRing
	for i := range maxRecentRequests + 10 {
		rr.add(RecentRequest{Path: "/v1/completions", Body: []byte(fmt.Sprintf(`{"prompt": "p%d"}`, i))})
	}
	all := rr.last(0)
	if len(all) != maxRecentRequests {
		t.Fatalf("%d entries, want %d", len(all), maxRecentRequests)
	}
	if got := string(all[0].Body); got != `{"prompt":"p10"}` {
		t.Errorf("oldest kept %s, want p10 (compacted)", got)
	}
	if got := string(all[len(all)-1].Body); got != fmt.Sprintf(`{"prompt":"p%d"}`, maxRecentRequests+9) {
		t.Errorf("newest %s", got)
	}
	if got := rr.last(3); len(got) != 3 || string(got[2].Body) != string(all[len(all)-1].Body) || string(got[0].Body) != string(all[len(all)-3].Body) {
		t.Errorf("last(3): %v", got)
	}

	// Bytes: 1 MiB-ish bodies; the ring never holds more than maxRecentBytes of them.
	big := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"prompt":"%d%s"}`, i, strings.Repeat("x", maxRecentBody-40)))
	}
	var br recentRing
	for i := range 20 {
		br.add(RecentRequest{Body: big(i)})
		if br.bytes > maxRecentBytes {
			t.Fatalf("after %d adds: %d body bytes, over %d", i+1, br.bytes, maxRecentBytes)
		}
	}
	got := br.last(0)
	sum := 0
	for _, e := range got {
		sum += len(e.Body)
	}
	if sum != br.bytes || len(got) != maxRecentBytes/len(big(10)) {
		t.Errorf("%d entries of %d bytes (accounted %d), want %d", len(got), sum, br.bytes, maxRecentBytes/len(big(10)))
	}
	if !bytes.HasPrefix(got[len(got)-1].Body, []byte(`{"prompt":"19`)) {
		t.Errorf("newest is not the last added")
	}

	// Oversized: recorded, skipped, no body, no bytes.
	before := br.bytes
	br.add(RecentRequest{Path: "/v1/chat/completions", SessionID: "s", Body: []byte(`{"prompt":"` + strings.Repeat("y", maxRecentBody) + `"}`)})
	got = br.last(1)
	if got[0].Body != nil || !strings.Contains(got[0].Skipped, "over the") || got[0].SessionID != "s" || br.bytes != before {
		t.Errorf("oversized body: %+v, bytes %d -> %d", got[0], before, br.bytes)
	}
	line, _ := json.Marshal(got[0])
	if !strings.Contains(string(line), `"body":null`) {
		t.Errorf("oversized line %s: want body null", line)
	}
}

// TestRecentRequests: each generation dialect's accepted request is recorded with its path,
// time and X-Session-ID, oldest first; a refused one (4xx) is not; the route takes the admin
// key alone.
func TestRecentRequests(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s, _, _ := newAdminServer(t, func(c *Config) { c.Now = func() time.Time { return at } })
	h := s.Handler()
	api := []string{"Authorization", "Bearer api"}
	sent := []struct{ path, body, session string }{
		{"/v1/completions", `{"prompt": "abc", "max_tokens": 2}`, "s1"},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi <b>"}],"max_tokens":2}`, ""},
		{"/v1/responses", `{"input":"hello","max_output_tokens":2}`, "s2"},
		{"/v1/messages", `{"max_tokens":2,"messages":[{"role":"user","content":"q"}]}`, "s2"},
	}
	for _, r := range sent {
		hdr := append([]string{}, api...)
		if r.session != "" {
			hdr = append(hdr, "X-Session-ID", r.session)
		}
		if rec := do(h, "POST", r.path, r.body, hdr...); rec.Code != 200 {
			t.Fatalf("%s: HTTP %d: %s", r.path, rec.Code, rec.Body)
		}
	}
	for _, r := range [][2]string{
		{"/v1/chat/completions", `{"messages":`},                             // does not parse
		{"/v1/completions", `{"model":"other","prompt":"x"}`},                // wrong model
		{"/v1/completions", `{"prompt":"` + strings.Repeat("a", 300) + `"}`}, // over the prompt limit
		{"/v1/messages/count_tokens", `{"messages":[{"role":"user","content":"q"}]}`},
	} {
		if rec := do(h, "POST", r[0], r[1], api...); rec.Code == 200 && r[0] != "/v1/messages/count_tokens" {
			t.Fatalf("%s %s: HTTP 200, want a refusal", r[0], r[1])
		}
	}

	rec := do(h, "GET", recentRequestsPath, "", "Authorization", adminAuth)
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("HTTP %d %s: %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	page := rec.Body.String()
	var got []RecentRequest
	sc := bufio.NewScanner(strings.NewReader(page))
	for sc.Scan() {
		var e RecentRequest
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, e)
	}
	if len(got) != len(sent) {
		t.Fatalf("%d recorded, want %d: %s", len(got), len(sent), page)
	}
	for i, r := range sent {
		var want bytes.Buffer
		_ = json.Compact(&want, []byte(r.body))
		if e := got[i]; e.Path != r.path || e.SessionID != r.session || !e.At.Equal(at) || string(e.Body) != want.String() {
			t.Errorf("entry %d: %+v (body %s), want %s %q %s", i, e, e.Body, r.path, r.session, want.String())
		}
	}
	if !strings.Contains(page, `"hi <b>"`) {
		t.Errorf("bodies are HTML-escaped: %s", page)
	}
	rec = do(h, "GET", recentRequestsPath+"?limit=2", "", "x-api-key", "adm")
	if n := strings.Count(rec.Body.String(), "\n"); rec.Code != 200 || n != 2 || !strings.Contains(rec.Body.String(), "/v1/messages") {
		t.Errorf("limit=2: HTTP %d, %d lines: %s", rec.Code, n, rec.Body)
	}
	for _, q := range []string{"0", "257", "x"} {
		if rec := do(h, "GET", recentRequestsPath+"?limit="+q, "", "Authorization", adminAuth); rec.Code != http.StatusBadRequest {
			t.Errorf("limit=%s: HTTP %d, want 400", q, rec.Code)
		}
	}

	// Auth: 401 for a missing or wrong key, 403 for the API key; 403 (and nothing recorded)
	// without an admin key.
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}} {
		if rec := do(h, "GET", recentRequestsPath, "", hdr...); rec.Code != http.StatusUnauthorized {
			t.Errorf("GET with %q: HTTP %d, want 401", hdr, rec.Code)
		}
	}
	if rec := do(h, "GET", recentRequestsPath, "", api...); rec.Code != http.StatusForbidden {
		t.Errorf("GET with the API key: HTTP %d, want 403", rec.Code)
	}
	off, _, _ := newAdminServer(t, func(c *Config) { c.AdminKeys = nil })
	if rec := do(off.Handler(), "POST", "/v1/completions", sent[0].body, api...); rec.Code != 200 {
		t.Fatalf("HTTP %d", rec.Code)
	}
	if rec := do(off.Handler(), "GET", recentRequestsPath, "", api...); rec.Code != http.StatusForbidden {
		t.Errorf("without --admin-key: HTTP %d, want 403", rec.Code)
	}
	if n := len(off.recent.last(0)); n != 0 {
		t.Errorf("without --admin-key %d requests recorded, want none", n)
	}
	if rec := do(h, "POST", recentRequestsPath, "", "Authorization", adminAuth); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: HTTP %d, want 405", rec.Code)
	}
}
