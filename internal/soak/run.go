package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one soak run.
type Config struct {
	Bin      string // the stockpot binary the fleet runs
	Model    string // --model for every server
	Dir      string // working directory: tiers, logs
	Requests int
	Workers  int // concurrent clients
	Seed     uint64

	Replicas int
	Router   bool   // also send requests through `stockpot route` (kv-aware)
	Policy   string // the router's --policy (default kv-aware)

	KVMemory  string // each replica's --kv-memory (small: preemption pressure)
	HostCache string // --host-cache ("0": off)
	Disk      bool   // a disk tier per replica
	DiskSize  string // --disk-cache-size
	DiskMount string // size of the tmpfs each disk tier gets when it can be mounted ("" = none)
	Redis     bool   // a shared Redis tier (redis-server from PATH)
	// RemoteWrite is the replicas' --remote-write (default through: every computed block
	// reaches Redis at once, the path most exposed to races).
	RemoteWrite string
	Threads     int
	ExtraArgs   []string // more serve flags for the replicas

	// PD makes it a prefill/decode run (pd.go): replicas [0, Prefills) are serve --role
	// prefill (default half the replicas), the rest serve --role decode pulling from them;
	// HandoffPercent of the judged requests (default 40) are handed off from a prefill to a
	// decode; the prefills hold a transfer for HandoffLease (their --handoff-lease, default
	// 5 s). Without PD the handoff faults are left out of the schedule.
	PD             bool
	Prefills       int
	HandoffPercent int
	HandoffLease   time.Duration

	Faults []FaultKind
	Rounds int // rounds of faults over the run

	// RetryBudget is how long one request may spend retrying before it counts as lost
	// (default 60 s). SettleTimeout is how long the servers get to settle after the traffic
	// (no request running, no block referenced, goroutines back down) before the leak checks
	// are taken (default 20 s). Tests on busy machines set both generously: a lost request
	// or a leak must be a defect, not a slow machine.
	RetryBudget   time.Duration
	SettleTimeout time.Duration

	// Progress receives a line now and then (nil: none).
	Progress io.Writer
}

func (c *Config) defaults() {
	if c.Workers <= 0 {
		c.Workers = 6
	}
	if c.Replicas <= 0 {
		c.Replicas = 2
	}
	if c.Policy == "" {
		c.Policy = "kv-aware"
	}
	if c.KVMemory == "" {
		c.KVMemory = "768KiB"
	}
	if c.HostCache == "" {
		c.HostCache = "8MiB"
	}
	if c.DiskSize == "" {
		c.DiskSize = "64MiB"
	}
	if c.RemoteWrite == "" {
		c.RemoteWrite = "through"
	}
	if c.Threads <= 0 {
		c.Threads = 1
	}
	if c.Rounds <= 0 {
		c.Rounds = max(1, c.Requests/400)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.RetryBudget <= 0 {
		c.RetryBudget = 60 * time.Second
	}
	if c.SettleTimeout <= 0 {
		c.SettleTimeout = 20 * time.Second
	}
	if c.PD {
		if c.Prefills <= 0 {
			c.Prefills = max(1, c.Replicas/2)
		}
		if c.HandoffPercent <= 0 {
			c.HandoffPercent = 40
		}
		if c.HandoffLease <= 0 {
			c.HandoffLease = 5 * time.Second
		}
	}
}

// fleet is the running processes and proxies of a run.
type fleet struct {
	cfg      *Config
	replicas []*Proc
	direct   []string // replica base URLs
	events   []*EventsProxy
	router   *Proc
	oracle   *Proc
	redis    *Proc
	redisTCP *TCPProxy
	disks    []string // each replica's disk tier directory
	mounted  []bool   // whether it is a tmpfs of its own
	junk     []string // files DiskFull wrote
	mu       sync.Mutex

	// procs serializes killing and restarting replicas between the fault goroutine and the
	// handoff faults that requests carry out.
	procs sync.Mutex
	// A prefill/decode run (pd.go): a TransferProxy per prefill replica, and the handoff
	// faults armed for the next handed-off requests.
	proxies []*TransferProxy
	hookMu  sync.Mutex
	pending []Fault
}

func (f *fleet) logFile(name string) string { return filepath.Join(f.cfg.Dir, name+".log") }

func serveProc(f *fleet, name string, args ...string) (*Proc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	return &Proc{Name: name, Path: f.cfg.Bin, Addr: addr, Health: "http://" + addr + "/health", LogTo: f.logFile(name),
		Args: append([]string{"serve", "--addr", addr, "--model", f.cfg.Model, "--threads", strconv.Itoa(f.cfg.Threads), "--idle-timeout", "2s"}, args...)}, nil
}

func (f *fleet) start(ctx context.Context) error {
	c := f.cfg
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return err
	}
	if c.Redis {
		path, err := exec.LookPath("redis-server")
		if err != nil {
			return fmt.Errorf("redis-server not found: %w", err)
		}
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		_, port, _ := strings.Cut(addr, ":")
		rdir := filepath.Join(c.Dir, "redis")
		os.MkdirAll(rdir, 0o755)
		f.redis = &Proc{Name: "redis", Path: path, Addr: addr, LogTo: f.logFile("redis"),
			Args: []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", rdir}}
		if err := f.redis.Start(ctx); err != nil {
			return err
		}
		if f.redisTCP, err = NewTCPProxy(addr); err != nil {
			return err
		}
	}
	var err error
	if f.oracle, err = serveProc(f, "oracle", "--prefix-cache=false", "--prefix-dedup=false", "--kv-memory", "64MiB"); err != nil {
		return err
	}
	if err := f.oracle.Start(ctx); err != nil {
		return err
	}
	for i := range c.Replicas {
		args := []string{"--kv-memory", c.KVMemory, "--host-cache", c.HostCache}
		if c.Disk {
			dir := filepath.Join(c.Dir, fmt.Sprintf("disk%d", i))
			os.MkdirAll(dir, 0o755)
			mounted := false
			if c.DiskMount != "" && os.Geteuid() == 0 {
				if err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+c.DiskMount, "tmpfs", dir).Run(); err == nil {
					mounted = true
				}
			}
			f.disks = append(f.disks, dir)
			f.mounted = append(f.mounted, mounted)
			args = append(args, "--disk-cache", dir, "--disk-cache-size", c.DiskSize)
		}
		if f.redisTCP != nil {
			args = append(args, "--remote-cache", "redis://"+f.redisTCP.Addr()+"/0", "--remote-write", c.RemoteWrite)
		}
		switch {
		case c.PD && i < c.Prefills:
			args = append(args, "--role", "prefill", "--handoff-lease", c.HandoffLease.String())
		case c.PD:
			args = append(args, "--role", "decode")
			for _, tp := range f.proxies {
				args = append(args, "--prefill-peer", tp.URL())
			}
		}
		args = append(args, c.ExtraArgs...)
		p, err := serveProc(f, fmt.Sprintf("replica%d", i), args...)
		if err != nil {
			return err
		}
		if err := p.Start(ctx); err != nil {
			return err
		}
		f.replicas = append(f.replicas, p)
		f.direct = append(f.direct, "http://"+p.Addr)
		if c.PD && i < c.Prefills {
			tp, err := NewTransferProxy("http://" + p.Addr)
			if err != nil {
				return err
			}
			f.proxies = append(f.proxies, tp)
		}
		if c.Router {
			ep, err := NewEventsProxy("http://" + p.Addr)
			if err != nil {
				return err
			}
			f.events = append(f.events, ep)
		}
	}
	if c.Router {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		args := []string{"route", "--addr", addr, "--policy", c.Policy, "--health-interval", "200ms", "--idle-timeout", "2s"}
		for _, ep := range f.events {
			args = append(args, "--backend", ep.URL())
		}
		f.router = &Proc{Name: "router", Path: c.Bin, Addr: addr, Health: "http://" + addr + "/health", LogTo: f.logFile("router"), Args: args}
		if err := f.router.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (f *fleet) stop() {
	for _, p := range append([]*Proc{f.router, f.oracle}, f.replicas...) {
		if p != nil {
			p.Term()
		}
	}
	for _, ep := range f.events {
		ep.Close()
	}
	for _, tp := range f.proxies {
		tp.Close()
	}
	if f.redisTCP != nil {
		f.redisTCP.Close()
	}
	if f.redis != nil {
		f.redis.Kill9()
	}
	for i, m := range f.mounted {
		if m {
			exec.Command("umount", f.disks[i]).Run()
		}
	}
}

// corrupt damages up to n of the disk tier's block files in dir: a flipped byte in the middle
// of each (the tier must find it by its checksum and recompute).
func corrupt(dir string, n int, rng *rand.Rand) (int, error) {
	var files []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".pin") && !strings.HasPrefix(d.Name(), "junk") {
			files = append(files, p)
		}
		return nil
	})
	rng.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	done := 0
	for _, p := range files[:min(n, len(files))] {
		fh, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		st, err := fh.Stat()
		if err == nil && st.Size() > 0 {
			off := st.Size() / 2
			b := []byte{0}
			if _, err := fh.ReadAt(b, off); err == nil {
				b[0] ^= 0x5a
				if _, err := fh.WriteAt(b, off); err == nil {
					done++
				}
			}
		}
		fh.Close()
	}
	return done, nil
}

// inject carries out one fault (or starts a lasting one); end ends a lasting one.
func (f *fleet) inject(ctx context.Context, ft Fault, rng *rand.Rand) error {
	c := f.cfg
	rep := func() (*Proc, error) {
		if ft.Replica >= len(f.replicas) {
			return nil, errors.New("no such replica")
		}
		return f.replicas[ft.Replica], nil
	}
	switch ft.Kind {
	case Kill9, Restart, CorruptDown:
		p, err := rep()
		if err != nil {
			return err
		}
		f.procs.Lock()
		defer f.procs.Unlock()
		if ft.Kind == Restart {
			err = p.Term()
		} else {
			err = p.Kill9()
		}
		if ft.Kind == CorruptDown && c.Disk {
			if _, cerr := corrupt(f.disks[ft.Replica], 8, rng); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
		if serr := p.Start(ctx); serr != nil {
			return errors.Join(err, serr)
		}
		return err
	case CorruptDisk:
		if !c.Disk {
			return errors.New("no disk tier")
		}
		n, err := corrupt(f.disks[ft.Replica], 8, rng)
		if err == nil && n == 0 {
			return errors.New("no disk tier files yet")
		}
		return err
	case DiskFull:
		if !c.Disk {
			return errors.New("no disk tier")
		}
		if !f.mounted[ft.Replica] {
			return errors.New("the disk tier is not on a volume of its own (mounting a tmpfs needs root)")
		}
		junk := filepath.Join(f.disks[ft.Replica], fmt.Sprintf("junk-%d", ft.At))
		fh, err := os.Create(junk)
		if err != nil {
			return err
		}
		buf := make([]byte, 1<<20)
		for {
			if _, err := fh.Write(buf); err != nil {
				break // ENOSPC: the volume is full
			}
		}
		fh.Close()
		f.mu.Lock()
		f.junk = append(f.junk, junk)
		f.mu.Unlock()
		return nil
	case RedisDown:
		if f.redis == nil {
			return errors.New("no Redis tier")
		}
		return f.redis.Kill9()
	case RedisSlow:
		if f.redisTCP == nil {
			return errors.New("no Redis tier")
		}
		f.redisTCP.SetDelay(time.Duration(20+rng.IntN(200)) * time.Millisecond)
		return nil
	case DropEvents:
		if len(f.events) == 0 {
			return errors.New("no router")
		}
		for _, ep := range f.events {
			ep.DropEvents()
		}
		return nil
	case RouterKill9:
		if f.router == nil {
			return errors.New("no router")
		}
		err := f.router.Kill9()
		return errors.Join(err, f.router.Start(ctx))
	}
	return fmt.Errorf("unknown fault %v", ft.Kind)
}

func (f *fleet) end(ctx context.Context, ft Fault) error {
	switch ft.Kind {
	case DiskFull:
		f.mu.Lock()
		junk := f.junk
		f.junk = nil
		f.mu.Unlock()
		for _, j := range junk {
			os.Remove(j)
		}
	case RedisDown:
		if f.redis != nil && !f.redis.Running() {
			return f.redis.Start(ctx)
		}
	case RedisSlow:
		if f.redisTCP != nil {
			f.redisTCP.SetDelay(0)
		}
	}
	return nil
}

// metrics is one scrape: series (name with its labels, as printed) to value.
type metrics map[string]float64

var scrapeClient = &http.Client{Timeout: 5 * time.Second}

func scrape(base string) (metrics, error) {
	resp, err := scrapeClient.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("/metrics: status %d", resp.StatusCode)
	}
	m := metrics{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// budgets watches the replicas' tier gauges through the run: the most each tier held
// against its capacity.
type budgets struct {
	mu   sync.Mutex
	max  map[string]float64 // "replica0 device" -> most bytes held
	caps map[string]float64
	rss  map[string]float64
}

var tierNames = []string{"device", "host", "disk"}

func (b *budgets) sample(name string, m metrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, t := range tierNames {
		held := m[`stockpot_kv_cache_usage_bytes{tier="`+t+`"}`]
		if t == "device" {
			held += m[`stockpot_kv_cache_cached_bytes{tier="device"}`]
		}
		capv, ok := m[`stockpot_kv_cache_capacity_bytes{tier="`+t+`"}`]
		if !ok {
			continue
		}
		k := name + " " + t
		b.max[k] = max(b.max[k], held)
		b.caps[k] = capv
	}
	b.rss[name] = max(b.rss[name], m["process_resident_memory_bytes"])
}

// Run starts the fleet, runs the mixture with its faults, checks the budgets and returns the
// report. An error means the run itself could not be carried out (a process would not start).
func Run(ctx context.Context, cfg Config) (Report, error) {
	cfg.defaults()
	var dropped []string
	if !cfg.PD {
		cfg.Faults = slices.DeleteFunc(slices.Clone(cfg.Faults), func(k FaultKind) bool {
			if k.Handoff() {
				dropped = append(dropped, k.String())
			}
			return k.Handoff()
		})
	} else if cfg.Prefills >= cfg.Replicas {
		return Report{}, fmt.Errorf("a prefill/decode run needs a decode replica: %d replicas, %d of them prefill", cfg.Replicas, cfg.Prefills)
	}
	f := &fleet{cfg: &cfg}
	defer f.stop()
	if err := f.start(ctx); err != nil {
		return Report{}, err
	}
	client := &Client{HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Workers * 2}}, Budget: cfg.RetryBudget}
	defer client.HTTP.CloseIdleConnections()
	s := &soakRun{cfg: &cfg, f: f, client: client, judge: NewJudge(),
		oracle: newOracle(&Client{HTTP: client.HTTP, Budget: cfg.RetryBudget}, "http://"+f.oracle.Addr)}

	// Baselines: goroutines of each server once up and idle.
	base := map[string]float64{}
	time.Sleep(500 * time.Millisecond)
	for name, url := range f.servers() {
		if m, err := scrape(url); err == nil {
			base[name] = m["go_goroutines"]
		}
	}

	bud := &budgets{max: map[string]float64{}, caps: map[string]float64{}, rss: map[string]float64{}}
	stopScrape := make(chan struct{})
	var scrapeWG sync.WaitGroup
	scrapeWG.Add(1)
	go func() {
		defer scrapeWG.Done()
		bud.watch(f, stopScrape)
	}()
	s.drive(ctx)
	close(stopScrape)
	scrapeWG.Wait()
	elapsed := time.Since(s.start)

	// After the drain: nothing referenced, nothing running, goroutines back down.
	client.HTTP.CloseIdleConnections()
	for name, url := range f.servers() {
		checkDrained(s.judge, name, url, base[name], strings.HasPrefix(name, "replica"), cfg.SettleTimeout)
	}
	rss := bud.check(s.judge)
	if cfg.PD {
		s.handoffChecks()
	}
	r := s.judge.Report()
	if len(dropped) > 0 {
		r.Notes = append(r.Notes, "not a prefill/decode run: left out "+strings.Join(dropped, ", "))
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%d requests in %s (%.1f req/s), %d workers; most resident memory: %s",
		r.Requests, elapsed.Round(time.Second), float64(r.Requests)/elapsed.Seconds(), cfg.Workers, strings.Join(rss, ", ")))
	for i, m := range f.mounted {
		if !m && cfg.Disk {
			r.Notes = append(r.Notes, fmt.Sprintf("replica%d's disk tier is not on its own volume: disk_full is not injected there", i))
		}
	}
	return r, nil
}

// servers is each server's base URL by name: the replicas, and the router if any.
func (f *fleet) servers() map[string]string {
	s := map[string]string{}
	for i, p := range f.replicas {
		s[p.Name] = f.direct[i]
	}
	if f.router != nil {
		s["router"] = "http://" + f.router.Addr
	}
	return s
}

// watch samples the replicas' gauges every 300 ms until stop is closed.
func (b *budgets) watch(f *fleet, stop <-chan struct{}) {
	t := time.NewTicker(300 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for i, p := range f.replicas {
			if m, err := scrape(f.direct[i]); err == nil {
				b.sample(p.Name, m)
			}
		}
	}
}

// check records a budget check per tier of each replica (the most held within its capacity)
// and returns each server's most resident memory, for the report's notes.
func (b *budgets) check(j *Judge) (rss []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range sortedKeys(b.max) {
		j.AddCheck(Check{Name: "budget " + k, OK: b.max[k] <= b.caps[k],
			Detail: fmt.Sprintf("held at most %s of %s", mib(b.max[k]), mib(b.caps[k]))})
	}
	for _, k := range sortedKeys(b.rss) {
		rss = append(rss, fmt.Sprintf("%s %s", k, mib(b.rss[k])))
	}
	return rss
}

// soakRun is the traffic half of a run: the clients, the oracle they check answers against,
// and the judge that records the outcomes.
type soakRun struct {
	cfg    *Config
	f      *fleet
	client *Client
	oracle *oracle
	start  time.Time // when the traffic began

	jmu   sync.Mutex // protects judge while the traffic and the faults run
	judge *Judge
	done  atomic.Int64 // requests finished
	// hooks counts the handoff faults a proxy is still carrying out (pd.go).
	hooks sync.WaitGroup
}

// faultEv is a fault to inject, or with end, a lasting fault to end.
type faultEv struct {
	f   Fault
	end bool
}

// drive sends cfg.Requests operations from cfg.Workers clients, with the fault schedule's
// faults injected one at a time, in order, beside the traffic; it returns when every request
// and every fault is done.
func (s *soakRun) drive(ctx context.Context) {
	cfg := s.cfg
	// Faults run one at a time, in order, beside the traffic.
	sched := Schedule(cfg.Seed, cfg.Requests, cfg.Replicas, cfg.Rounds, cfg.Faults)
	faultC := make(chan faultEv, len(sched)*2+1)
	var faultWG sync.WaitGroup
	faultWG.Add(1)
	go func() {
		defer faultWG.Done()
		s.applyFaults(ctx, faultC)
	}()
	// Lasting faults end at their Until, in op order.
	type ending struct {
		at int
		f  Fault
	}
	var endings []ending
	for _, ft := range sched {
		if ft.Kind.Lasting() {
			endings = append(endings, ending{ft.Until, ft})
		}
	}

	mix := DefaultMix(cfg.Seed, cfg.Replicas, cfg.Router)
	if cfg.PD {
		mix.Prefills, mix.Decodes, mix.HandoffPercent = cfg.Prefills, cfg.Replicas-cfg.Prefills, cfg.HandoffPercent
	}
	gen := NewGenerator(mix)
	opC := make(chan *Op, cfg.Workers)
	var wg sync.WaitGroup
	s.start = time.Now()
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for op := range opC {
				s.do(ctx, op)
			}
		}()
	}
	si, ei := 0, 0
	for i := range cfg.Requests {
		for si < len(sched) && sched[si].At <= i {
			if sched[si].Kind.Handoff() {
				s.f.arm(sched[si]) // the next handed-off request carries it out (pd.go)
			} else {
				faultC <- faultEv{f: sched[si]}
			}
			si++
		}
		for ei < len(endings) && endings[ei].at <= i {
			faultC <- faultEv{f: endings[ei].f, end: true}
			ei++
		}
		select {
		case opC <- gen.Next():
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(opC)
	wg.Wait()
	s.hooks.Wait()
	for _, ft := range s.f.unarmed() {
		s.recordFault(ft, errors.New("no handed-off request came after it was armed"))
	}
	for ; ei < len(endings); ei++ {
		faultC <- faultEv{f: endings[ei].f, end: true}
	}
	close(faultC)
	faultWG.Wait()
}

// applyFaults injects (or ends) each fault from faultC in turn and records it with the judge.
func (s *soakRun) applyFaults(ctx context.Context, faultC <-chan faultEv) {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 0xc0ffee))
	for ev := range faultC {
		var err error
		if ev.end {
			err = s.f.end(ctx, ev.f)
			if err != nil {
				s.jmu.Lock()
				s.judge.Fault(ev.f, fmt.Errorf("ending it: %w", err))
				s.jmu.Unlock()
			}
			continue
		}
		err = s.f.inject(ctx, ev.f, rng)
		s.jmu.Lock()
		s.judge.Fault(ev.f, err)
		s.jmu.Unlock()
		fmt.Fprintf(s.cfg.Progress, "soak: fault %s%s\n", ev.f, errSuffix(err))
	}
}

// do sends one operation to its server (a replica, or the router when op.Via < 0), checks an
// answer against the oracle's, and records the outcome.
func (s *soakRun) do(ctx context.Context, op *Op) {
	cfg := s.cfg
	var url string
	var out Outcome
	switch {
	case op.Handoff:
		url = s.f.proxies[op.Prefill].URL() + " then " + s.f.direct[op.Via]
		out = s.doHandoff(ctx, op)
	case op.Via < 0:
		url = "http://" + s.f.router.Addr
	default:
		url = s.f.direct[op.Via]
	}
	if !op.Handoff {
		out = s.client.Do(ctx, op, url)
	}
	want := ""
	if out.Status == Answered && op.OracleBody != nil {
		w, err := s.oracle.answer(ctx, op)
		if err != nil {
			out.Status, out.Errors = Lost, append(out.Errors, "oracle: "+err.Error())
		}
		want = w
	}
	if out.Status == Answered && op.OracleBody != nil && out.Answer != want {
		// Keep what it takes to replay a wrong answer: the request, where it went, both answers.
		b, _ := json.MarshalIndent(map[string]any{"op": op.ID, "kind": op.Kind.String(), "url": url + op.Path,
			"body": json.RawMessage(op.Body), "got": out.Answer, "finish": out.Finish, "oracle": want}, "", "  ")
		os.WriteFile(filepath.Join(cfg.Dir, fmt.Sprintf("wrong-%d.json", op.ID)), b, 0o644)
	}
	s.jmu.Lock()
	s.judge.Record(out, want)
	s.jmu.Unlock()
	n := s.done.Add(1)
	if step := max(int64(cfg.Requests)/20, 1); n%step == 0 {
		s.jmu.Lock()
		r := s.judge.Report()
		s.jmu.Unlock()
		fmt.Fprintf(cfg.Progress, "soak: %d/%d done, wrong %d, lost %d, %d retried, %.1f req/s\n",
			n, cfg.Requests, r.Wrong, r.Lost, r.Retried, float64(n)/time.Since(s.start).Seconds())
	}
}

// checkDrained waits (up to settle) for a server to settle after the traffic and records the
// leak checks: no request running, no block referenced, goroutines back to their baseline.
func checkDrained(j *Judge, name, url string, baseline float64, replica bool, settle time.Duration) {
	var m metrics
	var err error
	deadline := time.Now().Add(settle)
	const slack = 12 // idle keep-alive connections, the router's event streams, tickers
	for {
		m, err = scrape(url)
		settled := err == nil && m["go_goroutines"] <= baseline+slack
		if replica && err == nil {
			settled = settled && m["stockpot_requests_running"] == 0 && m[`stockpot_kv_cache_usage_bytes{tier="device"}`] == 0
		}
		if settled || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		j.AddCheck(Check{Name: name + " reachable after the run", OK: false, Detail: err.Error()})
		return
	}
	g := m["go_goroutines"]
	j.AddCheck(Check{Name: name + " goroutines", OK: g <= baseline+slack, Detail: fmt.Sprintf("%.0f after the drain, %.0f at start (+%d allowed)", g, baseline, slack)})
	if replica {
		used := m[`stockpot_kv_cache_usage_bytes{tier="device"}`]
		j.AddCheck(Check{Name: name + " leaked blocks", OK: used == 0 && m["stockpot_requests_running"] == 0,
			Detail: fmt.Sprintf("%s referenced, %.0f running after the drain; %.0f preemptions, %.0f blocks discarded as damaged or late",
				mib(used), m["stockpot_requests_running"], m["stockpot_engine_preemptions_total"], sumPrefix(m, "stockpot_kv_blocks_discarded_total"))})
	}
}

func sumPrefix(m metrics, prefix string) float64 {
	s := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func errSuffix(err error) string {
	if err == nil {
		return ""
	}
	return " (not injected: " + err.Error() + ")"
}

// oracle answers each distinct request once, from the cache-off server.
type oracle struct {
	c    *Client
	url  string
	mu   sync.Mutex
	memo map[string]*oracleEntry
}

type oracleEntry struct {
	done chan struct{}
	text string
	err  error
}

func newOracle(c *Client, url string) *oracle {
	return &oracle{c: c, url: url, memo: map[string]*oracleEntry{}}
}

func (o *oracle) answer(ctx context.Context, op *Op) (string, error) {
	k := op.Key()
	o.mu.Lock()
	e := o.memo[k]
	if e == nil {
		e = &oracleEntry{done: make(chan struct{})}
		o.memo[k] = e
		o.mu.Unlock()
		q := *op
		q.Body, q.Stream = op.OracleBody, false
		out := o.c.Do(ctx, &q, o.url)
		if out.Status != Answered {
			e.err = fmt.Errorf("the oracle did not answer: %s", strings.Join(out.Errors, "; "))
		}
		e.text = out.Answer
		close(e.done)
	} else {
		o.mu.Unlock()
		<-e.done
	}
	return e.text, e.err
}
