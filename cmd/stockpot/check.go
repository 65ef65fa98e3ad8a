package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"stockpot/internal/bytesize"
	"stockpot/internal/lint"
	"stockpot/internal/preflight"
	"stockpot/internal/server"
)

// stockpot check --target URL: the go-live checklist (internal/preflight) against a running
// serve, or against every replica behind a route. This file is the I/O: it asks each server
// (POST /v1/cache/probe, GET /metrics, GET /v1/requests/recent rendered through its
// /tokenize as `stockpot lint --target` does) and hands what it heard to preflight.Evaluate.

// checkConfig is check's flags.
type checkConfig struct {
	target, key, backendKey string
	strict                  bool
	probeBytes              int64
	timeout                 time.Duration
}

// errCheckFailed is check's error when a line fails (or warns, with --strict): exit status 1.
var errCheckFailed = errors.New("check: the target is not ready (see the fail lines above)")

func cmdCheck(args []string) error { return checkMain(args, os.Stdout) }

func checkMain(args []string, w io.Writer) error {
	fs := newFlagSet("check")
	var c checkConfig
	fs.StringVar(&c.target, "target", "", "a running stockpot serve, or a stockpot route (then every replica it lists in /backends is checked)")
	fs.StringVar(&c.key, "key", "", "the target's --admin-key: a serve's (for /v1/cache/probe and /v1/requests/recent), or a route's (for /backends)")
	fs.StringVar(&c.backendKey, "backend-key", "", "behind a route: the key its replicas take as an admin key (the route's --backend-key); default --key")
	fs.BoolVar(&c.strict, "strict", false, "fail on warn lines too")
	probe := fs.String("probe-bytes", "4MiB", "bytes written to and read back from each tier to measure its read rate (at most 64MiB; 0: one record, no rate)")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "bound on each call to a server")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if c.target == "" || fs.NArg() > 0 {
		return fmt.Errorf("check: want --target URL and no arguments (got %q)", fs.Args())
	}
	n, err := bytesize.Parse(*probe)
	if err != nil || n < 0 || n > 64<<20 {
		return fmt.Errorf("check: --probe-bytes %q: a size from 0 to 64MiB", *probe)
	}
	c.probeBytes, c.target = n, strings.TrimSuffix(c.target, "/")
	lines := preflight.Evaluate(gatherCheck(context.Background(), c))
	fmt.Fprint(w, preflight.Write(lines))
	if preflight.Failed(lines, c.strict) {
		return errCheckFailed
	}
	return nil
}

// gatherCheck asks the target, and behind a route each replica, for what the checks need.
func gatherCheck(ctx context.Context, c checkConfig) preflight.Input {
	cl := &checkClient{http: &http.Client{Timeout: c.timeout}}
	in := preflight.Input{Target: hostOf(c.target)}
	replicas, key, err := cl.replicas(ctx, c)
	if err != nil {
		return preflight.Input{Target: in.Target, Replicas: []preflight.Replica{{Name: in.Target, Err: err.Error()}}}
	}
	for _, base := range replicas {
		in.Replicas = append(in.Replicas, cl.replica(ctx, base, key, c.probeBytes))
	}
	return in
}

// checkClient is check's HTTP to the servers.
type checkClient struct{ http *http.Client }

// call sends method path to base with key as a bearer token and decodes a 200's JSON into
// out (nil: the body is returned as is). Any other status is an error that quotes the body.
func (cl *checkClient) call(ctx context.Context, method, base, path, key string, out any) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, nil)
	if err != nil {
		return nil, err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{method: method, path: path, code: resp.StatusCode, body: string(bytes.TrimSpace(body))}
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return body, nil
}

// statusError is a non-200 answer.
type statusError struct {
	method, path string
	code         int
	body         string
}

func (e *statusError) Error() string {
	hint := ""
	switch e.code {
	case http.StatusUnauthorized:
		hint = " (pass the server's --admin-key as --key, or behind a route its --backend-key as --backend-key)"
	case http.StatusForbidden:
		hint = " (the server has no --admin-key: start it with one)"
	case http.StatusNotFound:
		hint = " (a server without it: not a stockpot serve of this version)"
	}
	return fmt.Sprintf("%s %s: status %d%s: %.200s", e.method, e.path, e.code, hint, e.body)
}

// replicas lists the servers to check and the key they take: the target alone for a serve
// (its /backends is a 404), every backend of a route (GET /backends, with --key).
func (cl *checkClient) replicas(ctx context.Context, c checkConfig) ([]string, string, error) {
	var b struct {
		Backends []struct {
			URL string `json:"url"`
		} `json:"backends"`
	}
	_, err := cl.call(ctx, http.MethodGet, c.target, "/backends", c.key, &b)
	var se *statusError
	switch {
	case errors.As(err, &se) && se.code == http.StatusNotFound:
		return []string{c.target}, c.key, nil
	case err != nil:
		return nil, "", fmt.Errorf("a route? %w", err)
	case len(b.Backends) == 0:
		return nil, "", errors.New("the route lists no backends")
	}
	urls := make([]string, len(b.Backends))
	for i, be := range b.Backends {
		urls[i] = strings.TrimSuffix(be.URL, "/")
	}
	key := c.backendKey
	if key == "" {
		key = c.key
	}
	return urls, key, nil
}

// replica gathers one serve's inputs: its probe (a failed one is the replica's error), its
// hit counters and its recent requests (each may be missing, and the check says so).
func (cl *checkClient) replica(ctx context.Context, base, key string, probeBytes int64) preflight.Replica {
	r := preflight.Replica{Name: hostOf(base)}
	var p server.CacheProbe
	if _, err := cl.call(ctx, http.MethodPost, base, fmt.Sprintf("/v1/cache/probe?read_bytes=%d", probeBytes), key, &p); err != nil {
		r.Err = err.Error()
		return r
	}
	fromProbe(&r, p)
	r.Hits = cl.hits(ctx, base, key)
	r.Recent, r.RecentErr = cl.recent(ctx, base, key, p.BlockSize)
	return r
}

// fromProbe copies a probe's answer into r.
func fromProbe(r *preflight.Replica, p server.CacheProbe) {
	r.Identity, r.Fingerprint, r.BlockSize, r.BlockBytes, r.PoolBytes = p.Identity, p.Fingerprint, p.BlockSize, p.BlockBytes, p.PoolBytes
	r.PrefixCache, r.Prefetch = p.PrefixCache, p.Prefetch
	r.PrefetchMaxWait = time.Duration(p.PrefetchMaxWaitMS * float64(time.Millisecond))
	r.PrefillRate, r.AttendCost = p.Cost.PrefillTokensPerSecond, p.Cost.AttendCost
	for _, t := range p.Tiers {
		tr := preflight.Tier{Name: t.Tier, CapacityBytes: t.CapacityBytes, Evictions: t.Evictions, PinnedItems: t.PinnedItems,
			Records: t.Records, ReadBytes: t.ReadBytes, ReadTime: time.Duration(t.ReadSeconds * float64(time.Second)), Err: t.Error}
		for _, n := range t.Redis {
			tr.Redis = append(tr.Redis, preflight.RedisNode{Addr: n.Addr, Policy: n.MaxMemoryPolicy, MaxMemory: n.MaxMemory, Err: n.Error})
		}
		r.Tiers = append(r.Tiers, tr)
	}
}

// hits reads stockpot_prefix_cache_hits_total by tier from /metrics (the admin key grants
// it); nil when it cannot.
func (cl *checkClient) hits(ctx context.Context, base, key string) map[string]float64 {
	body, err := cl.call(ctx, http.MethodGet, base, "/metrics", key, nil)
	if err != nil {
		return nil
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	out := map[string]float64{}
	if f := fams["stockpot_prefix_cache_hits_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tier" {
					out[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// recent replays the server's recent requests as `stockpot lint --target` does (its
// tokenizer and template, through /tokenize) and sizes their reusable working set.
func (cl *checkClient) recent(ctx context.Context, base, key string, blockSize int) (*preflight.Recent, string) {
	entries, _, err := readRecent(cl.http, base, key)
	if err != nil {
		return nil, err.Error()
	}
	rt := &remoteTokenizer{base: base, key: key, client: cl.http, pieces: map[int32][]byte{}}
	memo := map[string]lint.Prompt{}
	render := func(l lint.Line) (lint.Prompt, error) {
		k := l.Path + "\x00" + string(l.Body)
		if p, ok := memo[k]; ok {
			return p, nil
		}
		p, err := rt.render(l)
		if err == nil {
			memo[k] = p
		}
		return p, err
	}
	var prompts []preflight.Prompt
	for _, e := range entries {
		if p, err := render(e.Line); err == nil {
			prompts = append(prompts, preflight.Prompt{Salt: p.Salt, Tokens: p.Tokens})
		}
	}
	rep := lint.Analyze(entries, render, rt, lint.Config{BlockSize: blockSize})
	rc := &preflight.Recent{Requests: len(prompts), TypicalTokens: preflight.MedianTokens(prompts),
		ReusedBlocks: preflight.ReusedBlocks(prompts, blockSize), HitRate: rep.HitRate, AllFixed: rep.AllFixed, Unstable: map[string]int{}}
	for _, f := range lint.Fixers {
		if n := rep.Causes[f.Cause]; n > 0 {
			rc.Unstable[string(f.Cause)] = n
		}
	}
	return rc, ""
}

// hostOf is base's host:port, what a line names a server by.
func hostOf(base string) string {
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		return u.Host
	}
	return base
}
