package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"stockpot/internal/bench"
)

// benchRAGBlend runs `bench --workload rag --blend F,...` (bench.RunRAGBlend) and writes its
// table to stdout and ragblend.json to out.
func benchRAGBlend(stdout io.Writer, cfg bench.Config, fractions string, k int, out string) error {
	if cfg.Workload != "rag" {
		return fmt.Errorf("bench: --blend compares blending on the rag workload; add --workload rag")
	}
	var fs []float64
	for _, f := range strings.Split(fractions, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v < 0 || v > 1 {
			return fmt.Errorf("--blend: %q is not a fraction in [0, 1]", f)
		}
		fs = append(fs, v)
	}
	if k < 1 {
		return fmt.Errorf("--blend-chunks must be at least 1, got %d", k)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rs, err := bench.RunRAGBlend(ctx, cfg, fs, k)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rag: %d requests per variant, %d chunks of ~%d tokens each, one at a time; CPU %s, %d cores\n",
		cfg.Sessions*cfg.Turns, k, cfg.DocTokens/k, cpuName(), runtime.NumCPU())
	bench.WriteRAGBlend(stdout, rs)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	js, _ := json.MarshalIndent(rs, "", "  ")
	path := filepath.Join(out, "ragblend.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s\n", path)
	return nil
}
