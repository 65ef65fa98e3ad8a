package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// waitUntil polls cond until it holds; the deadline only turns a hang into a failure.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// promptIDs is a prompt of n token ids from seed (ids kept inside the tiny vocabulary).
func promptIDs(seed, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = 3 + (seed*7919+i*31)%200
	}
	return p
}

// TestEngineEvidenceAgreesWithUsage: over HTTP, the engine's own counters
// (stockpot_engine_prompt_tokens_total, counted in the scheduler) equal the usage sums
// (stockpot_prompt_tokens_total) for every request a client read to the end, and also count a
// request its client abandoned mid-stream, which the usage sums never see.
func TestEngineEvidenceAgreesWithUsage(t *testing.T) {
	_, ts := newTestInstance(t, nil)
	shared := promptIDs(1, 100)
	for i := range 4 {
		p := append(append([]int(nil), shared...), promptIDs(10+i, 20+i)...)
		completion(t, ts, map[string]any{"prompt": p, "max_tokens": 3, "temperature": 0})
	}
	completion(t, ts, map[string]any{"prompt": shared, "max_tokens": 3, "temperature": 0})
	// Blended: two chunks, cached by the first request, found by the second in the other order.
	docA, docB, q := promptIDs(40, 64), promptIDs(41, 64), promptIDs(42, 10)
	for _, docs := range [][2][]int{{docA, docB}, {docB, docA}} {
		p := append(append(append(append([]int(nil), shared[:20]...), docs[0]...), docs[1]...), q...)
		if code, out := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 3, "temperature": 0,
			"blend": map[string]any{"chunks": [][2]int{{20, 84}, {84, 148}}, "recompute": 0.2}}); code != 200 {
			t.Fatalf("blended completion: status %d: %s", code, out)
		}
	}

	// Abandoned: a cold prompt, streamed; the client hangs up after the first event.
	abandoned := promptIDs(99, 300)
	body, _ := json.Marshal(map[string]any{"prompt": abandoned, "max_tokens": 400, "stream": true, "ignore_eos": true})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	cancel()
	resp.Body.Close()
	waitUntil(t, "the engine to count the abandoned request", func() bool {
		return scrape(t, ts.URL)["stockpot_engine_requests_cancelled_total"] == 1
	})
	waitUntil(t, "the server to count a 499", func() bool {
		return scrape(t, ts.URL)[`stockpot_requests_total{status="499"}`] == 1
	})
	m := scrape(t, ts.URL)
	for _, src := range []string{"device", "host", "disk", "remote", "computed", "blended"} {
		usage := m[`stockpot_prompt_tokens_total{source="`+src+`"}`]
		eng := m[`stockpot_engine_prompt_tokens_total{source="`+src+`"}`]
		want := usage
		if src == "computed" {
			want += float64(len(abandoned)) // cold: all of it computed, in the engine's count only
		}
		if eng != want {
			t.Errorf("source %s: engine %v, usage %v, want engine %v", src, eng, usage, want)
		}
	}
	if m[`stockpot_prompt_tokens_total{source="device"}`] == 0 || m[`stockpot_engine_prompt_tokens_total{source="blended"}`] == 0 {
		t.Error("the scenario reused or blended nothing")
	}
	hits := m[`stockpot_engine_requests_total{hit="cold"}`] + m[`stockpot_engine_requests_total{hit="partial"}`] + m[`stockpot_engine_requests_total{hit="warm"}`]
	if hits != 8 {
		t.Errorf("engine requests by hit class sum to %v, want 8", hits)
	}
	if m[`stockpot_engine_requests_total{hit="partial"}`] == 0 || m[`stockpot_engine_requests_total{hit="warm"}`] == 0 {
		t.Errorf("want partial and warm hits: %v", m)
	}
	var byHit float64
	for _, h := range []string{"cold", "partial", "warm"} {
		byHit += m[`stockpot_time_to_first_token_by_hit_seconds_count{hit="`+h+`"}`]
	}
	if byHit != m["stockpot_time_to_first_token_seconds_count"] || byHit != 7 {
		t.Errorf("TTFT by hit class counts %v, unsplit %v, want 7", byHit, m["stockpot_time_to_first_token_seconds_count"])
	}

	// The dashboard's ring has every request, the abandoned one as a 499.
	st := dashboardState(t, ts.URL, "")
	if len(st.Requests) != 8 || st.Requests[7].Status != 499 {
		t.Fatalf("dashboard requests: %+v", st.Requests)
	}
	if b := st.Requests[6]; b.BlendedTokens == 0 || b.ReusedTokens+b.ComputedTokens+b.BlendedTokens != b.PromptTokens {
		t.Errorf("evidence chain of the reordered blend: %+v", b)
	}
	last := st.Requests[4]
	if last.Hit != "warm" || last.MatchedBlocks["device"] != 99/16 || last.ReusedTokens+last.ComputedTokens != last.PromptTokens {
		t.Errorf("evidence chain of the repeat: %+v", last)
	}
}

type dashState struct {
	Snapshot struct {
		Metrics map[string]any `json:"metrics"`
		Cache   *struct {
			Blocks int               `json:"blocks"`
			Tree   []json.RawMessage `json:"tree"`
		} `json:"cache"`
	} `json:"snapshot"`
	Requests []struct {
		Status         int            `json:"status"`
		Hit            string         `json:"hit"`
		PromptTokens   int            `json:"prompt_tokens"`
		MatchedBlocks  map[string]int `json:"matched_blocks"`
		ReusedTokens   int            `json:"reused_tokens"`
		ComputedTokens int            `json:"computed_tokens"`
		BlendedTokens  int            `json:"blended_tokens"`
	} `json:"requests"`
	Notes []struct {
		Mode string `json:"mode"`
	} `json:"notes"`
}

func dashboardState(t testing.TB, base, key string) dashState {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/dashboard/state", nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/dashboard/state: %d %s", resp.StatusCode, b)
	}
	var st dashState
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestDashboardAuth: with a dashboard key the dashboard's three paths need it, as a header or
// as ?key= (what the page's EventSource sends), and the API key gets a 403; the page is
// self-contained HTML.
func TestDashboardAuth(t *testing.T) {
	_, ts := newTestInstance(t, func(o *serveOptions) { o.server.APIKeys, o.server.DashboardKeys = []string{"sekrit"}, []string{"dash"} })
	for _, p := range []string{"/dashboard", "/dashboard/events", "/dashboard/state"} {
		resp, err := http.Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a key: %d, want 401", p, resp.StatusCode)
		}
		resp, err = http.Get(ts.URL + p + "?key=wrong")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with a wrong key: %d, want 401", p, resp.StatusCode)
		}
	}
	resp, err := http.Get(ts.URL + "/dashboard?key=sekrit")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("dashboard with the API key: %d, want 403", resp.StatusCode)
	}
	resp, err = http.Get(ts.URL + "/dashboard?key=dash")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("page: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"uPlot", "/dashboard/events", "The MIT License"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, never := range []string{"<script src", "<link rel=\"stylesheet", "@import", "url(http"} {
		if i := bytes.Index(page, []byte(never)); i >= 0 {
			t.Errorf("page loads something: %q at %d", never, i)
		}
	}
	// The query key is for the dashboard only: the API still wants the header.
	resp, err = http.Get(ts.URL + "/v1/models?key=sekrit")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/v1/models with ?key=: %d, want 401 (the query key is for the dashboard only)", resp.StatusCode)
	}
	dashboardState(t, ts.URL, "dash")

	// An admin key opens the dashboard (every tenant's traffic and cache contents) too; the
	// client API key never does.
	_, ats := newTestInstance(t, func(o *serveOptions) { o.server.APIKeys, o.server.AdminKeys = []string{"sekrit"}, []string{"adm"} })
	for key, want := range map[string]int{"sekrit": http.StatusForbidden, "adm": http.StatusOK, "": http.StatusUnauthorized} {
		resp, err := http.Get(ats.URL + "/dashboard/state?key=" + key)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("dashboard with admin keys, key %q: %d, want %d", key, resp.StatusCode, want)
		}
	}
}

// TestDemoHeadless runs `stockpot demo --headless`: the four modes run in order, every
// execute step's cached tokens equal the demo's block-aligned prediction, the page has a
// note for each mode, and it exits cleanly.
func TestDemoHeadless(t *testing.T) {
	var out bytes.Buffer
	var base string
	var notes []string
	// A port this process holds (not port 0): once the demo is gone, nobody else can be
	// listening on it, so "nothing answers" below says the demo closed it.
	addr := freePort(t)
	sum, err := runDemo(context.Background(), demoOptions{model: "synthetic:tiny-llama-spm", addr: addr, threads: 2, headless: true, burst: 8, out: &out,
		onURL: func(u string) { base = strings.TrimSuffix(u, "/dashboard?demo=1") },
		hold: func() {
			for _, n := range dashboardState(t, base, "").Notes {
				if len(notes) == 0 || notes[len(notes)-1] != n.Mode { // one per execute step
					notes = append(notes, n.Mode)
				}
			}
		}})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"[start]", "[execute 1/6]", "[execute 6/6]", "[monitor]", "[complete]", "(T−1)", "(T+1)", "stockpot demo: done"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Join(notes, ",") != "start,execute,monitor,complete" {
		t.Errorf("the page's notes: %v", notes)
	}
	if sum.Requests != 14 || sum.CachedTokens == 0 {
		t.Errorf("summary %+v", sum)
	}
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "[execute") {
			continue
		}
		var pred, got int
		i := strings.Index(l, "predicted ")
		if _, err := fmtSscanf(l[i:], "predicted %d cached, server reported %d", &pred, &got); err != nil || pred != got {
			t.Errorf("step %q: predicted %d, server %d (%v)", l, pred, got, err)
		}
	}
	// The server is gone: nothing listens any more.
	if _, err := http.Get(base + "/health"); err == nil {
		t.Error("the demo's server still answers after it returned")
	}
}

func fmtSscanf(s, format string, args ...any) (int, error) { return fmt.Sscanf(s, format, args...) }

// TestDemoCommand: the CLI itself, headless, exits cleanly; a bad flag is an error.
func TestDemoCommand(t *testing.T) {
	if err := run([]string{"demo", "--headless", "--addr", "127.0.0.1:0", "--model", "synthetic:tiny-llama-spm", "--threads", "2", "--burst", "2"}); err != nil {
		t.Fatalf("stockpot demo --headless: %v", err)
	}
	if err := run([]string{"demo", "--burst", "0"}); err == nil || !strings.Contains(err.Error(), "--burst") {
		t.Errorf("--burst 0: %v", err)
	}
}
