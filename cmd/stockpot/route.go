package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"stockpot/internal/router"
)

func cmdRoute(args []string) error {
	fs := newFlagSet("route")
	var backends stringList
	fs.Var(&backends, "backend", "backend base URL (repeatable; STOCKPOT_BACKEND takes one)")
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	policy := fs.String("policy", "kv-aware", "routing policy: random|round-robin|least-loaded|prefix|kv-aware")
	def := router.DefaultPolicyConfig()
	prefixTokens := fs.Int("prefix-tokens", def.PrefixTokens, "leading tokens the prefix policy hashes (when no X-Session-ID)")
	threshold := fs.Int("concurrency-threshold", 0, "in-flight requests past which a backend is busy and the next candidate is tried (0: none)")
	loadBound := fs.Float64("load-bound", def.LoadBound, "bounded-load factor c: a backend takes at most c × mean load before affinity spills")
	healthEvery := fs.Duration("health-interval", time.Second, "period of backend health checks")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("route: unexpected arguments %q", fs.Args())
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := router.DefaultConfig()
	cfg.Backends = backends
	cfg.Policy = *policy
	cfg.PrefixTokens = *prefixTokens
	cfg.ConcurrencyThreshold = *threshold
	cfg.LoadBound = *loadBound
	cfg.HealthInterval = *healthEvery
	cfg.Registerer, cfg.Gatherer = reg, reg
	cfg.Logger = logger
	rt, err := router.New(cfg)
	if err != nil {
		return err
	}
	defer rt.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: rt.Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "stockpot: routing (%s) %d backend(s) on http://%s\n", *policy, len(backends), ln.Addr())
	if len(backends) == 0 {
		fmt.Fprintf(os.Stderr, "stockpot: no --backend given: requests get 503 until one is added (POST http://%s/backends {\"url\": ...})\n", ln.Addr())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Fprintln(os.Stderr, "stockpot: router drained, bye")
	return nil
}
