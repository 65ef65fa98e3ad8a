package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"stockpot/internal/bench"
)

// cmdBench runs `stockpot bench`: flags → bench.Config → bench.Run → table, report.json and
// report.html. `stockpot bench pd` is the prefill/decode disaggregation benchmark (bench_pd.go).
// With --accept it is the go-live gate: the verdict's lines follow the table, and a failed
// step makes the command fail (exit status 1) after the reports are written.
func cmdBench(args []string) error { return benchTo(os.Stdout, args) }

// benchTo is cmdBench printing its table and verdict to stdout.
func benchTo(stdout io.Writer, args []string) error {
	if len(args) > 0 && args[0] == "pd" {
		return cmdBenchPD(args[1:])
	}
	if len(args) > 0 && args[0] == "blendquality" {
		return cmdBenchBlendQuality(args[1:]) // bench_blendquality.go
	}
	d := bench.DefaultConfig()
	fs := newFlagSet("bench")
	target := fs.String("target", d.Target, "base URL of an OpenAI-compatible server")
	var metricsURLs stringList
	fs.Var(&metricsURLs, "metrics-url", "base URL whose /metrics gives the server-side numbers, summed (repeatable; default: the target). Behind a router: each replica")
	workload := fs.String("workload", d.Workload, "agent|docqa|sysprompt|rag|random|trace|longctx")
	lengths := fs.String("lengths", joinInts(bench.DefaultLengths), "longctx: prompt lengths in tokens, comma-separated, measured one after another")
	adminKey := fs.String("admin-key", "", "the target's --admin-key: longctx drops the cache one tier at a time through DELETE /v1/cache (without it only cold and warm-from-pool are measured); also opens /metrics")
	tools := fs.Int("tools", 0, fmt.Sprintf("agent: send N tool schemas (1-%d; 8-20 is typical) in every request and append synthetic tool calls and results; implies --chat (0: off)", bench.MaxTools))
	toolResultTokens := fs.Int("tool-result-tokens", d.ToolResultTokens, "agent --tools: tokens of each synthetic tool result")
	sessions := fs.Int("sessions", d.Sessions, "sessions (documents for docqa)")
	turns := fs.Int("turns", d.Turns, "turns per session (questions per document for docqa)")
	concurrency := fs.Int("concurrency", d.Concurrency, "closed loop: sessions in flight at once")
	rate := fs.Float64("rate", 0, "open loop: session arrivals per second, Poisson (0: closed loop)")
	trace := fs.String("trace", "", "trace workload: JSONL of {timestamp, endpoint, body}")
	out := fs.String("out", "bench-out", "directory for report.json and report.html")
	seed := fs.Uint64("seed", d.Seed, "workload seed")
	prefixTokens := fs.Int("prefix-tokens", d.PrefixTokens, "tokens of the shared prefix (agent tool schema text, or its system prompt with --tools; sysprompt system prompt)")
	turnTokens := fs.Int("turn-tokens", d.TurnTokens, "tokens of each agent user message")
	docTokens := fs.Int("doc-tokens", d.DocTokens, "tokens of each docqa document / rag context")
	questionTokens := fs.Int("question-tokens", d.QuestionTokens, "tokens of each question")
	maxTokens := fs.Int("max-tokens", d.MaxTokens, "max_tokens of each request")
	model := fs.String("model", "", "model name (default: the target's first model)")
	apiKey := fs.String("api-key", "", "bearer token for the target")
	chat := fs.Bool("chat", false, "use /v1/chat/completions instead of /v1/completions")
	blockSize := fs.Int("block-size", 0, "the target's KV block size for the prediction (0: ask the target, else 16)")
	prices := fs.String("prices", "", "price table replacing the built-in one: JSON (YAML for .yaml/.yml) of US dollars per million tokens for input, cache_read, cache_write_5m, cache_write_1h and output per provider model; see bench/prices.example.json")
	timeout := fs.Duration("timeout", d.Timeout, fmt.Sprintf("per-request timeout (longctx: %v unless set; a cold 128K prefill takes minutes)", longCtxTimeout))
	quiet := fs.Bool("quiet", false, "no progress bar")
	accept := fs.Bool("accept", false, "go-live gate: one request at a time, the server's counters read around each; exit status 1 unless every cold step reused under --accept-cold-max of its prompt and every warm step (per tier) at least --accept-warm-min of its reusable tokens")
	acceptColdMax := fs.Float64("accept-cold-max", d.AcceptColdMax, "--accept: a cold step passes when the server reused less than this share of its prompt (0..1)")
	acceptWarmMin := fs.Float64("accept-warm-min", d.AcceptWarmMin, "--accept: a warm step passes when the server reused at least this share of its reusable tokens (0..1)")
	blendFractions := fs.String("blend", "", "rag: compare the full prefill, prefix caching only and chunk blending at these recompute fractions (comma-separated, e.g. 0,0.05,0.15,0.3), the retrieved chunks marked \"blend\": true; one request at a time (bench_ragblend.go)")
	blendChunks := fs.Int("blend-chunks", 3, "rag --blend: chunks per request (each --doc-tokens / this many tokens)")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected arguments %q", fs.Args())
	}
	cfg := bench.Config{
		Target: *target, MetricsURLs: metricsURLs, Workload: *workload, APIKey: *apiKey, Model: *model, Chat: *chat,
		Sessions: *sessions, Turns: *turns, Concurrency: *concurrency, Rate: *rate, TraceFile: *trace,
		Seed: *seed, PrefixTokens: *prefixTokens, TurnTokens: *turnTokens, DocTokens: *docTokens,
		QuestionTokens: *questionTokens, MaxTokens: *maxTokens, BlockSize: *blockSize, Timeout: *timeout,
		Tools: *tools, ToolResultTokens: *toolResultTokens, AdminKey: *adminKey,
		Accept: *accept, AcceptColdMax: *acceptColdMax, AcceptWarmMin: *acceptWarmMin,
	}
	if cfg.Workload == "longctx" {
		ls, err := parseInts(*lengths)
		if err != nil {
			return fmt.Errorf("--lengths: %w", err)
		}
		cfg.Lengths = ls
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "timeout" })
		if !set {
			cfg.Timeout = longCtxTimeout
		}
		if !*quiet {
			cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
		}
	}
	if *blendFractions != "" {
		return benchRAGBlend(stdout, cfg, *blendFractions, *blendChunks, *out) // bench_ragblend.go
	}
	if *prices != "" {
		ps, err := bench.LoadPrices(*prices)
		if err != nil {
			return fmt.Errorf("--prices: %w", err)
		}
		cfg.Prices = ps
	}
	n, err := bench.CountRequests(cfg)
	if err != nil {
		return err
	}
	var bar *progressbar.ProgressBar
	if !*quiet && cfg.Workload != "longctx" { // longctx narrates its few long requests instead
		bar = progressbar.NewOptions(n,
			progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription(cfg.Workload),
			progressbar.OptionShowCount(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(os.Stderr) }),
		)
		cfg.Progress = func() { bar.Add(1) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		if bar != nil {
			bar.Exit() // leave the bar where it stopped; a full bar would claim the run finished
			fmt.Fprintln(os.Stderr)
		}
		return err
	}
	if bar != nil {
		bar.Finish()
	}
	if err := rep.WriteTable(stdout); err != nil {
		return err
	}
	if err := rep.WriteFiles(*out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s and %s\n", filepath.Join(*out, "report.json"), filepath.Join(*out, "report.html"))
	if err := rep.WriteVerdict(stdout); err != nil {
		return err
	}
	if err := rep.AcceptError(); err != nil {
		return fmt.Errorf("bench --accept: %w", err)
	}
	return nil
}

// longCtxTimeout is the longctx workload's per-request timeout when --timeout is not given:
// a cold prefill of 480K tokens on a few cores runs for an hour or more.
const longCtxTimeout = 3 * time.Hour

// parseInts reads a comma-separated list of whole numbers ("32768,131072").
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no lengths in %q", s)
	}
	return out, nil
}

func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}
