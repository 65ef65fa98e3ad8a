package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"stockpot/internal/portlock"
)

// pullCounters are a decode replica's pulled-transfer counters at one scrape.
type pullCounters struct {
	Bytes   float64
	Seconds float64 // stockpot_kv_transfer_seconds{direction="pulled"}'s sum
	Pulls   uint64  // its count
}

// parsePullCounters reads the Prometheus text format for the pulled direction of
// stockpot_kv_transfer_bytes_total and stockpot_kv_transfer_seconds. ok is false when the
// target has neither (not a Stockpot decode replica).
func parsePullCounters(r io.Reader) (pullCounters, bool, error) {
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(r)
	if err != nil {
		return pullCounters{}, false, fmt.Errorf("parse metrics: %w", err)
	}
	var c pullCounters
	ok := false
	if f := fams["stockpot_kv_transfer_bytes_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "direction" && l.GetValue() == "pulled" {
					c.Bytes += m.GetCounter().GetValue()
					ok = true
				}
			}
		}
	}
	if f := fams["stockpot_kv_transfer_seconds"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "direction" && l.GetValue() == "pulled" && m.GetHistogram() != nil {
					c.Seconds += m.GetHistogram().GetSampleSum()
					c.Pulls += m.GetHistogram().GetSampleCount()
					ok = true
				}
			}
		}
	}
	return c, ok, nil
}

func scrapePull(ctx context.Context, url string) (pullCounters, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return pullCounters{}, false, err
	}
	resp, err := pdHTTP.Do(req)
	if err != nil {
		return pullCounters{}, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pullCounters{}, false, nil
	}
	return parsePullCounters(resp.Body)
}

// memcpyGBps is a Go copy of n bytes between two fresh buffers: the best of 5, in GB/s of bytes
// copied (each byte read once and written once). The buffers are touched first so page faults
// are not timed.
func memcpyGBps(n int) float64 {
	if n <= 0 {
		return 0
	}
	src, dst := make([]byte, n), make([]byte, n)
	for i := 0; i < n; i += 4096 {
		src[i], dst[i] = byte(i), 1
	}
	best := time.Duration(math.MaxInt64)
	for range 5 {
		t := time.Now()
		copy(dst, src)
		best = min(best, time.Since(t))
	}
	return float64(n) / best.Seconds() / 1e9
}

// runHandoffShare launches a prefill and a decode replica of HandoffModel (one core each),
// with a Redis both write to when cfg.Redis is set and a both replica that restores from it,
// and hands off one prompt of every length.
func runHandoffShare(ctx context.Context, cfg *PDConfig) ([]PDHandoff, error) {
	l := newLauncher(cfg)
	defer l.stop()
	common := []string{"--model", cfg.HandoffModel, "--threads", "1", "--kv-memory", cfg.HandoffKVMemory,
		"--state-checkpoint-blocks", fmt.Sprint(max(cfg.HandoffCheckpointBlocks, 1)),
		"--max-body-bytes", "64MiB", "--request-memory", "4GiB", "--handoff-lease", "10m"}
	var remote []string
	if cfg.Redis != "" {
		addr, err := portlock.Addr()
		if err != nil {
			return nil, err
		}
		_, port, _ := strings.Cut(addr, ":")
		dir, err := os.MkdirTemp("", "stockpot-bench-pd-redis-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if _, err := l.start(ctx, "redis", "", addr, false, cfg.Redis, "--port", port, "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir, "--proto-max-bulk-len", "2gb"); err != nil {
			return nil, err
		}
		remote = []string{"--remote-cache", "redis://" + addr + "/0", "--remote-write", "through", "--remote-call-timeout", "2m"}
	}
	p, err := l.serve(ctx, "handoff-prefill", "0", append(append(common, "--role", "prefill"), remote...)...)
	if err != nil {
		return nil, err
	}
	d, err := l.serve(ctx, "handoff-decode", "1", append(common, "--role", "decode", "--prefill-peer", p.url)...)
	if err != nil {
		return nil, err
	}
	var store *pdProc
	if remote != nil {
		if store, err = l.serve(ctx, "handoff-store", "1", append(common, remote...)...); err != nil {
			return nil, err
		}
	}
	tgt := &target{base: p.url, http: pdHTTP}
	tgt.probe(ctx, 0)
	lr := &longRun{cfg: Config{Seed: cfg.Seed}, tgt: tgt, tokensPerWord: tgt.calibrate(ctx, cfg.Seed)}
	pair := &pdTarget{prefill: p.url, decode: d.url, http: pdHTTP}
	var out []PDHandoff
	for _, n := range cfg.HandoffLengths {
		text, _, _, err := lr.prompt(ctx, n)
		if err != nil {
			return nil, err
		}
		cfg.logf("handoff: %d tokens", n)
		h := handoffOne(ctx, cfg, pair, text)
		h.Model = cfg.HandoffModel
		if store != nil && h.Err == "" {
			storeRestore(ctx, cfg, store.url, text, &h)
		}
		cfg.logf("  TTFT %.0f ms: prefill %.0f ms, pull %s, decode first token %.0f ms; store restore %s", h.TTFTMs, h.PrefillMs,
			msPtr(h.PullMs), h.DecodeFirstMs, msPtr(h.StoreRestoreMs))
		out = append(out, h)
	}
	return out, nil
}

func msPtr(p *float64) string {
	if p == nil {
		return "not reported"
	}
	return fmt.Sprintf("%.1f ms", *p)
}

// handoffOne hands one prompt off and splits its TTFT.
func handoffOne(ctx context.Context, cfg *PDConfig, pair *pdTarget, text string) PDHandoff {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var h PDHandoff
	before, okB, err := scrapePull(ctx, pair.decode)
	if err != nil {
		h.Err = err.Error()
		return h
	}
	body := map[string]any{"prompt": text, "max_tokens": 4, "temperature": 0, "ignore_eos": true,
		"stream": true, "stream_options": map[string]any{"include_usage": true}}
	t0 := time.Now()
	pa, err := pair.prefillStep(ctx, body)
	h.PrefillMs = msOf(time.Since(t0))
	if err != nil {
		h.Err = err.Error()
		return h
	}
	t1 := time.Now()
	resp, err := pair.post(ctx, pair.decode, "/v1/completions", decodeRequest(body, pa.KV))
	if err != nil {
		h.Err = err.Error()
		return h
	}
	var first time.Duration
	u, err := readTokenStream(resp.Body, func(int) {
		if first == 0 {
			first = time.Since(t1)
		}
	})
	resp.Body.Close()
	if err != nil {
		h.Err = err.Error()
		return h
	}
	after, okA, err := scrapePull(ctx, pair.decode)
	if err != nil {
		h.Err = err.Error()
		return h
	}
	decodeFirst := msOf(first)
	h.TTFTMs = h.PrefillMs + decodeFirst
	h.DecodeFirstMs = decodeFirst
	if u != nil {
		h.PromptTokens = u.PromptTokens
		if u.Cache != nil {
			h.TransferTokens = u.Cache.TransferTokens
		}
		if u.Timings != nil {
			v := u.Timings.RestoreMs
			h.DecodeRestore = &v
		}
	}
	if okA && okB && after.Pulls > before.Pulls {
		pull, bytes := (after.Seconds-before.Seconds)*1000, after.Bytes-before.Bytes
		h.PullMs, h.PulledBytes = &pull, &bytes
		h.DecodeFirstMs = decodeFirst - pull
		if pull > 0 {
			gbps := bytes / (pull / 1000) / 1e9
			h.PullGBps = &gbps
		}
		mc := memcpyGBps(int(bytes))
		h.MemcpyGBps = &mc
	}
	return h
}

// storeRestore sends the handed-off prompt to a both replica that has never seen it, whose
// remote tier (Redis) the prefill wrote through to: the restore comes from Redis.
func storeRestore(ctx context.Context, cfg *PDConfig, url, text string, h *PDHandoff) {
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	s := &pdSample{}
	t := &pdTarget{url: url, http: pdHTTP}
	u := t.run(ctx, map[string]any{"prompt": text, "max_tokens": 4, "temperature": 0, "ignore_eos": true}, time.Now(), s)
	if !s.OK() || u == nil {
		h.Err = "store path: " + s.Err
		return
	}
	ttft := msOf(s.TTFT)
	h.StoreTTFTMs = &ttft
	if u.Timings != nil {
		r := u.Timings.RestoreMs
		h.StoreRestoreMs = &r
	}
	if u.Cache != nil {
		n := u.Cache.RemoteTokens
		h.StoreTokens = &n
	}
}

// WriteFiles writes pd.json, pd.html and pd.png into dir.
func (r *PDReport) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pd.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	page, err := r.HTML()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pd.html"), page, 0o644); err != nil {
		return err
	}
	png, err := r.PNG()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "pd.png"), png, 0o644)
}
