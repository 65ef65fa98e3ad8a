package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"stockpot/internal/dashboard"
	"stockpot/internal/engine"
	"stockpot/internal/identity"
	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
)

// `stockpot demo`: the prefix cache, shown live. It serves the embedded model in-process,
// prints the dashboard's URL (?demo=1 adds the demo's panel) and walks four modes, narrated
// both on stdout and on the page:
//
//   - start: the setup — model, block size, the shared prefix;
//   - execute: a short workload replayed step by step, each prompt cut into blocks, hashed in
//     a chain, matched up to the first block that differs from anything sent before, and the
//     tail computed; the demo's own prediction is printed beside what the server reported;
//   - monitor: a burst of requests sharing the prefix while the live metrics move;
//   - complete: the summary against the (T−1)/(T+1) and block-aligned predictions.

// demoOptions are the resolved flags of `stockpot demo`.
type demoOptions struct {
	model     string
	addr      string
	threads   int
	headless  bool          // no one is watching: no pauses between steps
	exitAfter time.Duration // after complete, keep serving this long (0: until Ctrl-C, or at once when headless)
	step      time.Duration // pause between execute steps
	burst     int           // requests in the monitor burst
	out       io.Writer     // the narration
	progress  io.Writer     // model loading
	// onURL, when set, receives the dashboard URL once it serves (tests open it in a browser).
	onURL func(string)
	// hold, when set, runs after complete while still serving (tests look at the page).
	hold func()
}

// demoBlock is one block of a prompt as the demo shows it.
type demoBlock struct {
	Index  int    `json:"index"`
	Hash   string `json:"hash"`
	Parent string `json:"parent"`
	Text   string `json:"text"`
	// State: matched (reused from the cache), diverged (the first block that differs),
	// computed (after it), tail (the last, partial block: never cached).
	State string `json:"state"`
}

type demoPrompt struct {
	Tokens          int         `json:"tokens"`
	Blocks          []demoBlock `json:"blocks"`
	FirstDiffBlock  int         `json:"first_diff_block"` // -1: every full block was cached
	PredictedTokens int         `json:"predicted_tokens"`
	CachedTokens    int         `json:"cached_tokens"`
}

// demoSummary is what complete reports.
type demoSummary struct {
	Requests        int     `json:"requests"`
	PromptTokens    int     `json:"prompt_tokens"`
	CachedTokens    int     `json:"cached_tokens"`
	PredictedTokens int     `json:"predicted_tokens"`
	Matched         int     `json:"matched"` // requests whose cached tokens equal the prediction
	HitRate         float64 `json:"hit_rate"`
	TMinus1         string  `json:"t_minus_1"`
	TPlus1          string  `json:"t_plus_1"`
}

// demoNote is the "demo" event the page renders.
type demoNote struct {
	Mode    string         `json:"mode"`
	Note    string         `json:"note,omitempty"`
	Step    int            `json:"step,omitempty"`
	Steps   int            `json:"steps,omitempty"`
	Setup   map[string]any `json:"setup,omitempty"`
	Prompt  *demoPrompt    `json:"prompt,omitempty"`
	Summary *demoSummary   `json:"summary,omitempty"`
	Metrics map[string]any `json:"metrics,omitempty"`
}

func cmdDemo(args []string) error {
	fs := newFlagSet("demo")
	modelSpec := fs.String("model", defaultModel, "GGUF file, or synthetic:PRESET")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (port 0: any free port)")
	threads := fs.Int("threads", 0, "compute threads (0: all cores)")
	headless := fs.Bool("headless", false, "nobody watches: no pauses between steps, exit after complete")
	exitAfter := fs.Duration("exit-after", 0, "after the last mode keep serving this long, then exit (0: until Ctrl-C; with --headless, at once)")
	step := fs.Duration("step", 1500*time.Millisecond, "pause between the execute steps (ignored with --headless)")
	burst := fs.Int("burst", 24, "requests in the monitor burst")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected arguments %q", fs.Args())
	}
	if *burst < 1 {
		return fmt.Errorf("demo: --burst %d must be at least 1", *burst)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err := runDemo(ctx, demoOptions{model: *modelSpec, addr: *addr, threads: *threads, headless: *headless, exitAfter: *exitAfter,
		step: *step, burst: *burst, out: os.Stdout, progress: os.Stderr})
	return err
}

// The workload: a shared system prompt with a date line, and questions after it.
const (
	demoSystem = "You are Stockpot's demo assistant. You answer questions about soups, stocks and broths. " +
		"Be brief and precise; name the ingredients, the time and the temperature. Never invent a recipe you do not know. " +
		"Kitchen rules: taste as you go, skim the foam, keep the simmer gentle, salt at the end.\n"
	demoDateA = "Today is Monday.\n"
	demoDateB = "Today is Tuesday.\n"
)

var demoQuestions = []string{
	"How long should a chicken stock simmer?",
	"What makes a broth cloudy?",
	"Which vegetables belong in a mirepoix?",
	"How do I fix a soup that is too salty?",
	"Can I freeze fish stock, and for how long?",
	"Why roast the bones before making a brown stock?",
}

// runDemo runs the four modes against an in-process server and returns the summary.
func runDemo(ctx context.Context, o demoOptions) (*demoSummary, error) {
	if o.out == nil {
		o.out = io.Discard
	}
	const blockSize = 16
	inst, err := newInstance(serveOptions{model: o.model, threads: o.threads, progress: o.progress, engine: engine.Config{BlockSize: blockSize, KVMemory: 64 << 20, KVType: kvcache.F32, PrefixCache: true, Dedup: true, MaxBatchTokens: 512, MaxRunning: 16}})
	if err != nil {
		return nil, err
	}
	defer inst.Close()
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, err
	}
	sctx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- inst.server.ServeHandler(sctx, ln, inst.handler(sctx)) }()
	defer func() {
		stopServing()
		<-served
	}()
	base := "http://" + ln.Addr().String()
	url := base + "/dashboard?demo=1"
	fmt.Fprintf(o.out, "stockpot demo: open %s\n", url)
	if o.onURL != nil {
		o.onURL(url)
	}
	d := &demo{o: o, base: base, srv: inst, blockSize: blockSize, seen: map[prefix.Hash]bool{}}
	lf := inst.file
	desc := identity.Descriptor{Model: lf.fingerprint, Tokenizer: lf.tok.Digest(), KVType: kvcache.F32.String(), BlockSize: blockSize}
	id := desc.Digest()
	d.root = prefix.Root(id[:], "")

	d.waitForBrowser(ctx)

	// start
	system := lf.tok.Encode(demoDateA+demoSystem, true, false)
	setup := map[string]any{"model": lf.name, "block_size": blockSize, "shared_prefix_tokens": len(system),
		"shared_prefix_text": demoDateA + demoSystem, "requests": 6 + o.burst,
		"kv_pool": fmt.Sprintf("%d blocks", inst.engine.Stats().KVBlocksTotal), "identity": hex.EncodeToString(id[:4])}
	d.note(demoNote{Mode: "start", Note: "setup", Setup: setup})
	fmt.Fprintf(o.out, "[start] model %s, blocks of %d tokens; every prompt starts with a %d-token system prompt (%d full blocks)\n",
		lf.name, blockSize, len(system), len(system)/blockSize)
	if err := d.pause(ctx); err != nil {
		return nil, err
	}

	// execute
	steps := []struct{ text, why string }{
		{demoDateA + demoSystem + demoQuestions[0], "cold: nothing is cached yet"},
		{demoDateA + demoSystem + demoQuestions[0], "the same prompt again: the (T−1) case"},
		{demoDateA + demoSystem + demoQuestions[0] + " And for a beef stock?", "the same prompt, extended: the (T+1) case"},
		{demoDateA + demoSystem + demoQuestions[1], "another question after the shared prefix: a partial hit"},
		{demoDateB + demoSystem + demoQuestions[1], "the date line changed: the chain breaks at its block"},
		{demoDateA + demoSystem + demoQuestions[2], "back to the shared prefix"},
	}
	for i, s := range steps {
		p, err := d.send(ctx, s.text)
		if err != nil {
			return nil, err
		}
		d.note(demoNote{Mode: "execute", Note: s.why, Step: i + 1, Steps: len(steps), Prompt: p})
		fmt.Fprintf(o.out, "[execute %d/%d] %s: %d tokens, %d blocks, first differing block %d, predicted %d cached, server reported %d\n",
			i+1, len(steps), s.why, p.Tokens, len(p.Blocks), p.FirstDiffBlock, p.PredictedTokens, p.CachedTokens)
		if err := d.pause(ctx); err != nil {
			return nil, err
		}
	}

	// monitor
	d.note(demoNote{Mode: "monitor", Note: fmt.Sprintf("a burst of %d requests sharing the prefix", o.burst)})
	if err := d.burst(ctx); err != nil {
		return nil, err
	}

	// complete
	sum := d.summary()
	d.note(demoNote{Mode: "complete", Note: "summary", Summary: &sum})
	fmt.Fprintf(o.out, "[complete] %d requests, %d prompt tokens, %d reused (predicted %d); %d of %d matched the block-aligned prediction; hit rate %.1f%%\n",
		sum.Requests, sum.PromptTokens, sum.CachedTokens, sum.PredictedTokens, sum.Matched, sum.Requests, 100*sum.HitRate)
	fmt.Fprintf(o.out, "[complete] (T−1): %s\n[complete] (T+1): %s\n", sum.TMinus1, sum.TPlus1)
	if o.hold != nil {
		o.hold()
	}
	switch {
	case o.exitAfter > 0:
		fmt.Fprintf(o.out, "stockpot demo: serving %s for %v more\n", url, o.exitAfter)
		select {
		case <-time.After(o.exitAfter):
		case <-ctx.Done():
		}
	case !o.headless:
		fmt.Fprintf(o.out, "stockpot demo: still serving %s; Ctrl-C to stop\n", url)
		<-ctx.Done()
	}
	fmt.Fprintln(o.out, "stockpot demo: done")
	return &sum, nil
}

type demo struct {
	o         demoOptions
	base      string
	srv       *instance
	blockSize int
	root      prefix.Hash

	mu      sync.Mutex
	seen    map[prefix.Hash]bool // block hashes sent before (what the cache may hold); protected by mu
	records []demoPrompt         // protected by mu
	tMinus1 string
	tPlus1  string
}

// note narrates on the page: each execute step keeps a slot of its own (a page opened late
// shows the whole walk), the other modes one each.
func (d *demo) note(n demoNote) {
	slot := n.Mode
	if n.Mode == "execute" {
		slot = fmt.Sprintf("execute-%d", n.Step)
	}
	d.srv.server.DashboardNote("demo", slot, n)
}

// waitForBrowser holds the walk until a browser has the dashboard open (or a minute passes,
// or ctx ends), so that whoever opens the URL sees it from the first step.
func (d *demo) waitForBrowser(ctx context.Context) {
	if d.o.headless || d.srv.server.DashboardClients() > 0 {
		return
	}
	fmt.Fprintln(d.o.out, "stockpot demo: waiting for the dashboard to be opened (at most a minute)...")
	deadline := time.Now().Add(time.Minute)
	for d.srv.server.DashboardClients() == 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *demo) pause(ctx context.Context) error {
	if d.o.headless {
		return ctx.Err()
	}
	select {
	case <-time.After(d.o.step):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// predict cuts tokens into blocks, hashes them in a chain and matches them against the blocks
// sent before, as the server's cache does (nothing is evicted in the demo's small workload).
func (d *demo) predict(tokens []int32) *demoPrompt {
	B := d.blockSize
	hashes := prefix.BlockHashes(d.root, tokens, B)
	limit := prefix.MaxMatchBlocks(len(tokens), B)
	p := &demoPrompt{Tokens: len(tokens), FirstDiffBlock: -1}
	d.mu.Lock()
	defer d.mu.Unlock()
	matched := 0
	for matched < len(hashes) && d.seen[hashes[matched]] {
		matched++
	}
	if matched < len(hashes) {
		p.FirstDiffBlock = matched
	}
	p.PredictedTokens = min(matched, limit) * B
	tok := d.srv.file.tok
	for i := 0; i*B < len(tokens); i++ {
		end := min((i+1)*B, len(tokens))
		b := demoBlock{Index: i, Text: tok.Decode(tokens[i*B : end])}
		switch {
		case i < len(hashes):
			b.Hash = hashes[i].Short()
			if i == 0 {
				b.Parent = "root " + d.root.Short()
			} else {
				b.Parent = hashes[i-1].Short()
			}
		default:
			b.Hash, b.Parent, b.State = "(partial)", "", "tail"
		}
		if b.State == "" {
			switch {
			case i < matched && i < limit:
				b.State = "matched"
			case i == matched:
				b.State = "diverged"
			default:
				b.State = "computed"
			}
		}
		p.Blocks = append(p.Blocks, b)
	}
	for _, h := range hashes {
		d.seen[h] = true
	}
	return p
}

// send predicts and sends one prompt (as token ids, so the server hashes exactly what the
// demo did) and records the server's cached tokens.
func (d *demo) send(ctx context.Context, text string) (*demoPrompt, error) {
	tokens := d.srv.file.tok.Encode(text, true, false)
	p := d.predict(tokens)
	body, _ := json.Marshal(map[string]any{"prompt": tokens, "max_tokens": 4, "temperature": 0})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("demo: the server answered %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var r struct {
		Usage struct {
			Details struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("demo: reading the answer: %w", err)
	}
	p.CachedTokens = r.Usage.Details.Cached
	d.mu.Lock()
	d.records = append(d.records, *p)
	n := len(d.records)
	switch n {
	case 2:
		d.tMinus1 = fmt.Sprintf("the same %d-token prompt again reused %d = ⌊(T−1)/B⌋·B = ⌊%d/%d⌋·%d (the last token is always computed)",
			p.Tokens, p.CachedTokens, p.Tokens-1, d.blockSize, d.blockSize)
	case 3:
		t := d.records[0].Tokens
		d.tPlus1 = fmt.Sprintf("extending the cached %d-token prompt to %d tokens reused %d = ⌊T/B⌋·B = ⌊%d/%d⌋·%d (every full block of the cached prompt)",
			t, p.Tokens, p.CachedTokens, t, d.blockSize, d.blockSize)
	}
	d.mu.Unlock()
	return p, nil
}

// burst sends o.burst requests, four at a time, narrating the live metrics as they move.
func (d *demo) burst(ctx context.Context) error {
	jobs := make(chan string)
	errc := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for text := range jobs {
				if _, err := d.send(ctx, text); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	sent := 0
	var sendErr error
loop:
	for sent < d.o.burst {
		q := demoQuestions[sent%len(demoQuestions)]
		text := demoDateA + demoSystem + q + strings.Repeat(" Please.", sent/len(demoQuestions))
		select {
		case jobs <- text:
			sent++
		case sendErr = <-errc:
			break loop
		case <-tick.C:
			d.monitor(sent)
		case <-ctx.Done():
			sendErr = ctx.Err()
			break loop
		}
	}
	close(jobs)
	wg.Wait()
	if sendErr == nil {
		select {
		case sendErr = <-errc:
		default:
		}
	}
	d.monitor(sent)
	return sendErr
}

// monitor narrates the server's live metrics (its registry: what /metrics serves).
func (d *demo) monitor(sent int) {
	m, _ := dashboard.Flatten(d.srv.reg)
	num := func(k string) float64 {
		v, _ := m[k].(float64)
		return v
	}
	var reused float64
	for _, t := range []string{"device", "host", "disk", "remote"} {
		reused += num(`stockpot_prompt_tokens_total{source="` + t + `"}`)
	}
	computed := num(`stockpot_prompt_tokens_total{source="computed"}`)
	rate := "n/a"
	if v, ok := m["stockpot_prefix_cache_hit_rate"].(float64); ok {
		rate = fmt.Sprintf("%.1f%%", 100*v)
	}
	d.note(demoNote{Mode: "monitor", Note: fmt.Sprintf("%d of %d burst requests sent; hit rate %s", sent, d.o.burst, rate),
		Metrics: map[string]any{"hit_rate": m["stockpot_prefix_cache_hit_rate"], "reused_tokens": reused, "computed_tokens": computed}})
	fmt.Fprintf(d.o.out, "[monitor] %d/%d sent; hit rate (window) %s; reused %.0f vs computed %.0f prompt tokens so far\n",
		sent, d.o.burst, rate, reused, computed)
}

func (d *demo) summary() demoSummary {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := demoSummary{Requests: len(d.records), TMinus1: d.tMinus1, TPlus1: d.tPlus1}
	for _, r := range d.records {
		s.PromptTokens += r.Tokens
		s.CachedTokens += r.CachedTokens
		s.PredictedTokens += r.PredictedTokens
		if r.CachedTokens == r.PredictedTokens {
			s.Matched++
		}
	}
	if s.PromptTokens > 0 {
		s.HitRate = float64(s.CachedTokens) / float64(s.PromptTokens)
	}
	return s
}
