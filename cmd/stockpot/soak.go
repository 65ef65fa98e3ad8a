package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"stockpot/internal/soak"
)

// cmdSoak: stockpot soak [--requests N] [--seed S] [--faults all|LIST] ...
func cmdSoak(args []string) error {
	fs := newFlagSet("soak")
	requests := fs.Int("requests", 1000, "requests in the mixture")
	seed := fs.Uint64("seed", 1, "seed of the mixture and the fault schedule (same seed, same run)")
	workers := fs.Int("workers", 6, "concurrent clients")
	replicas := fs.Int("replicas", 2, "replicas (each a stockpot serve with its own pool, host and disk tiers)")
	router := fs.Bool("router", true, "also send requests through a stockpot route in front of the replicas")
	policy := fs.String("policy", "kv-aware", "the router's --policy")
	modelSpec := fs.String("model", "synthetic:tiny-qwen2", "model every server loads: a GGUF path or synthetic:PRESET")
	kvMemory := fs.String("kv-memory", "768KiB", "each replica's working pool (small: preemption pressure)")
	host := fs.String("host-cache", "8MiB", "each replica's host tier; 0 = off")
	disk := fs.Bool("disk", true, "a disk tier per replica")
	diskSize := fs.String("disk-cache-size", "64MiB", "each disk tier's budget")
	diskMount := fs.String("disk-mount", "6m", "size of a tmpfs mounted for each disk tier (needs root; a full disk is injected only there); empty = none")
	redis := fs.Bool("redis", true, "a shared Redis tier (redis-server from PATH), written through")
	remoteWrite := fs.String("remote-write", "through", "the replicas' --remote-write: through, selective or back")
	faults := fs.String("faults", "all", "faults to inject: all, none, or a list of "+strings.Join(soakFaultNames(), ","))
	rounds := fs.Int("rounds", 0, "rounds of faults over the run (0: one per 400 requests)")
	pd := fs.Bool("pd", false, "a prefill/decode fleet: the first --prefills replicas are serve --role prefill (each behind a proxy that can flip a byte of a transfer), the rest serve --role decode pulling from them; --handoff-percent of the judged requests are handed off as vLLM's proxy does it (prefill request, then the request with its kv_transfer_params to a decode), and the pd_* faults are injected")
	prefills := fs.Int("prefills", 0, "with --pd: how many of the replicas are prefill replicas (0: half)")
	handoffPercent := fs.Int("handoff-percent", 40, "with --pd: percent of the judged requests handed off from a prefill to a decode")
	handoffLease := fs.Duration("handoff-lease", 5*time.Second, "with --pd: the prefill replicas' --handoff-lease (pd_lease_expire waits it out)")
	threads := fs.Int("threads", 1, "compute threads per server")
	dir := fs.String("dir", "", "working directory for tiers and logs (default: a new temporary one)")
	bin := fs.String("bin", "", "stockpot binary the fleet runs (default: this one)")
	jsonOut := fs.String("json", "", "also write the report as JSON to this file")
	retryBudget := fs.Duration("retry-budget", time.Minute, "how long one request may spend retrying before it counts as lost")
	settle := fs.Duration("settle-timeout", 20*time.Second, "how long the servers get to settle after the traffic before the leak checks")
	hostile := fs.Bool("hostile", false, "instead: one serve (no key) under every hostile shape of the 2026-12-07 probe at once (huge call_ids in the Responses store, 800 KB anyOf grammars, 4 MiB of spaces to /tokenize, 15 MiB bodies, 4,110 half-sent headers); exits 1 unless its peak RSS (VmHWM) stays within the stated bound and it serves afterwards; serve flags follow --")
	scale := fs.Float64("scale", 1, "with --hostile: multiplies the probe's request counts")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: stockpot soak [flags]\n\n"+
			"Starts a fleet (replicas with host, disk and Redis tiers, a router, and a cache-off oracle server), sends a\n"+
			"seeded random mixture of requests (shared and unshared prompts, chats, streams, tool calls, cancels and\n"+
			"disconnects) while injecting faults, and compares every completed greedy answer with the oracle's.\n"+
			"With --pd the replicas are prefill and decode pools and part of the requests are handed off between them.\n"+
			"Exits 1 unless nothing was wrong, nothing was lost and every budget and leak check held.")
		fs.PrintDefaults()
	}
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if *hostile {
		kv := *kvMemory
		set := false
		fs.Visit(func(f *flag.Flag) { set = set || f.Name == "kv-memory" })
		if !set {
			kv = "256MiB" // the probe's
		}
		return runHostile(*bin, *modelSpec, *dir, *scale, *jsonOut, append([]string{"--kv-memory", kv, "--threads", strconv.Itoa(*threads)}, fs.Args()...))
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("soak: unexpected arguments %q", fs.Args())
	}
	if *requests < 1 || *workers < 1 || *replicas < 1 {
		return fmt.Errorf("soak: --requests, --workers and --replicas must be at least 1")
	}
	if *pd && (*replicas < 2 || *prefills >= *replicas || *prefills < 0 || *handoffPercent < 1 || *handoffPercent > 100 || *handoffLease <= 0) {
		return fmt.Errorf("soak: --pd needs at least 2 --replicas, fewer --prefills than replicas, --handoff-percent in 1..100 and a positive --handoff-lease")
	}
	kinds, err := soak.ParseFaults(*faults)
	if err != nil {
		return fmt.Errorf("soak: --faults: %w", err)
	}
	if *bin == "" {
		if *bin, err = os.Executable(); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	if *dir == "" {
		if *dir, err = os.MkdirTemp("", "stockpot-soak-"); err != nil {
			return err
		}
	}
	*dir, _ = filepath.Abs(*dir)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "soak: %d requests, seed %d, %d replicas, router %v, prefill/decode %v, faults %s; logs and tiers in %s\n", *requests, *seed, *replicas, *router, *pd, *faults, *dir)
	rep, err := soak.Run(ctx, soak.Config{
		Bin: *bin, Model: *modelSpec, Dir: *dir, Requests: *requests, Workers: *workers, Seed: *seed,
		Replicas: *replicas, Router: *router, Policy: *policy,
		KVMemory: *kvMemory, HostCache: *host, Disk: *disk, DiskSize: *diskSize, DiskMount: *diskMount, Redis: *redis, RemoteWrite: *remoteWrite, Threads: *threads,
		Faults: kinds, Rounds: *rounds, Progress: os.Stderr, RetryBudget: *retryBudget, SettleTimeout: *settle,
		PD: *pd, Prefills: *prefills, HandoffPercent: *handoffPercent, HandoffLease: *handoffLease,
	})
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	fmt.Print(rep.String())
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if !rep.OK() {
		return fmt.Errorf("soak failed: %d wrong, %d lost, or a check failed (logs in %s)", rep.Wrong, rep.Lost, *dir)
	}
	return nil
}

func soakFaultNames() []string {
	all, _ := soak.ParseFaults("all")
	var names []string
	for _, k := range all {
		names = append(names, k.String())
	}
	return names
}

// runHostile is soak --hostile: soak.RunHostile against one serve started with serveArgs.
func runHostile(bin, model, dir string, scale float64, jsonOut string, serveArgs []string) error {
	var err error
	if bin == "" {
		if bin, err = os.Executable(); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "stockpot-hostile-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(os.Stderr, "soak --hostile: serve %s, scale %g; log in %s\n", strings.Join(serveArgs, " "), scale, dir)
	rep, err := soak.RunHostile(ctx, soak.HostileConfig{Bin: bin, Model: model, Dir: dir, Args: serveArgs, Scale: scale, Progress: os.Stderr})
	if err != nil {
		return fmt.Errorf("soak --hostile: %w", err)
	}
	fmt.Print(rep.String())
	if jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if !rep.OK() {
		return fmt.Errorf("soak --hostile failed: peak RSS %d bytes against a bound of %d, alive %v %s", rep.PeakRSS, rep.Bound, rep.Alive, rep.AliveDetail)
	}
	return nil
}
