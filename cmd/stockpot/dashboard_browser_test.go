package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/bench"
	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/router"
)

// The dashboard in a real browser: Debian's chromium, headless, driven over the DevTools
// protocol (chromedp), against a real serve and a real route while a bench workload runs.
// Screenshots go to $STOCKPOT_ARTIFACTS (default: a stockpot-dashboard-artifacts folder in
// the temp dir); the test prints where.

// browser starts headless chromium, or skips when the machine has none.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		// A failure, never a skip: `make test` installs chromium, and a page nobody looked at
		// is not checked.
		t.Fatal("no chromium on this machine (apt-get install chromium; `make test` installs it): the dashboard's browser checks need one")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", path, err)
	}
	return ctx
}

// page is one tab, with what its console said.
type page struct {
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func openPage(t *testing.T, browserCtx context.Context, url string) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	p := &page{ctx: ctx}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				p.mu.Lock()
				p.errors = append(p.errors, m.String())
				p.mu.Unlock()
			}
		}
	}()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate %s: %v", url, err)
	}
	return p
}

func (p *page) consoleErrors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...)
}

func eval[T any](t *testing.T, p *page, js string) T {
	t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitJS polls a JavaScript predicate in the page (no timed assertion: the deadline only
// turns a hang into a failure).
func waitJS(t *testing.T, p *page, what, js string) {
	t.Helper()
	if _, err := chromedp.Run(p.ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(3*time.Minute))); err != nil {
		state := eval[string](t, p, "JSON.stringify(window.stockpotDashboard)")
		t.Fatalf("waiting for %s: %v\npage state: %s\nconsole errors: %v", what, err, state, p.consoleErrors())
	}
}

func artifactsDir(t *testing.T) string {
	dir := os.Getenv("STOCKPOT_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "stockpot-dashboard-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func screenshot(t *testing.T, p *page, name string) string {
	t.Helper()
	png, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifactsDir(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

// everyChartHasData is the page's own account: every chart it drew has at least one point.
const everyChartHasData = `(() => { const s = window.stockpotDashboard, cs = Object.values(s.charts);
	return s.snapshots >= 3 && cs.length > 0 && cs.every(c => c.points > 0) &&
		document.querySelectorAll('.chart').length === cs.length + document.querySelectorAll('main[hidden] .chart').length; })()`

// metricText reads one series' value from /metrics as Prometheus wrote it.
func metricText(t *testing.T, base, series string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return ""
}

func TestDashboardInChromium(t *testing.T) {
	ctx := browser(t)
	// A small pool over a host tier: the workload evicts, writes back and restores, so every
	// panel has something to show.
	_, serve := newTestInstance(t, func(o *serveOptions) {
		o.engine.KVMemory = 96 * 8192
		o.tiers = offload.Config{HostBytes: 64 << 20}
		o.engine.Prefetch = engine.PrefetchWait
	})
	reg := prometheus.NewRegistry()
	rcfg := router.DefaultConfig()
	rcfg.Backends = []string{serve.URL}
	rcfg.Registerer, rcfg.Gatherer = reg, reg
	rcfg.HealthInterval = 100 * time.Millisecond
	rcfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := router.New(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	route := httptest.NewServer(rt.Handler())
	defer route.Close()
	waitUntil(t, "the router to see its backend healthy", func() bool {
		resp, err := http.Get(route.URL + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// The bench workload runs through the router (so both dashboards move) until the checks
	// below have seen what they need.
	bctx, stopBench := context.WithCancel(context.Background())
	benchDone := make(chan error, 1)
	go func() {
		for bctx.Err() == nil {
			_, err := bench.Run(bctx, bench.Config{Target: route.URL, Workload: "sysprompt", Sessions: 6, Turns: 4, Concurrency: 2,
				PrefixTokens: 160, QuestionTokens: 24, MaxTokens: 3, Seed: uint64(time.Now().UnixNano()), ScrapeInterval: -1, Timeout: time.Minute})
			if err != nil && bctx.Err() == nil {
				benchDone <- err
				return
			}
		}
		benchDone <- nil
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopBench()
			if err := <-benchDone; err != nil {
				t.Errorf("bench: %v", err)
			}
		}
	}
	defer stop()

	t.Run("serve", func(t *testing.T) {
		p := openPage(t, ctx, serve.URL+"/dashboard")
		waitJS(t, p, "every chart of serve's dashboard to get data", everyChartHasData)
		waitJS(t, p, "requests and the cache tree", `window.stockpotDashboard.requests > 0 && document.querySelectorAll('#tree li').length > 0`)
		stop()

		// A request just sent shows up with its evidence chain. It is found by its prompt
		// length, not as the newest row: the workload's requests cancelled by stop() can end
		// on the server after it (as 499 rows), on a busy machine.
		prompt := promptIDs(4242, 77)
		u := completion(t, serve, map[string]any{"prompt": prompt, "max_tokens": 2, "temperature": 0})
		ours := fmt.Sprintf(`document.querySelector('#requests .req[data-prompt="%d"]')`, u.PromptTokens)
		waitJS(t, p, "the request just sent", ours+" !== null")
		row := eval[string](t, p, ours+`.textContent`)
		for _, want := range []string{"77 prompt tokens", "matched", "reused", "computed " + strconv.Itoa(u.Cache["computed_tokens"]), "TTFT", "queue", "restore", "prefill", "% reused"} {
			if !strings.Contains(row, want) {
				t.Errorf("the request's row lacks %q: %s", want, row)
			}
		}

		// The hit rate shown equals /metrics once nothing runs: a snapshot taken after a
		// reading of /metrics, with the same reading after it, shows what the registry held
		// (the workload's cancelled requests may still be ending at first: read again until
		// two readings around the snapshots agree).
		var shown, served string
		for {
			before := metricText(t, serve.URL, "stockpot_prefix_cache_hit_rate")
			seen := eval[int](t, p, `window.stockpotDashboard.snapshots`)
			waitJS(t, p, "two more snapshots", fmt.Sprintf(`window.stockpotDashboard.snapshots >= %d`, seen+2))
			shown = eval[string](t, p, `document.getElementById('hit-rate').dataset.value`)
			if served = metricText(t, serve.URL, "stockpot_prefix_cache_hit_rate"); served == before {
				break
			}
		}
		sv, err1 := strconv.ParseFloat(shown, 64)
		mv, err2 := strconv.ParseFloat(served, 64)
		if err1 != nil || err2 != nil || sv != mv {
			t.Errorf("hit rate shown %q, /metrics %q", shown, served)
		}
		text := eval[string](t, p, `document.getElementById('hit-rate').textContent`)
		if want := fmt.Sprintf("%.1f%%", 100*mv); text != want {
			t.Errorf("hit rate text %q, want %q", text, want)
		}
		// The engine's and the offload's own series are on /metrics beside the usage sums.
		for _, series := range []string{`stockpot_kv_offload_queue_depth{tier="host"}`, `stockpot_engine_restored_blocks_total{tier="host"}`,
			`stockpot_engine_prefetches_total{outcome="late"}`, "stockpot_engine_dedup_waits_total", "stockpot_engine_preemptions_total",
			"stockpot_engine_pinned_blocks"} {
			metricText(t, serve.URL, series)
		}
		shot := screenshot(t, p, "serve-dashboard.png")
		if dst := os.Getenv("STOCKPOT_DASHBOARD_SHOT"); dst != "" {
			b, _ := os.ReadFile(shot)
			_ = os.WriteFile(dst, b, 0o644)
		}
		if errs := p.consoleErrors(); len(errs) > 0 {
			t.Errorf("console errors: %v", errs)
		}
	})

	t.Run("route", func(t *testing.T) {
		if stopped { // the serve checks stopped the workload: a short one more for the router
			bctx, stopBench = context.WithCancel(context.Background())
			stopped = false
			go func() {
				for bctx.Err() == nil {
					_, err := bench.Run(bctx, bench.Config{Target: route.URL, Workload: "sysprompt", Sessions: 4, Turns: 3, Concurrency: 2,
						PrefixTokens: 160, QuestionTokens: 24, MaxTokens: 3, Seed: uint64(time.Now().UnixNano()), ScrapeInterval: -1, Timeout: time.Minute})
					if err != nil && bctx.Err() == nil {
						benchDone <- err
						return
					}
				}
				benchDone <- nil
			}()
		}
		p := openPage(t, ctx, route.URL+"/dashboard")
		waitJS(t, p, "every chart of route's dashboard to get data", everyChartHasData)
		waitJS(t, p, "decisions with predicted and delivered tokens", `window.stockpotDashboard.decisions > 0 &&
			document.querySelector('#decisions .req').textContent.includes('predicted')`)
		stop()
		screenshot(t, p, "route-dashboard.png")
		if errs := p.consoleErrors(); len(errs) > 0 {
			t.Errorf("console errors: %v", errs)
		}
	})
}

// TestDemoInChromium: `stockpot demo`'s page, headless: the four modes are reachable from
// their buttons and each shows its part.
func TestDemoInChromium(t *testing.T) {
	ctx := browser(t)
	var out strings.Builder
	_, err := runDemo(context.Background(), demoOptions{model: "synthetic:tiny-llama-spm", addr: "127.0.0.1:0", threads: 2, headless: true, burst: 6, out: &out,
		onURL: func(string) {},
		hold: func() {
			url := ""
			for _, l := range strings.Split(out.String(), "\n") {
				if u, ok := strings.CutPrefix(l, "stockpot demo: open "); ok {
					url = u
				}
			}
			p := openPage(t, ctx, url)
			waitJS(t, p, "the demo's notes", `Object.keys(window.stockpotDashboard.demoModes).length === 4`)
			for _, c := range []struct{ mode, want string }{
				{"start", "block size"}, {"execute", "first that differs"}, {"monitor", "/metrics"}, {"complete", "predictions met"},
			} {
				if err := chromedp.Do(p.ctx, chromedp.Click(`#demo-modes button[data-mode="`+c.mode+`"]`)); err != nil {
					t.Fatal(err)
				}
				got := eval[string](t, p, `document.querySelector('.demo-pane[data-pane="`+c.mode+`"]:not([hidden])')?.textContent || ""`)
				if !strings.Contains(got, c.want) {
					t.Errorf("mode %s: pane %q lacks %q", c.mode, got, c.want)
				}
				if c.mode == "execute" {
					if n := eval[int](t, p, `document.querySelectorAll('.blk').length`); n == 0 {
						t.Error("execute shows no blocks")
					}
					screenshot(t, p, "demo-execute.png")
				}
			}
			screenshot(t, p, "demo-complete.png")
			if errs := p.consoleErrors(); len(errs) > 0 {
				t.Errorf("console errors: %v", errs)
			}
		}})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
}
