package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"stockpot/internal/portlock"
)

// PDConfig is a prefill/decode disaggregation benchmark (`stockpot bench pd`): the same mixed
// load against three topologies the bench launches itself as `stockpot serve` processes, the
// handoff's share of TTFT at a few prompt lengths, and the transfer's throughput against
// memcpy and a Redis restore.
type PDConfig struct {
	Binary string // the stockpot binary the bench launches
	Dir    string // logs of the launched processes
	Seed   uint64

	// Topologies to run, in order: "pd" (a prefill and a decode replica, one core each, the
	// client hands off), "both" (one replica on both cores), "pair" (two both replicas, one
	// per core, behind `stockpot route --policy prefix`).
	Topologies []string
	// Pin pins each replica to its core with taskset (when taskset exists and the machine has
	// two cores or more).
	Pin bool

	// The mixed load: Streams streaming decodes always in flight (each StreamPromptTokens of
	// prompt and StreamTokens of output; a new one starts when one ends), and LongRequests
	// prompts of LongPromptTokens arriving on a Poisson schedule of LongRate per second, each
	// generating LongMaxTokens.
	Model              string
	Streams            int
	StreamPromptTokens int
	StreamTokens       int
	LongRequests       int
	LongRate           float64
	LongPromptTokens   int
	LongMaxTokens      int
	SLO                SLO

	// The handoff's share of TTFT: one request per length (prompt tokens) on a fresh prefill
	// and decode pair of HandoffModel. Redis (the redis-server binary; empty: skip) adds the
	// store path: the prefill writes through to Redis and a both replica restores the same
	// prompt from it.
	HandoffModel    string
	HandoffLengths  []int
	HandoffKVMemory string
	// HandoffCheckpointBlocks is the replicas' --state-checkpoint-blocks (hybrid models): a
	// checkpoint of small-kimi-k3's state is 256 KiB, one every block would be 2 GiB at 128K.
	HandoffCheckpointBlocks int
	Redis                   string

	Timeout time.Duration // per request
	Logf    func(format string, args ...any)
}

// DefaultPDConfig is the mixed load the README's numbers come from.
func DefaultPDConfig() PDConfig {
	return PDConfig{
		Dir: "bench-pd-out", Seed: 1, Topologies: []string{"pd", "both", "pair"}, Pin: true,
		Model: "synthetic:default", Streams: 4, StreamPromptTokens: 128, StreamTokens: 256,
		LongRequests: 16, LongRate: 0.25, LongPromptTokens: 2048, LongMaxTokens: 16,
		SLO:          SLO{TTFT: 2500 * time.Millisecond, ITL: 50 * time.Millisecond},
		HandoffModel: "synthetic:small-kimi-k3", HandoffLengths: []int{2048, 32768, 131072},
		HandoffKVMemory: "1GiB", HandoffCheckpointBlocks: 16, Redis: "redis-server", Timeout: 30 * time.Minute,
	}
}

func (c *PDConfig) validate() error {
	if c.Binary == "" {
		return errors.New("bench pd: no stockpot binary")
	}
	for _, t := range c.Topologies {
		if !slices.Contains(pdTopologies, t) {
			return fmt.Errorf("bench pd: topology %q is not one of %s", t, strings.Join(pdTopologies, ", "))
		}
	}
	if len(c.Topologies) > 0 && (c.Streams < 0 || c.LongRequests < 1 || c.LongRate <= 0 || c.LongPromptTokens < 1 ||
		c.StreamTokens < 2 || c.StreamPromptTokens < 1 || c.LongMaxTokens < 1) {
		return errors.New("bench pd: the load needs --long ≥ 1, --long-rate > 0, --stream-tokens ≥ 2 and positive lengths")
	}
	if c.SLO.TTFT <= 0 || c.SLO.ITL <= 0 {
		return errors.New("bench pd: the SLOs must be positive")
	}
	for _, l := range c.HandoffLengths {
		if l < 16 {
			return fmt.Errorf("bench pd: handoff length %d is under one block", l)
		}
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Minute
	}
	return nil
}

var pdTopologies = []string{"pd", "both", "pair"}

// pdTopologyDesc says what each topology is, for the report.
var pdTopologyDesc = map[string]string{
	"pd":   "prefill + decode replica, one core and --threads 1 each; the client hands off",
	"both": "one both replica, --threads 2 on both cores",
	"pair": "two both replicas, one core and --threads 1 each, behind route --policy prefix",
}

func (c *PDConfig) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// pdProc is one launched process.
type pdProc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	url    string
	exited chan struct{} // closed when the process has exited
}

// pdLauncher starts the processes of one topology and stops them all.
type pdLauncher struct {
	cfg   *PDConfig
	procs []*pdProc
	pin   bool
}

func newLauncher(cfg *PDConfig) *pdLauncher {
	pin := cfg.Pin && runtime.NumCPU() >= 2
	if pin {
		if _, err := exec.LookPath("taskset"); err != nil {
			pin = false
		}
	}
	return &pdLauncher{cfg: cfg, pin: pin}
}

// start launches bin args (pinned to cpus when pinning), logging to Dir/name.log, and waits
// for url/health (url empty: addr is not HTTP, wait for the port).
func (l *pdLauncher) start(ctx context.Context, name, cpus string, addr string, http bool, bin string, args ...string) (*pdProc, error) {
	if l.pin && cpus != "" {
		args = append([]string{"-c", cpus, bin}, args...)
		bin = "taskset"
	}
	f, err := os.Create(filepath.Join(l.cfg.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &pdProc{name: name, cmd: cmd, log: f, exited: make(chan struct{})}
	l.procs = append(l.procs, p)
	exited := p.exited
	go func() { cmd.Wait(); close(exited) }()
	if http {
		p.url = "http://" + addr
	}
	deadline := time.Now().Add(3 * time.Minute)
	client := &net.Dialer{Timeout: time.Second}
	for {
		select {
		case <-exited:
			return nil, fmt.Errorf("%s exited before it was ready: see %s", name, f.Name())
		case <-ctx.Done():
			return nil, ctx.Err()
		default:
		}
		if http {
			if resp, err := pdHTTP.Get(p.url + "/health"); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return p, nil
				}
			}
		} else if c, err := client.DialContext(ctx, "tcp", addr); err == nil {
			c.Close()
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s not ready in 3 minutes: see %s", name, f.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serve launches `stockpot serve` on cpus with args after --addr.
func (l *pdLauncher) serve(ctx context.Context, name, cpus string, args ...string) (*pdProc, error) {
	addr, err := portlock.Addr()
	if err != nil {
		return nil, err
	}
	return l.start(ctx, name, cpus, addr, true, l.cfg.Binary, append([]string{"serve", "--addr", addr}, args...)...)
}

// stop kills every process it started (interrupt, then kill after 5 s) and waits for them.
func (l *pdLauncher) stop() {
	for _, p := range l.procs {
		p.cmd.Process.Signal(os.Interrupt)
	}
	for _, p := range l.procs {
		select {
		case <-p.exited:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.exited
		}
		p.log.Close()
	}
	l.procs = nil
}

// pdHTTP is the bench's client: no overall timeout (streams and 128K prefills are long; each
// request has its context), many idle connections.
var pdHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}

// PDReport is everything `stockpot bench pd` measured, as written to pd.json.
type PDReport struct {
	Machine    PDMachine    `json:"machine"`
	Load       PDLoad       `json:"load"`
	Topologies []PDTopology `json:"topologies"`
	Handoff    []PDHandoff  `json:"handoff"`
	// MemcpyGBps is a Go copy of the largest transfer's bytes, best of 5, in the same run.
	MemcpyGBps *float64 `json:"memcpy_gb_per_s"`
	Notes      []string `json:"notes,omitempty"`
}

// PDMachine is where the run happened.
type PDMachine struct {
	CPU        string  `json:"cpu"`
	Cores      int     `json:"cores"`
	Pinned     bool    `json:"pinned"`
	LoadBefore float64 `json:"load_before"` // 1-minute load average at the start
	LoadAfter  float64 `json:"load_after"`
}

// PDLoad is the mixed load as run.
type PDLoad struct {
	Model              string  `json:"model"`
	Streams            int     `json:"streams"`
	StreamPromptTokens int     `json:"stream_prompt_tokens"`
	StreamTokens       int     `json:"stream_tokens"`
	LongRequests       int     `json:"long_requests"`
	LongRate           float64 `json:"long_rate_per_s"`
	LongPromptTokens   int     `json:"long_prompt_tokens"`
	LongMaxTokens      int     `json:"long_max_tokens"`
	TTFTSLOMs          float64 `json:"ttft_slo_ms"`
	ITLSLOMs           float64 `json:"itl_p99_slo_ms"`
	Seed               uint64  `json:"seed"`
}

// PDTopology is one topology's run of the mixed load.
type PDTopology struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	PDLoadStats
	// ITLSeries is every streamed gap of the steady streams against its arrival time (s, ms),
	// and LongStarts the arrival of each long prompt (s), for the plot.
	ITLSeries  [][2]float64 `json:"itl_series"`
	LongStarts []float64    `json:"long_starts"`
	// TTFTAll is every finished request's TTFT (ms), for the plot.
	TTFTAll []float64 `json:"ttft_all_ms"`
}

// PDHandoff is one prompt length handed off, split into its parts, with the store path beside.
type PDHandoff struct {
	Model        string `json:"model"`
	PromptTokens int    `json:"prompt_tokens"`
	// TTFTMs is the client's: from the prefill request to the first token streamed by the
	// decode. PrefillMs is the prefill replica's answer time as the client saw it; PullMs the
	// decode's stockpot_kv_transfer_seconds{direction="pulled"}; DecodeFirstMs the rest of the
	// decode's time to its first token (admission, restore into its pool, the tail's forward).
	TTFTMs         float64  `json:"ttft_ms"`
	PrefillMs      float64  `json:"prefill_ms"`
	PullMs         *float64 `json:"pull_ms"`
	DecodeFirstMs  float64  `json:"decode_first_ms"`
	DecodeRestore  *float64 `json:"decode_restore_ms"` // the decode's usage.timings.restore_ms
	TransferTokens int      `json:"transfer_tokens"`
	PulledBytes    *float64 `json:"pulled_bytes"`
	// PullGBps is PulledBytes over PullMs; MemcpyGBps a Go copy of the same bytes, best of 5.
	PullGBps   *float64 `json:"pull_gb_per_s"`
	MemcpyGBps *float64 `json:"memcpy_gb_per_s"`
	// The store path: a both replica with the same Redis (written through by the prefill)
	// answers the same prompt: its restore time and the tokens that came from Redis.
	StoreRestoreMs *float64 `json:"store_restore_ms"`
	StoreTTFTMs    *float64 `json:"store_ttft_ms"`
	StoreTokens    *int     `json:"store_remote_tokens"`
	Err            string   `json:"error,omitempty"`
}

// RunPD runs the benchmark.
func RunPD(ctx context.Context, cfg PDConfig) (*PDReport, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	rep := &PDReport{Machine: PDMachine{CPU: cpuModel(), Cores: runtime.NumCPU(), LoadBefore: loadAvg()},
		Load: PDLoad{Model: cfg.Model, Streams: cfg.Streams, StreamPromptTokens: cfg.StreamPromptTokens,
			StreamTokens: cfg.StreamTokens, LongRequests: cfg.LongRequests, LongRate: cfg.LongRate,
			LongPromptTokens: cfg.LongPromptTokens, LongMaxTokens: cfg.LongMaxTokens,
			TTFTSLOMs: msOf(cfg.SLO.TTFT), ITLSLOMs: msOf(cfg.SLO.ITL), Seed: cfg.Seed}}
	rep.Machine.Pinned = newLauncher(&cfg).pin
	if !rep.Machine.Pinned {
		rep.Notes = append(rep.Notes, "replicas not pinned (no taskset, fewer than 2 cores, or --pin=false)")
	}
	var tpw float64
	for _, name := range cfg.Topologies {
		cfg.logf("topology %s: %s", name, pdTopologyDesc[name])
		top, err := runTopology(ctx, &cfg, name, &tpw)
		if err != nil {
			return nil, fmt.Errorf("topology %s: %w", name, err)
		}
		cfg.logf("  TTFT p50 %.0f ms p99 %.0f ms, ITL p50 %.1f ms p99 %.1f ms, goodput %s", pct(top.TTFT, 0.5), pct(top.TTFT, 0.99),
			pct(top.ITL, 0.5), pct(top.ITL, 0.99), fracStr(top.Goodput))
		rep.Topologies = append(rep.Topologies, top)
	}
	if len(cfg.HandoffLengths) > 0 {
		hs, err := runHandoffShare(ctx, &cfg)
		if err != nil {
			return nil, fmt.Errorf("handoff: %w", err)
		}
		rep.Handoff = hs
		for _, h := range hs {
			if h.MemcpyGBps != nil && (rep.MemcpyGBps == nil || *h.MemcpyGBps > *rep.MemcpyGBps) {
				rep.MemcpyGBps = h.MemcpyGBps
			}
		}
	}
	rep.Machine.LoadAfter = loadAvg()
	return rep, nil
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p50 or p99 of p, or NaN when p is nil.
func pct(p *Percentiles, q float64) float64 {
	if p == nil {
		return math.NaN()
	}
	if q == 0.5 {
		return p.P50
	}
	return p.P99
}

func fracStr(f *float64) string {
	if f == nil {
		return "not reported"
	}
	return fmt.Sprintf("%.0f%%", *f*100)
}

// launchTopology starts name's processes and returns the target the load goes to and a
// replica URL that answers /tokenize.
func launchTopology(ctx context.Context, cfg *PDConfig, l *pdLauncher, name string) (*pdTarget, string, error) {
	model := []string{"--model", cfg.Model}
	switch name {
	case "pd":
		p, err := l.serve(ctx, "pd-prefill", "0", append(model, "--threads", "1", "--role", "prefill")...)
		if err != nil {
			return nil, "", err
		}
		d, err := l.serve(ctx, "pd-decode", "1", append(model, "--threads", "1", "--role", "decode", "--prefill-peer", p.url)...)
		if err != nil {
			return nil, "", err
		}
		return &pdTarget{prefill: p.url, decode: d.url, http: pdHTTP}, p.url, nil
	case "both":
		b, err := l.serve(ctx, "both", "0,1", append(model, "--threads", "2")...)
		if err != nil {
			return nil, "", err
		}
		return &pdTarget{url: b.url, http: pdHTTP}, b.url, nil
	default: // pair
		a, err := l.serve(ctx, "pair-0", "0", append(model, "--threads", "1")...)
		if err != nil {
			return nil, "", err
		}
		b, err := l.serve(ctx, "pair-1", "1", append(model, "--threads", "1")...)
		if err != nil {
			return nil, "", err
		}
		addr, err := portlock.Addr()
		if err != nil {
			return nil, "", err
		}
		r, err := l.start(ctx, "pair-route", "", addr, true, cfg.Binary, "route", "--addr", addr, "--policy", "prefix",
			"--backend", a.url, "--backend", b.url)
		if err != nil {
			return nil, "", err
		}
		return &pdTarget{url: r.url, http: pdHTTP}, a.url, nil
	}
}

// runTopology launches name, warms it, runs the mixed load and stops it. tpw is the
// tokens-per-word calibration, measured once (on the first topology) so every topology gets
// the same prompts.
func runTopology(ctx context.Context, cfg *PDConfig, name string, tpw *float64) (PDTopology, error) {
	l := newLauncher(cfg)
	defer l.stop()
	tgt, direct, err := launchTopology(ctx, cfg, l, name)
	if err != nil {
		return PDTopology{}, err
	}
	if *tpw == 0 {
		t := &target{base: direct, http: pdHTTP}
		t.probe(ctx, 0)
		*tpw = t.calibrate(ctx, cfg.Seed)
	}
	g := pdPrompts{seed: cfg.Seed, tpw: *tpw}
	// Warm up: one short request through the whole path (the first forward allocates), not
	// measured.
	for i := range 2 {
		var s pdSample
		tgt.run(ctx, g.body(g.text("warm", i, cfg.StreamPromptTokens), 4), time.Now(), &s)
		if s.Err != "" {
			return PDTopology{}, fmt.Errorf("warm-up: %s", s.Err)
		}
	}
	samples, starts, window := runMixedLoad(ctx, cfg, tgt, g)
	top := PDTopology{Name: name, Description: pdTopologyDesc[name], PDLoadStats: pdStats(samples, cfg.SLO, window), LongStarts: starts}
	for _, s := range samples {
		if !s.OK() {
			continue
		}
		gaps := itls(s.Arrivals, s.Tokens)
		top.TTFTAll = append(top.TTFTAll, msOf(s.TTFT))
		if s.Kind == "stream" {
			for i, g := range gaps {
				// gaps[i] ends at the arrival of the chunk that carried token i+1 (one token
				// per chunk is what Stockpot streams; more share their chunk's time).
				at := s.Start + s.Arrivals[min(i+1, len(s.Arrivals)-1)]
				top.ITLSeries = append(top.ITLSeries, [2]float64{at.Seconds(), g})
			}
		}
	}
	slices.SortFunc(top.ITLSeries, func(a, b [2]float64) int {
		return int(math.Copysign(1, a[0]-b[0]))
	})
	return top, nil
}

// pdPrompts makes the load's prompts: text of about n tokens whose words are drawn from a
// generator seeded by the run's seed, the prompt's kind and its index, so that no two prompts
// share a leading block (and the prefix router spreads them) while every topology gets the
// same ones.
type pdPrompts struct {
	seed uint64
	tpw  float64
}

func (g pdPrompts) text(kind string, i, tokens int) string {
	h := g.seed
	for _, c := range kind {
		h = h*1099511628211 + uint64(c)
	}
	tg := &textGen{rng: newRand(h ^ uint64(i+1)*0x9e3779b97f4a7c15), tokensPerWord: g.tpw}
	return tg.words(tokens)
}

func (g pdPrompts) body(prompt string, maxTokens int) map[string]any {
	return map[string]any{"prompt": prompt, "max_tokens": maxTokens, "temperature": 0, "ignore_eos": true}
}

// runMixedLoad runs cfg.Streams streams in a closed loop while cfg.LongRequests long prompts
// arrive on a Poisson schedule; when the last long prompt has its answer, no new stream starts
// and the ones in flight finish. It returns every request that started, the long prompts'
// arrival times (s) and the window (from the start to the last answer).
func runMixedLoad(ctx context.Context, cfg *PDConfig, tgt *pdTarget, g pdPrompts) ([]*pdSample, []float64, time.Duration) {
	epoch := time.Now()
	var (
		mu      sync.Mutex
		samples []*pdSample
		wg      sync.WaitGroup
	)
	record := func(kind string, body map[string]any) {
		s := &pdSample{Kind: kind, Start: time.Since(epoch)}
		rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		tgt.run(rctx, body, epoch, s)
		cancel()
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	stop := make(chan struct{})
	var next int
	var nextMu sync.Mutex
	for range cfg.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				nextMu.Lock()
				i := next
				next++
				nextMu.Unlock()
				record("stream", g.body(g.text("stream", i, cfg.StreamPromptTokens), cfg.StreamTokens))
			}
		}()
	}
	// Poisson arrivals: exponential gaps from the seed; the first after one gap, so the streams
	// are decoding when it comes.
	rng := newRand(cfg.Seed ^ 0x10a6)
	var longs sync.WaitGroup
	var starts []float64
	at := time.Duration(0)
	for i := range cfg.LongRequests {
		at += time.Duration(rng.ExpFloat64() / cfg.LongRate * float64(time.Second))
		select {
		case <-time.After(time.Until(epoch.Add(at))):
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		starts = append(starts, time.Since(epoch).Seconds())
		longs.Add(1)
		go func() {
			defer longs.Done()
			record("long", g.body(g.text("long", i, cfg.LongPromptTokens), cfg.LongMaxTokens))
		}()
	}
	longs.Wait()
	close(stop)
	wg.Wait()
	return samples, starts, time.Since(epoch)
}

// cpuModel is /proc/cpuinfo's first model name, or GOARCH.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

// loadAvg is /proc/loadavg's 1-minute figure, or -1.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return -1
	}
	return l
}
