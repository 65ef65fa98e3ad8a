package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"stockpot/internal/apikey"
	"stockpot/internal/router"
	"stockpot/internal/tlsconfig"
)

func cmdRoute(args []string) error {
	fs := newFlagSet("route")
	var backends stringList
	fs.Var(&backends, "backend", "backend base URL (repeatable; STOCKPOT_BACKEND takes one)")
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	policy := fs.String("policy", "kv-aware", "routing policy: "+strings.Join(router.PolicyNames, "|"))
	def := router.DefaultPolicyConfig()
	prefixTokens := fs.Int("prefix-tokens", def.PrefixTokens, "leading tokens the prefix policy hashes (when no X-Session-ID)")
	threshold := fs.Int("concurrency-threshold", 0, "in-flight requests past which a backend is busy and the next candidate is tried (0: none)")
	loadBound := fs.Float64("load-bound", def.LoadBound, "bounded-load factor c: a backend takes at most c × mean load before affinity spills")
	prefillPenalty := fs.Float64("prefill-penalty", def.PrefillPenalty, "kv-aware: score lost per block of prompt a replica reports queued for prefill, in matched blocks (negative: not scored)")
	kvUsageMax := fs.Float64("kv-usage-max", def.KVUsageMax, "kv-aware: a replica reporting this share of its KV pool held by running requests is at its bound (1: never)")
	healthEvery := fs.Duration("health-interval", time.Second, "period of backend health checks")
	odef := router.DefaultOutlierConfig()
	outlierFailures := fs.Int("outlier-failures", odef.Consecutive, "passive health: failed requests in a row (5xx, connection errors, timeouts; not 4xx) that eject a backend; 0: off")
	outlierEjection := fs.Duration("outlier-ejection", odef.BaseEjection, "passive health: first ejection's length, longer on each ejection in a row (capped at 5m or this); then one probe request decides")
	var apiKeys, adminKeys, metricsKeys stringList
	fs.Var(&apiKeys, "api-key", "key clients must send (Authorization: Bearer or x-api-key; repeatable); the router then never forwards a client's key")
	apiKeyFile := fs.String("api-key-file", "", "file with client keys, one per line")
	fs.Var(&adminKeys, "admin-key", "key for /backends (list, add, remove; repeatable); without one, membership over HTTP is off")
	adminKeyFile := fs.String("admin-key-file", "", "file with admin keys, one per line")
	fs.Var(&metricsKeys, "metrics-key", "key for /metrics (repeatable; an admin key also works); without one /metrics is open only while no key of any kind is configured")
	publicMetrics := fs.Bool("public-metrics", false, "leave /metrics open even with keys configured")
	var dashboardKeys stringList
	fs.Var(&dashboardKeys, "dashboard-key", "key for /dashboard and its events and state (repeatable; also as ?key=; an admin key also works)")
	dashboardKeyFile := fs.String("dashboard-key-file", "", "file with dashboard keys, one per line")
	backendEventsKey := fs.String("backend-events-key", "", "key the router sends when reading replicas' /v1/kv-events (their --events-key); default: --backend-key")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this PEM certificate chain (needs --tls-key)")
	tlsKey := fs.String("tls-key", "", "the PEM private key of --tls-cert")
	tlsClientCA := fs.String("tls-client-ca", "", "mutual TLS: require client certificates signed by this PEM CA")
	backendCA := fs.String("backend-tls-ca", "", "PEM CA that signs the https backends' certificates (default: the system roots)")
	backendCert := fs.String("backend-tls-cert", "", "PEM client certificate the router presents to https backends (their --tls-client-ca); needs --backend-tls-key")
	backendCertKey := fs.String("backend-tls-key", "", "the PEM private key of --backend-tls-cert")
	backendKey := fs.String("backend-key", "", "key the router sends to backends (its own calls, and forwarded requests when --api-key is set)")
	backendKeyFile := fs.String("backend-key-file", "", "file whose first line is the backend key")
	sdef := router.DefaultServerConfig()
	idle := fs.Duration("idle-timeout", sdef.IdleTimeout, "close keep-alive connections idle this long")
	readTimeout := fs.Duration("read-timeout", router.DefaultConfig().BodyReadTimeout, "longest time to receive one request body (responses, streams included, are not bounded)")
	headerTimeout := fs.Duration("read-header-timeout", sdef.ReadHeaderTimeout, "longest time to receive a request's headers")
	maxConns := fs.Int("max-connections", sdef.MaxConnections, "client connections open at once; past it new ones wait (-1: no bound)")
	tenantOpts := addTenantFlags(fs, false)
	pd, kvz := addPDFlags(fs), addKVEventsFlags(fs) // route_pd.go, route_events.go
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("route: unexpected arguments %q", fs.Args())
	}
	for _, kf := range []struct {
		flag, path string
		into       *stringList
	}{{"--api-key-file", *apiKeyFile, &apiKeys}, {"--admin-key-file", *adminKeyFile, &adminKeys}, {"--dashboard-key-file", *dashboardKeyFile, &dashboardKeys}} {
		keys, err := readKeyFile(kf.path)
		if err != nil {
			return fmt.Errorf("%s: %w", kf.flag, err)
		}
		*kf.into = append(*kf.into, keys...)
	}
	if *backendKeyFile != "" {
		keys, err := readKeyFile(*backendKeyFile)
		if err != nil || len(keys) == 0 {
			return fmt.Errorf("--backend-key-file: %v", cmp.Or(err, errors.New("no key in the file")))
		}
		*backendKey = keys[0]
	}
	serverTLS, err := tlsconfig.Server(tlsconfig.ServerFiles{Cert: *tlsCert, Key: *tlsKey, ClientCA: *tlsClientCA})
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	backendTLS, err := tlsconfig.Client(tlsconfig.ClientFiles{CA: *backendCA, Cert: *backendCert, Key: *backendCertKey})
	if err != nil {
		return fmt.Errorf("route: %w", err)
	}
	if err := pd.check(backendTLS != nil, backends); err != nil {
		return err
	}
	tenants, _, err := tenantOpts.load(apiKeys)
	if err != nil {
		return err
	}
	if tenants != nil && *backendKey == "" {
		return errors.New("--tenants needs --backend-key: replicas trust the forwarded tenant only when it is signed with the key they share with the router")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := router.DefaultConfig()
	pd.apply(&cfg, backends)
	cfg.Policy = *policy
	cfg.PrefixTokens = *prefixTokens
	cfg.ConcurrencyThreshold = *threshold
	cfg.LoadBound = *loadBound
	cfg.PrefillPenalty, cfg.KVUsageMax = *prefillPenalty, *kvUsageMax
	cfg.HealthInterval = *healthEvery
	cfg.Outlier.Consecutive, cfg.Outlier.BaseEjection = *outlierFailures, *outlierEjection
	if *outlierFailures <= 0 {
		cfg.Outlier.Consecutive = -1 // off (0 is the default in Config)
	}
	cfg.Registerer, cfg.Gatherer = reg, reg
	cfg.Logger = logger
	cfg.APIKeys, cfg.AdminKeys, cfg.MetricsKeys, cfg.BackendKey = apiKeys, adminKeys, metricsKeys, *backendKey
	cfg.BodyReadTimeout = *readTimeout
	cfg.DashboardKeys, cfg.PublicMetrics, cfg.BackendEventsKey, cfg.BackendTLS = dashboardKeys, *publicMetrics, *backendEventsKey, backendTLS
	cfg.Tenants, cfg.KVEventsListen, cfg.KVEventsMaxRate = tenants, *kvz.listen, *kvz.maxRate
	rt, err := router.New(cfg)
	if err != nil {
		return err
	}
	defer rt.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	raw := ln
	srv, ln, err := rt.HTTPServer(raw, router.ServerConfig{ReadHeaderTimeout: *headerTimeout, IdleTimeout: *idle, MaxConnections: *maxConns, TLS: serverTLS})
	if err != nil {
		raw.Close()
		return err
	}
	scheme := "http"
	if serverTLS != nil {
		scheme = "https"
	}
	fmt.Fprintf(os.Stderr, "stockpot: routing (%s) %d backend(s) on %s://%s\n", *policy, len(pd.all(backends)), scheme, ln.Addr())
	if len(apiKeys) == 0 && tenants == nil {
		fmt.Fprintf(os.Stderr, "stockpot: no --api-key: whoever reaches http://%s can use the backends\n", ln.Addr())
		if *backendKey != "" {
			fmt.Fprintln(os.Stderr, "stockpot: --backend-key without --api-key: the router's own calls carry it, clients' headers pass through as sent")
		}
	}
	switch {
	case len(pd.all(backends)) == 0 && len(adminKeys) == 0:
		fmt.Fprintf(os.Stderr, "stockpot: no --backend and no --admin-key: requests get 503 (start with --backend URL, or with --admin-key to add backends over HTTP)\n")
	case len(pd.all(backends)) == 0:
		fmt.Fprintf(os.Stderr, "stockpot: no --backend given: requests get 503 until one is added (POST http://%s/backends {\"url\": ...} with the admin key)\n", ln.Addr())
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

// readKeyFile returns the keys of a key file (--*-key-file; none for path ""), read the one
// way every key file is read (internal/apikey: one key a line, trimmed, blank lines skipped).
func readKeyFile(path string) ([]string, error) { return apikey.ReadFile(path) }
