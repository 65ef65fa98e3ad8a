package bench

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"stockpot/internal/kvtier"
)

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed_b0a7)) }

// scrapePoint is one /metrics reading during the run.
type scrapePoint struct {
	At   time.Duration
	Snap counterSnapshot
}

// runResult is everything measured, before it is summarized into a Report.
type runResult struct {
	cfg           Config
	tgt           *target
	tokensPerWord float64
	samples       []Sample
	before, after counterSnapshot
	scrapes       []scrapePoint
	wall          time.Duration
}

// Run drives cfg's workload against cfg.Target and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Workload == "longctx" {
		c, err := cfg.validate()
		if err != nil {
			return nil, err
		}
		return runLongCtx(ctx, c)
	}
	res, err := run(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return summarizeRun(res), nil
}

// CountRequests says how many requests cfg's workload will send (for a progress bar).
func CountRequests(cfg Config) (int, error) {
	c, err := cfg.validate()
	if err != nil {
		return 0, err
	}
	if c.Workload == "longctx" {
		// At most: cold, the pool, and one request per lower tier a server can have.
		return len(c.Lengths) * (2 + len(kvtier.Below)), nil
	}
	scripts, err := BuildScripts(c, defaultTokensPerWord)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range scripts {
		n += max(1, len(s.Steps))
	}
	return n, nil
}

func run(ctx context.Context, cfg Config) (*runResult, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConnsPerHost: max(cfg.Concurrency, 16), DisableCompression: true}
	tgt := &target{base: cfg.Target, apiKey: cfg.APIKey, model: cfg.Model, http: &http.Client{Transport: tr}}
	defer tr.CloseIdleConnections()
	tgt.probe(ctx, cfg.BlockSize)
	tpw := tgt.calibrate(ctx, cfg.Seed)
	scripts, err := BuildScripts(cfg, tpw)
	if err != nil {
		return nil, err
	}
	scrapeClient := &http.Client{Timeout: 10 * time.Second}
	before, err := scrapeServers(ctx, scrapeClient, cfg)
	if err != nil {
		return nil, err
	}
	res := &runResult{cfg: cfg, tgt: tgt, tokensPerWord: tpw, before: before}
	epoch := time.Now()

	// Periodic scrapes for the hit-rate-over-time plot.
	stopScrape := make(chan struct{})
	var scrapeWG sync.WaitGroup
	if before.Present && cfg.ScrapeInterval > 0 {
		scrapeWG.Add(1)
		go func() {
			defer scrapeWG.Done()
			tick := time.NewTicker(cfg.ScrapeInterval)
			defer tick.Stop()
			for {
				select {
				case <-stopScrape:
					return
				case <-tick.C:
					if s, err := scrapeServers(ctx, scrapeClient, cfg); err == nil && s.Present {
						res.scrapes = append(res.scrapes, scrapePoint{time.Since(epoch), s})
					}
				}
			}
		}()
	}

	var mu sync.Mutex // protects res.samples
	runScript := func(sc Script) {
		var got []Sample
		if sc.Raw != nil {
			got = append(got, runRaw(ctx, tgt, cfg, sc, epoch))
		} else {
			got = runSteps(ctx, tgt, cfg, sc, epoch)
		}
		mu.Lock()
		res.samples = append(res.samples, got...)
		mu.Unlock()
	}

	var wg sync.WaitGroup
	switch {
	case cfg.Workload == "trace" || cfg.Rate > 0:
		// Open loop: each session starts at its arrival time whatever is still running.
		arrivals := make([]time.Duration, len(scripts))
		rng := newRand(cfg.Seed ^ 0xa771)
		var at float64
		for i, sc := range scripts {
			if sc.Raw != nil {
				arrivals[i] = sc.Offset
				continue
			}
			at += rng.ExpFloat64() / cfg.Rate
			arrivals[i] = time.Duration(at * float64(time.Second))
		}
		for i, sc := range scripts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := time.NewTimer(time.Until(epoch.Add(arrivals[i])))
				defer t.Stop()
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				runScript(sc)
			}()
		}
	default:
		// Closed loop: Concurrency workers take sessions in order.
		queue := make(chan Script)
		for w := 0; w < cfg.Concurrency; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for sc := range queue {
					runScript(sc)
				}
			}()
		}
	feed:
		for _, sc := range scripts {
			select {
			case queue <- sc:
			case <-ctx.Done():
				break feed
			}
		}
		close(queue)
	}
	wg.Wait()
	res.wall = time.Since(epoch)
	close(stopScrape)
	scrapeWG.Wait()
	after, err := settledScrape(context.WithoutCancel(ctx), scrapeClient, cfg, before, res.samples)
	if err != nil {
		return nil, err
	}
	res.after = after
	if after.Present {
		res.scrapes = append(res.scrapes, scrapePoint{res.wall, after})
	}
	return res, nil
}

// runSteps runs one session's steps in order. With Append, each request carries the whole
// transcript so far: the actual answers, or each step's Reply where it has one.
func runSteps(ctx context.Context, tgt *target, cfg Config, sc Script, epoch time.Time) []Sample {
	var out []Sample
	var history []Message
	for turn, st := range sc.Steps {
		if ctx.Err() != nil {
			break
		}
		msgs := st.Messages
		if sc.Append {
			msgs = append(append([]Message(nil), history...), st.Messages...)
		}
		s := Sample{Session: sc.Session, Turn: turn}
		body := map[string]any{"max_tokens": cfg.MaxTokens}
		endpoint := "/v1/completions"
		if cfg.Chat {
			endpoint = "/v1/chat/completions"
			body["messages"] = msgs
			if len(sc.Tools) > 0 {
				body["tools"] = sc.Tools
			}
			s.PromptText = renderTools(sc.Tools) + renderCompletion(msgs)
		} else {
			s.PromptText = renderCompletion(msgs)
			body["prompt"] = s.PromptText
		}
		measureServer(ctx, cfg, &s, func() {
			rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			tgt.send(rctx, endpoint, body, epoch, &s)
			cancel()
		})
		if len(sc.Tools) == 0 {
			// /tokenize renders messages without tools: its ids would not be this prompt's.
			maybeTokenize(ctx, tgt, cfg.Chat, msgs, &s)
		}
		if cfg.Progress != nil {
			cfg.Progress()
		}
		out = append(out, s)
		switch {
		case sc.Append && st.Reply != nil:
			history = append(msgs, st.Reply...)
		case sc.Append:
			history = append(msgs, msg("assistant", s.OutputText))
		}
	}
	return out
}

// maybeTokenize fills s.PromptIDs from /tokenize when the answer did not carry them. It runs
// after the request, so it never competes with it.
func maybeTokenize(ctx context.Context, tgt *target, chat bool, msgs []Message, s *Sample) {
	if s.PromptIDs != nil || !tgt.tokenize || !s.OK {
		return
	}
	var ids []int32
	var err error
	if chat {
		ids, err = tgt.tokenizeChat(ctx, msgs)
	} else {
		ids, err = tgt.tokenizeText(ctx, s.PromptText, true)
	}
	if err == nil {
		s.PromptIDs = ids
	}
}

// runRaw replays one trace record.
func runRaw(ctx context.Context, tgt *target, cfg Config, sc Script, epoch time.Time) Sample {
	s := Sample{Session: sc.Session}
	var body map[string]any
	if err := json.Unmarshal(sc.Raw.Body, &body); err != nil {
		s.Err = "trace body: " + err.Error()
		return s
	}
	if p, ok := body["prompt"].(string); ok {
		s.PromptText = p
	} else if m, ok := body["messages"]; ok {
		b, _ := json.Marshal(m)
		s.PromptText = string(b)
	}
	rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	tgt.send(rctx, sc.Raw.Endpoint, body, epoch, &s)
	cancel()
	if s.PromptIDs == nil && tgt.tokenize && s.OK {
		if p, ok := body["prompt"].(string); ok {
			if ids, err := tgt.tokenizeText(ctx, p, true); err == nil {
				s.PromptIDs = ids
			}
		}
	}
	if cfg.Progress != nil {
		cfg.Progress()
	}
	return s
}

// settledScrape takes the final scrape once the counters have caught up with the run. A server
// may update its counters just after the last byte of a response, and one scrape is not atomic
// across metrics, so a scrape taken at once can miss the last request or see half of it. It
// waits (up to settleTimeout) until two scrapes in a row agree, the per-source tokens add up
// to the queries, and the queries cover Σ usage.prompt_tokens of the successful requests.
func settledScrape(ctx context.Context, c *http.Client, cfg Config, before counterSnapshot, samples []Sample) (counterSnapshot, error) {
	const settleTimeout, settlePoll = 3 * time.Second, 50 * time.Millisecond
	var want float64
	for _, s := range samples {
		if s.OK {
			want += float64(s.PromptTokens)
		}
	}
	deadline := time.Now().Add(settleTimeout)
	var prev counterSnapshot
	for i := 0; ; i++ {
		cur, err := scrapeServers(ctx, c, cfg)
		if err != nil || !cur.Present || !before.Present {
			return cur, err
		}
		d := counterDelta(before, cur)
		tiersAddUp := true
		if d.Tiers != nil {
			sum := 0.0
			for _, v := range d.Tiers {
				sum += v
			}
			tiersAddUp = sum == d.Queries
		}
		if i > 0 && sameCounters(prev, cur) && tiersAddUp && d.Queries >= want {
			return cur, nil
		}
		if time.Now().After(deadline) {
			return cur, nil
		}
		prev = cur
		time.Sleep(settlePoll)
	}
}

func sameCounters(a, b counterSnapshot) bool {
	if a.Queries != b.Queries || a.Hits != b.Hits || len(a.Tiers) != len(b.Tiers) {
		return false
	}
	for k, v := range a.Tiers {
		if b.Tiers[k] != v {
			return false
		}
	}
	return true
}
