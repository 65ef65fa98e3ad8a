package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"stockpot/internal/bench"
)

// cmdBenchPD runs `stockpot bench pd`: the prefill/decode disaggregation benchmark. It launches
// this same binary as the replicas (and `route`) of each topology, pinned with taskset.
func cmdBenchPD(args []string) error {
	d := bench.DefaultPDConfig()
	fs := newFlagSet("bench pd")
	binary := fs.String("binary", "", "stockpot binary to launch (default: this one)")
	out := fs.String("out", d.Dir, "directory for pd.json, pd.html, pd.png and the replicas' logs")
	topologies := fs.String("topologies", strings.Join(d.Topologies, ","), "comma-separated: pd (prefill + decode, one core each, the client hands off), both (one replica, 2 threads), pair (two replicas behind route --policy prefix); empty: none")
	pin := fs.Bool("pin", d.Pin, "pin each replica to its core with taskset")
	model := fs.String("model", d.Model, "the mixed load's model")
	streams := fs.Int("streams", d.Streams, "streaming decodes kept in flight")
	streamPrompt := fs.Int("stream-prompt-tokens", d.StreamPromptTokens, "prompt tokens of each stream")
	streamTokens := fs.Int("stream-tokens", d.StreamTokens, "tokens each stream generates")
	long := fs.Int("long", d.LongRequests, "long prompts in the run")
	longRate := fs.Float64("long-rate", d.LongRate, "long prompt arrivals per second (Poisson)")
	longTokens := fs.Int("long-tokens", d.LongPromptTokens, "prompt tokens of each long prompt")
	longMax := fs.Int("long-max-tokens", d.LongMaxTokens, "tokens each long prompt generates")
	ttftSLO := fs.Duration("ttft-slo", d.SLO.TTFT, "goodput: a request's TTFT at most this")
	itlSLO := fs.Duration("itl-slo", d.SLO.ITL, "goodput: the 99th percentile of a request's inter-token latencies at most this")
	handoffModel := fs.String("handoff-model", d.HandoffModel, "model of the handoff-share measurement")
	lengths := fs.String("handoff-lengths", joinInts(d.HandoffLengths), "prompt lengths handed off one at a time, comma-separated; empty: none")
	handoffKV := fs.String("handoff-kv-memory", d.HandoffKVMemory, "--kv-memory of the handoff replicas (a 128K prompt needs its blocks in the pool)")
	checkpoints := fs.Int("handoff-checkpoint-blocks", d.HandoffCheckpointBlocks, "--state-checkpoint-blocks of the handoff replicas (hybrid models: a state checkpoint every N blocks)")
	redis := fs.String("redis", d.Redis, "redis-server binary for the store path (the prefill writes through, a both replica restores); empty: skip")
	seed := fs.Uint64("seed", d.Seed, "seed of the prompts and the arrivals")
	timeout := fs.Duration("timeout", d.Timeout, "per-request timeout")
	quiet := fs.Bool("quiet", false, "no progress lines")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench pd: unexpected arguments %q", fs.Args())
	}
	cfg := d
	cfg.Binary, cfg.Dir, cfg.Pin, cfg.Model, cfg.Seed, cfg.Timeout = *binary, *out, *pin, *model, *seed, *timeout
	cfg.Streams, cfg.StreamPromptTokens, cfg.StreamTokens = *streams, *streamPrompt, *streamTokens
	cfg.LongRequests, cfg.LongRate, cfg.LongPromptTokens, cfg.LongMaxTokens = *long, *longRate, *longTokens, *longMax
	cfg.SLO = bench.SLO{TTFT: *ttftSLO, ITL: *itlSLO}
	cfg.HandoffModel, cfg.HandoffKVMemory, cfg.HandoffCheckpointBlocks, cfg.Redis = *handoffModel, *handoffKV, *checkpoints, *redis
	cfg.Topologies = nil
	for _, t := range strings.Split(*topologies, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Topologies = append(cfg.Topologies, t)
		}
	}
	cfg.HandoffLengths = nil
	if strings.TrimSpace(*lengths) != "" {
		ls, err := parseInts(*lengths)
		if err != nil {
			return fmt.Errorf("--handoff-lengths: %w", err)
		}
		cfg.HandoffLengths = ls
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench pd: this binary's path: %w (use --binary)", err)
		}
		cfg.Binary = exe
	}
	if !*quiet {
		cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench.RunPD(ctx, cfg)
	if err != nil {
		return err
	}
	if err := rep.WriteTable(os.Stdout); err != nil {
		return err
	}
	if err := rep.WriteFiles(cfg.Dir); err != nil {
		return err
	}
	fmt.Printf("wrote %s, %s and %s\n", filepath.Join(cfg.Dir, "pd.json"), filepath.Join(cfg.Dir, "pd.html"), filepath.Join(cfg.Dir, "pd.png"))
	return nil
}
