package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"stockpot/internal/portlock"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// stockpotBinary builds cmd/stockpot once per test binary, into a temporary directory.
func stockpotBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "stockpot-bench-test-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "stockpot")
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("go not on PATH: %w", err)
			return
		}
		cmd := exec.Command(goBin, "build", "-o", binPath, "stockpot/cmd/stockpot")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// freeAddr is a loopback address whose port this test process holds (portlock): nobody else is
// told it, and the kernel hands it out to no one, before the child binds it.
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := portlock.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// startServer runs `stockpot serve` (the default model unless args name another) and waits
// for /health.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	bin := stockpotBinary(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, append([]string{"serve", "--addr", addr}, args...)...)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	base := "http://" + addr
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("stockpot serve did not become healthy in 3 minutes; log:\n%s", log.String())
	return ""
}

// TestAgentHitRateMatchesPrediction runs the agent workload (T = 10) against a real Stockpot
// and checks the server's counters against the block-aligned prediction, and the report's
// server numbers against deltas of counters this test scrapes itself.
func TestAgentHitRateMatchesPrediction(t *testing.T) {
	base := startServer(t)
	ctx := context.Background()
	hc := &http.Client{Timeout: 10 * time.Second}
	before, err := scrape(ctx, hc, base, "")
	if err != nil || !before.Present {
		t.Fatalf("scrape before: %+v, %v", before, err)
	}
	cfg := DefaultConfig()
	cfg.Target, cfg.Workload = base, "agent"
	cfg.Sessions, cfg.Turns, cfg.Concurrency = 2, 10, 2
	cfg.PrefixTokens, cfg.TurnTokens, cfg.MaxTokens = 160, 24, 8
	cfg.ScrapeInterval = 500 * time.Millisecond
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	after, err := scrape(ctx, hc, base, "")
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 20 || rep.Errors != 0 {
		t.Fatalf("requests/errors: have %d/%d, want 20/0: %v", rep.Requests, rep.Errors, rep.ErrorSample)
	}
	if rep.ServerHitRate == nil || rep.PredictedHitRate == nil || rep.ClientCachedRatio == nil {
		t.Fatalf("hit rates: server %v, predicted %v, client %v; want all reported", rep.ServerHitRate, rep.PredictedHitRate, rep.ClientCachedRatio)
	}
	t.Logf("agent T=10: predicted %.4f, server %.4f, client %.4f, naive %.4f (basis: %s)",
		*rep.PredictedHitRate, *rep.ServerHitRate, *rep.ClientCachedRatio, *rep.NaiveHitRate, rep.PredictionBasis)
	if d := math.Abs(*rep.ServerHitRate - *rep.PredictedHitRate); d > 0.05 {
		t.Errorf("server hit rate %.4f vs predicted %.4f: off by %.1f points, want ≤ 5", *rep.ServerHitRate, *rep.PredictedHitRate, d*100)
	}
	// Nobody else talks to this server, so its counter deltas are exactly the run's.
	dq, dh := after.Queries-before.Queries, after.Hits-before.Hits
	if *rep.ServerQueries != dq || *rep.ServerHits != dh || *rep.ServerHitRate != dh/dq {
		t.Errorf("report server numbers %v/%v = %v, want the scraped deltas %v/%v = %v",
			*rep.ServerHits, *rep.ServerQueries, *rep.ServerHitRate, dh, dq, dh/dq)
	}
	if int64(dq) != rep.PromptTokens {
		t.Errorf("queries delta %v, want Σ usage.prompt_tokens %d", dq, rep.PromptTokens)
	}
	if rep.PerTier == nil || rep.PerTier["device"] != dh || rep.PerTier["computed"] != dq-dh {
		t.Errorf("per_tier %v: want device %v and computed %v", rep.PerTier, dh, dq-dh)
	}
	if rep.TTFT == nil || rep.TPOT == nil || rep.TTFTCold == nil || rep.TTFTWarm == nil {
		t.Errorf("latencies missing: ttft %v tpot %v cold %v warm %v", rep.TTFT, rep.TPOT, rep.TTFTCold, rep.TTFTWarm)
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	checkReportJSON(t, filepath.Join(dir, "report.json"), false)
	checkHTMLInChromium(t, filepath.Join(dir, "report.html"))
}

// fakeOpenAI is an OpenAI-compatible server that reports no cached_tokens and has no /metrics
// and no /tokenize.
func fakeOpenAI(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	})
	handler := func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		if _, ok := body["return_token_ids"]; ok {
			http.Error(w, `{"error":{"message":"unknown field return_token_ids"}}`, 400)
			return
		}
		chat := strings.Contains(r.URL.Path, "chat")
		prompt := fmt.Sprint(body["prompt"], body["messages"])
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < 4; i++ {
			if chat {
				fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" w%d\"}}]}\n\n", i)
			} else {
				fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\" w%d\"}]}\n\n", i)
			}
			fl.Flush()
			time.Sleep(time.Millisecond)
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":4,\"total_tokens\":%d}}\n\n",
			len(prompt)/4, len(prompt)/4+4)
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
	mux.HandleFunc("POST /v1/completions", handler)
	mux.HandleFunc("POST /v1/chat/completions", handler)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// TestOtherServerNotReported: a target without cached_tokens and /metrics gets null and "not
// reported", never 0.
func TestOtherServerNotReported(t *testing.T) {
	for _, chat := range []bool{false, true} {
		t.Run(fmt.Sprintf("chat=%v", chat), func(t *testing.T) {
			s := fakeOpenAI(t)
			cfg := DefaultConfig()
			cfg.Target, cfg.Workload, cfg.Chat = s.URL, "sysprompt", chat
			cfg.Sessions, cfg.Turns = 2, 3
			rep, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Requests != 6 || rep.Errors != 0 {
				t.Fatalf("requests/errors: have %d/%d: %v", rep.Requests, rep.Errors, rep.ErrorSample)
			}
			if rep.ServerHitRate != nil || rep.ServerMetrics != "not reported" || rep.PerTier != nil {
				t.Errorf("server: have %v %q %v, want null, \"not reported\", null", rep.ServerHitRate, rep.ServerMetrics, rep.PerTier)
			}
			if rep.ClientCachedRatio != nil || rep.ClientCached != "not reported" || rep.CachedTokens != nil {
				t.Errorf("client: have %v %q %v, want null, \"not reported\", null", rep.ClientCachedRatio, rep.ClientCached, rep.CachedTokens)
			}
			if rep.TTFT == nil || rep.TPOT == nil {
				t.Error("latencies: want them measured from the stream")
			}
			if rep.PredictedHitRate == nil || !strings.Contains(rep.PredictionBasis, "characters") {
				t.Errorf("prediction: have %v (%s), want a character-based estimate", rep.PredictedHitRate, rep.PredictionBasis)
			}
			var tbl strings.Builder
			rep.WriteTable(&tbl)
			for _, l := range strings.Split(tbl.String(), "\n") {
				if strings.HasPrefix(l, "server hit rate") || strings.HasPrefix(l, "client cached ratio") {
					if !strings.Contains(l, "not reported") || strings.Contains(l, "0.0%") {
						t.Errorf("table line %q: want \"not reported\", never 0", l)
					}
				}
			}
			dir := t.TempDir()
			if err := rep.WriteFiles(dir); err != nil {
				t.Fatal(err)
			}
			checkReportJSON(t, filepath.Join(dir, "report.json"), true)
			if !chat {
				checkHTMLInChromium(t, filepath.Join(dir, "report.html"))
			}
		})
	}
}

// checkReportJSON checks the contract's keys are there and, when notReported, that the
// server and client cache numbers are JSON null.
func checkReportJSON(t *testing.T, path string, notReported bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"server_hit_rate", "client_cached_ratio", "predicted_hit_rate", "ttft_ms", "tpot_ms", "per_tier", "requests", "errors"} {
		if _, ok := m[k]; !ok {
			t.Errorf("report.json lacks %q", k)
		}
	}
	for _, k := range []string{"ttft_ms", "tpot_ms"} {
		var p map[string]float64
		json.Unmarshal(m[k], &p)
		for _, q := range []string{"p50", "p95", "p99"} {
			if _, ok := p[q]; !ok {
				t.Errorf("report.json %s lacks %s: %s", k, q, m[k])
			}
		}
	}
	if notReported {
		for _, k := range []string{"server_hit_rate", "client_cached_ratio", "per_tier"} {
			if string(m[k]) != "null" {
				t.Errorf("report.json %s: have %s, want null", k, m[k])
			}
		}
	}
}

// checkHTMLInChromium loads the report in headless Chromium and checks for console errors and
// the plots (the four of every workload unless others are named) as inline SVG. Chromium is a
// declared test dependency: without it the test fails.
func checkHTMLInChromium(t *testing.T, path string, plots ...string) {
	t.Helper()
	chromium := "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		p, err := exec.LookPath("chromium")
		if err != nil {
			t.Fatalf("chromium is required to check report.html (Debian: apt-get install -y chromium); not found at %s or on PATH", chromium)
		}
		chromium = p
	}
	abs, _ := filepath.Abs(path)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--enable-logging=stderr", "--v=0", "--dump-dom", "file://"+abs)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	consoleLine := regexp.MustCompile(`(?i):CONSOLE[^\]]*\]|Uncaught|console\.error`)
	for _, l := range strings.Split(stderr.String(), "\n") {
		if consoleLine.MatchString(l) {
			t.Errorf("console message while loading report.html: %s", l)
		}
	}
	dom := stdout.String()
	if plots == nil {
		plots = []string{"ttft-cdf", "hit-rate-over-time", "tier-usage", "predicted-vs-measured"}
	}
	for _, id := range plots {
		re := regexp.MustCompile(`(?s)<figure id="` + id + `" class="plot">\s*(?:<!--.*?-->\s*)?<svg[^>]*>.*?</svg>`)
		if !re.MatchString(dom) {
			t.Errorf("DOM lacks the %s plot as inline SVG", id)
		}
	}
	if strings.Contains(dom, "http://") && regexp.MustCompile(`(src|href)="https?://`).MatchString(dom) {
		t.Error("report.html refers to the network")
	}
}

// TestAgentToolsHitRateMatchesPrediction runs the agent's tools mode (8 tools, T = 5) against a
// real Stockpot: every request must succeed (a server without tools support refuses them with
// a 400, and this test says so), the server must render the tools into a prompt that each turn
// extends, and its counters must agree with the block-aligned prediction and with usage.
func TestAgentToolsHitRateMatchesPrediction(t *testing.T) {
	base := startServer(t)
	ctx := context.Background()
	cfg := DefaultConfig()
	cfg.Target, cfg.Workload, cfg.Tools = base, "agent", 8
	cfg.Sessions, cfg.Turns, cfg.Concurrency = 2, 5, 2
	cfg.PrefixTokens, cfg.TurnTokens, cfg.ToolResultTokens, cfg.MaxTokens = 48, 24, 64, 8
	cfg.ScrapeInterval = 500 * time.Millisecond
	res, err := run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep := summarizeRun(res)
	if rep.Errors != 0 || rep.Requests != 10 {
		t.Fatalf("tools mode: %d of %d requests failed, want 10 requests and none failed "+
			"(the server must accept OpenAI tools in /v1/chat/completions): %v", rep.Errors, rep.Requests, rep.ErrorSample)
	}
	if rep.Mode != "tools" || rep.Tools != 8 || rep.Endpoint != "/v1/chat/completions" {
		t.Errorf("report: mode %q, %d tools, %s; want tools, 8, /v1/chat/completions", rep.Mode, rep.Tools, rep.Endpoint)
	}
	if !strings.HasPrefix(rep.PredictionBasis, "token ids of prompts and outputs") {
		t.Errorf("prediction basis %q: want the token ids the responses carry (return_token_ids)", rep.PredictionBasis)
	}

	// What the server rendered: the tools are in the prompt, and each turn's prompt starts with
	// the previous turn's (the synthetic call and result appended, not the generated answer).
	scripts, err := BuildScripts(res.cfg, res.tokensPerWord)
	if err != nil {
		t.Fatal(err)
	}
	bySession := map[int][]Sample{}
	for _, s := range res.samples {
		bySession[s.Session] = append(bySession[s.Session], s)
	}
	for sess, ss := range bySession {
		sort.Slice(ss, func(i, j int) bool { return ss[i].Turn < ss[j].Turn })
		for i, s := range ss {
			if s.CachedTokens == nil {
				t.Errorf("session %d turn %d: usage lacks prompt_tokens_details.cached_tokens", sess, s.Turn)
			}
			if i > 0 && !slices.Equal(s.PromptIDs[:min(len(s.PromptIDs), len(ss[i-1].PromptIDs))], ss[i-1].PromptIDs) {
				t.Errorf("session %d turn %d: the prompt does not start with the previous turn's prompt", sess, s.Turn)
			}
		}
		text := detokenize(t, base, ss[len(ss)-1].PromptIDs)
		for _, tl := range scripts[sess].Tools {
			if !strings.Contains(text, tl.Function.Name) || !strings.Contains(text, tl.Function.Description) {
				t.Errorf("session %d: the rendered prompt lacks tool %s", sess, tl.Function.Name)
			}
		}
		for _, st := range scripts[sess].Steps[:len(ss)-1] {
			if c := st.Reply[0].ToolCalls[0]; !strings.Contains(text, c.Function.Name) || !strings.Contains(text, st.Reply[1].Content) {
				t.Errorf("session %d: the rendered prompt lacks the call %s or its result", sess, c.ID)
			}
		}
	}

	if rep.ServerHitRate == nil || rep.PredictedHitRate == nil || rep.ClientCachedRatio == nil {
		t.Fatalf("hit rates: server %v, predicted %v, client %v; want all reported", rep.ServerHitRate, rep.PredictedHitRate, rep.ClientCachedRatio)
	}
	var predicted int
	for _, row := range rep.PerRequest {
		predicted += *row.Predicted
	}
	t.Logf("agent tools=8 T=5: predicted %.4f (%d tokens), server %.4f (%.0f of %.0f), client %.4f, naive %.4f; %d answers were tool calls",
		*rep.PredictedHitRate, predicted, *rep.ServerHitRate, *rep.ServerHits, *rep.ServerQueries, *rep.ClientCachedRatio, *rep.NaiveHitRate, rep.ToolCallAnswers)
	// The transcript does not depend on the answers and the server shares in-flight blocks, so
	// the prediction is exact, to the token.
	if float64(predicted) != *rep.ServerHits {
		var rows []string
		for _, row := range rep.PerRequest {
			cached := "not reported"
			if row.Cached != nil {
				cached = fmt.Sprint(*row.Cached)
			}
			rows = append(rows, fmt.Sprintf("s%d t%d: predicted %d cached %s of %d", row.Session, row.Turn, *row.Predicted, cached, row.Prompt))
		}
		t.Errorf("server hits %.0f (rate %.4f), predicted %d (rate %.4f): want equal; per request:\n%s",
			*rep.ServerHits, *rep.ServerHitRate, predicted, *rep.PredictedHitRate, strings.Join(rows, "\n"))
	}
	if rep.ClientCached != "reported" || *rep.CachedTokens != int64(*rep.ServerHits) {
		t.Errorf("usage cached_tokens %q, Σ %d; want reported on every request and equal to the server's hits %.0f", rep.ClientCached, *rep.CachedTokens, *rep.ServerHits)
	}
	// The shared system prompt and tools come on top of the (T−1)/(T+1) shape; the last token
	// of each prompt and partial blocks keep it below 1.
	if *rep.ServerHitRate < *rep.NaiveHitRate-0.05 || *rep.ServerHitRate >= 1 {
		t.Errorf("server hit rate %.4f: want about (T−1)/(T+1) = %.4f or above, below 1", *rep.ServerHitRate, *rep.NaiveHitRate)
	}
	dir := t.TempDir()
	if err := rep.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	checkReportJSON(t, filepath.Join(dir, "report.json"), false)
	var m struct {
		Mode  string `json:"mode"`
		Tools int    `json:"tools"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, "report.json"))
	if err := json.Unmarshal(b, &m); err != nil || m.Mode != "tools" || m.Tools != 8 {
		t.Errorf("report.json mode %q tools %d (%v), want tools, 8", m.Mode, m.Tools, err)
	}
	if h, _ := os.ReadFile(filepath.Join(dir, "report.html")); !strings.Contains(string(h), "agent with 8 tools") ||
		!strings.Contains(string(h), "tools: 8 tool schemas") {
		t.Error("report.html does not name the mode and tool count")
	}
	checkHTMLInChromium(t, filepath.Join(dir, "report.html"))
}

// detokenize asks the server for the text of ids.
func detokenize(t *testing.T, base string, ids []int32) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"tokens": ids})
	resp, err := http.Post(base+"/detokenize", "application/json", strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Prompt string `json:"prompt"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil {
		t.Fatalf("/detokenize: HTTP %d", resp.StatusCode)
	}
	return out.Prompt
}
