package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kvcache"
	"stockpot/internal/offload"
	"stockpot/internal/prefix"
	"stockpot/internal/synth"
	"stockpot/internal/tier"
	"stockpot/internal/tier/disk"
)

// hybridAnswer is what the trap test compares: the greedy tokens and their logprobs, and
// where the prompt came from.
type hybridAnswer struct {
	tokens   []int32
	logprobs []float64
	prompt   int
	ttftMs   float64
	cache    struct {
		Device, Host, Disk, Remote, Computed, Discarded, StateBytes int
		Miss                                                        *struct{ Cause string }
	}
}

func hybridComplete(t testing.TB, url, prompt string) hybridAnswer {
	t.Helper()
	code, out := postB(t, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 12, "temperature": 0,
		"ignore_eos": true, "return_token_ids": true, "logprobs": 1, "cache_report": true})
	if code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	var r struct {
		Choices []struct {
			TokenIDs []int32 `json:"token_ids"`
			Logprobs struct {
				TokenLogprobs []float64 `json:"token_logprobs"`
			}
		}
		Usage struct {
			PromptTokens int     `json:"prompt_tokens"`
			Timings      timings `json:"timings"`
			Cache        struct {
				Device     int `json:"device_tokens"`
				Host       int `json:"host_tokens"`
				Disk       int `json:"disk_tokens"`
				Remote     int `json:"remote_tokens"`
				Computed   int `json:"computed_tokens"`
				Discarded  int `json:"discarded_tokens"`
				StateBytes int `json:"state_bytes"`
				Miss       *struct{ Cause string }
			}
		}
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.Choices) != 1 {
		t.Fatalf("reply %s: %v", out, err)
	}
	a := hybridAnswer{tokens: r.Choices[0].TokenIDs, logprobs: r.Choices[0].Logprobs.TokenLogprobs, prompt: r.Usage.PromptTokens, ttftMs: r.Usage.Timings.TTFTMs}
	c := r.Usage.Cache
	a.cache.Device, a.cache.Host, a.cache.Disk, a.cache.Remote = c.Device, c.Host, c.Disk, c.Remote
	a.cache.Computed, a.cache.Discarded, a.cache.StateBytes, a.cache.Miss = c.Computed, c.Discarded, c.StateBytes, c.Miss
	return a
}

func (a hybridAnswer) same(b hybridAnswer) bool {
	if !slices.Equal(a.tokens, b.tokens) || len(a.logprobs) != len(b.logprobs) {
		return false
	}
	for i := range a.logprobs {
		if math.Float64bits(a.logprobs[i]) != math.Float64bits(b.logprobs[i]) {
			return false
		}
	}
	return true
}

// diskRecords opens a stopped server's disk tier and returns the store and its records in
// chain order (the prompt's blocks from the root on).
func diskRecords(t testing.TB, dir string) (*disk.Store, []*tier.Record) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var digest [32]byte
	for _, e := range ents {
		if b, err := hex.DecodeString(e.Name()); e.IsDir() && err == nil && len(b) == 32 {
			copy(digest[:], b)
		}
	}
	s, err := disk.Open(disk.Config{Dir: dir, CapacityBytes: 1 << 30, IdentityDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keys, err := s.Keys(ctx, tier.AllRoots)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := s.Get(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	byParent := map[prefix.Hash]*tier.Record{}
	var root prefix.Hash
	for i, v := range vals {
		r, err := tier.Decode(slices.Clone(v))
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		byParent[r.Parent] = r
		root = r.Root
	}
	var chain []*tier.Record
	for r := byParent[root]; r != nil; r = byParent[r.Hash] {
		chain = append(chain, r)
	}
	return s, chain
}

// rewrite replaces each record of chain (by index) with what change makes of a copy of it.
func rewrite(t testing.TB, s *disk.Store, chain []*tier.Record, change func(i int, r *tier.Record) []byte) {
	t.Helper()
	ctx := context.Background()
	for i, r := range chain {
		c := *r
		c.Aux = slices.Clone(r.Aux)
		v := change(i, &c)
		if v == nil {
			continue
		}
		if err := s.Delete(ctx, []tier.Key{r.Key()}); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, []tier.Item{{Key: r.Key(), Value: v}}); err != nil {
			t.Fatal(err)
		}
	}
}

func encodeRecord(t testing.TB, r *tier.Record) []byte {
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHybridSeedsTrap is the seeds' Kimi-K3 story as a test: a long prompt to a hybrid model
// (qwen35, checkpoints at every block) fills the disk tier, the server stops gracefully (the
// pool is written back, each block with its recurrent-state checkpoint) and starts again on
// the same directory.
//   - Checkpoints intact: the prompt resumes from disk (every reusable block), and the answer
//     equals the answer with no cache at all, bit for bit.
//   - The K/V written without its state (the records re-written with the checkpoints cut
//     out): the store still reports the hit, but the engine rightly discards all of it as
//     incomplete_state (usage, metric, miss cause), recomputes, and answers the same.
//   - The last checkpoints lost: the prefix ends at the last block with one; the K/V past it
//     is discarded. A damaged checkpoint (state bytes flipped) fails the record's checksum:
//     discarded too, never used.
func TestHybridSeedsTrap(t *testing.T) {
	seedsTrap(t, trapCase{preset: "tiny-qwen35", chars: 2400, every: 1, kvBudget: 16 << 20, maxBatch: 40})
}

// TestKimiK3SeedsTrap is the same story on Kimi-K3 itself (KDA state, MLA latent rows, a
// checkpoint every 4th block), at a few thousand tokens; BenchmarkKimiK3SeedsTrap128K runs
// it at 128K tokens.
func TestKimiK3SeedsTrap(t *testing.T) {
	seedsTrap(t, trapCase{preset: "tiny-kimi-k3", chars: 9000, every: 4, kvBudget: 64 << 20, maxBatch: 256})
}

// BenchmarkKimiK3SeedsTrap128K: the seeds' trap at 128K tokens on small-kimi-k3 (a checkpoint
// every 64 blocks of 16 tokens). The first run's cold prefill is the reference (its answer is
// checked against no other, as a cache-off run would cost another cold 128K prefill); it
// reports the cold prefill and each scenario's TTFT.
func BenchmarkKimiK3SeedsTrap128K(b *testing.B) {
	for b.Loop() {
		seedsTrap(b, trapCase{preset: "small-kimi-k3", tokens: 131072, every: 64, kvBudget: 1 << 30, maxBatch: 512, noColdRun: true})
	}
}

// trapCase sizes seedsTrap: the preset, the prompt (chars of longText, or about tokens
// tokens), the checkpoint interval in blocks, the pool and the prefill chunk; noColdRun uses
// the first (cache-filling, all computed) run as the cold reference.
type trapCase struct {
	preset        string
	chars, tokens int
	every         int
	kvBudget      int64
	maxBatch      int
	noColdRun     bool
}

func seedsTrap(t testing.TB, tc trapCase) {
	path := filepath.Join(t.TempDir(), tc.preset+".gguf")
	if err := synth.WriteFile(tc.preset, synth.Options{Seed: 11, Type: gguf.TypeF32}, path); err != nil {
		t.Fatal(err)
	}
	chars := tc.chars
	if tc.tokens > 0 {
		chars = tc.tokens * 264 / 100 // longText runs about 2.64 characters a token on Kimi's vocabulary
	}
	prompt := longText(chars)
	const B = 16
	start := func(to offload.Config, cache bool) (string, func()) {
		o := serveOptions{model: path, threads: 2, tiers: to, engine: engine.Config{BlockSize: B, KVMemory: tc.kvBudget, KVType: kvcache.F32, PrefixCache: cache, Dedup: cache, MaxBatchTokens: tc.maxBatch, MaxRunning: 8, Prefetch: engine.PrefetchWait, StateCheckpointBlocks: tc.every}}
		inst, err := newInstance(o)
		if err != nil {
			t.Fatal(err)
		}
		ts := newHTTPServer(inst)
		return ts.URL, func() { ts.Close(); inst.Close() }
	}
	var cold hybridAnswer
	if !tc.noColdRun {
		// The reference: no cache at all.
		url, stop := start(offload.Config{}, false)
		cold = hybridComplete(t, url, prompt)
		stop()
		if cold.cache.Computed != cold.prompt {
			t.Fatalf("cache off: %+v", cold.cache)
		}
	}

	dir := t.TempDir()
	to := offload.Config{DiskDir: dir, DiskBytes: 4 << 30}
	url, stop := start(to, true)
	first := hybridComplete(t, url, prompt)
	stop() // graceful: every block goes to disk, the checkpoint blocks with their state
	if tc.noColdRun {
		cold = first
	}
	if !first.same(cold) || first.cache.Computed != first.prompt {
		t.Fatalf("first run: %v %+v, cold %v", first.tokens, first.cache, cold.tokens)
	}
	if b, ok := t.(*testing.B); ok {
		b.ReportMetric(float64(first.prompt), "prompt-tokens")
		b.ReportMetric(first.ttftMs, "cold-ttft-ms")
	}
	// The blocks a warm request can reuse end at the deepest checkpoint before its last token.
	full := (first.prompt - 1) / B
	usable := full / tc.every * tc.every
	s, chain := diskRecords(t, dir)
	if len(chain) < full {
		t.Fatalf("disk holds a chain of %d blocks, want at least %d", len(chain), full)
	}
	var cps []int // the blocks (by index) whose record carries a checkpoint
	for i, r := range chain[:full] {
		complete := r.StateComplete && len(r.Aux) == 1 && len(r.Aux[0]) > 0
		if want := (i+1)%tc.every == 0; complete != want {
			t.Fatalf("block %d on disk: complete %v, %d state entries; want a checkpoint %v (every %d blocks)", i, r.StateComplete, len(r.Aux), want, tc.every)
		}
		if complete {
			cps = append(cps, i)
		}
	}
	if len(cps) < 4 || (cps[len(cps)-1]+1) != usable {
		t.Fatalf("checkpoints at blocks %v, want the last at %d and at least 4", cps, usable-1)
	}
	orig := make([][]byte, len(chain))
	for i, r := range chain {
		orig[i] = encodeRecord(t, r)
	}
	s.Close()

	// Every block the disk holds up to the prompt's last full block is found; those past the
	// resume point are discarded, counted by reason. Intact checkpoints resume at the last
	// one (a hybrid reuses whole checkpoint intervals: the blocks after it are incomplete_state).
	// Losing the last two checkpoints moves the resume point back to the third-to-last. A
	// flipped byte in the second-to-last checkpoint fails its record's checksum: the resume
	// point is the one before it; the blocks up to the damaged one are incomplete_state, it
	// and the chain after it checksum.
	third, flipped := cps[len(cps)-3]+1, cps[len(cps)-2]
	type scenario struct {
		name        string
		change      func(i int, r *tier.Record) []byte // nil return: keep the original
		disk        int                                // blocks restored
		reasons     map[string]int                     // blocks discarded, by reason
		missCause   string
		stateResume bool
	}
	inc := engine.ReasonIncompleteState
	for _, sc := range []scenario{
		{name: "checkpoints intact", disk: usable, reasons: map[string]int{inc: full - usable}, stateResume: true},
		{name: "K/V without state", change: func(i int, r *tier.Record) []byte {
			r.Aux, r.StateComplete = nil, false
			return encodeRecord(t, r)
		}, disk: 0, reasons: map[string]int{inc: full}, missCause: "incomplete_state"},
		{name: "last 2 checkpoints lost", change: func(i int, r *tier.Record) []byte {
			if i < third {
				return nil
			}
			r.Aux, r.StateComplete = nil, false
			return encodeRecord(t, r)
		}, disk: third, reasons: map[string]int{inc: full - third}, missCause: "incomplete_state", stateResume: true},
		{name: "a checkpoint's bytes flipped", change: func(i int, r *tier.Record) []byte {
			if i != flipped {
				return nil
			}
			b := encodeRecord(t, r)
			b[len(b)-40] ^= 0x5a // inside the state, before the trailing checksum
			return b
			// The flipped block is the one counted under checksum; the sound blocks after it
			// cannot be used once the chain has broken, and are counted apart.
		}, disk: third, reasons: map[string]int{inc: flipped - third, tier.ReasonChecksum: 1, offload.ReasonAfterBreak: full - flipped - 1}, stateResume: true},
	} {
		run := func(t testing.TB) {
			s, _ := diskRecords(t, dir)
			rewrite(t, s, chain, func(i int, r *tier.Record) []byte {
				if sc.change != nil {
					if v := sc.change(i, r); v != nil {
						return v
					}
				}
				return orig[i]
			})
			s.Close()
			url, stop := start(to, true)
			before := scrapeB(t, url)
			got := hybridComplete(t, url, prompt)
			after := scrapeB(t, url)
			stop()
			if !got.same(cold) {
				t.Errorf("answer %v %v, cold %v %v", got.tokens, got.logprobs, cold.tokens, cold.logprobs)
			}
			c := got.cache
			if c.Disk != sc.disk*B || c.Discarded != (full-sc.disk)*B || c.Device+c.Host+c.Disk+c.Remote+c.Computed != got.prompt {
				t.Errorf("usage.cache %+v: want %d disk tokens, %d discarded", c, sc.disk*B, (full-sc.disk)*B)
			}
			if sc.stateResume != (c.StateBytes > 0) {
				t.Errorf("state_bytes %d, resumed from a checkpoint: %v", c.StateBytes, sc.stateResume)
			}
			if sc.missCause != "" && (c.Miss == nil || c.Miss.Cause != sc.missCause) {
				t.Errorf("miss %+v, want cause %s", c.Miss, sc.missCause)
			}
			for reason, n := range sc.reasons {
				series := `stockpot_kv_blocks_discarded_total{reason="` + reason + `"}`
				if d := after[series] - before[series]; d != float64(n) {
					t.Errorf("%s rose by %v, want %d", series, d, n)
				}
			}
			if got, want := after["stockpot_prefix_cache_min_reusable_tokens"], float64(B*tc.every); got != want {
				t.Errorf("min reusable prefix gauge %v, want %v", got, want)
			}
			if b, ok := t.(*testing.B); ok {
				b.ReportMetric(got.ttftMs, strings.ReplaceAll(sc.name, " ", "-")+"-ttft-ms")
			}
		}
		if tt, ok := t.(*testing.T); ok {
			tt.Run(sc.name, func(t *testing.T) { run(t) })
		} else {
			run(t)
		}
	}
}

// TestHybridRestoreCycles: a hybrid prefix's blocks, with their checkpoints, go through the
// host tier (evicted from a small pool by another long prompt, then restored) and the remote
// tier (written through to Redis, restored by a fresh server), and come back usable: the
// answer equals the cache-off answer bit for bit, the hit is counted by tier, nothing is
// discarded, and the request resumes from a restored checkpoint.
func TestHybridRestoreCycles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qwen35.gguf")
	if err := synth.WriteFile("tiny-qwen35", synth.Options{Seed: 12, Type: gguf.TypeF32}, path); err != nil {
		t.Fatal(err)
	}
	const B = 16
	a, other := longText(2400), "Another kitchen, another pot: "+longText(2600)
	start := func(to offload.Config, cache bool, kv int64) (string, func()) {
		o := serveOptions{model: path, threads: 2, tiers: to, engine: engine.Config{BlockSize: B, KVMemory: kv, KVType: kvcache.F32, PrefixCache: cache, Dedup: cache, MaxBatchTokens: 48, MaxRunning: 8, Prefetch: engine.PrefetchWait}}
		inst, err := newInstance(o)
		if err != nil {
			t.Fatal(err)
		}
		ts := newHTTPServer(inst)
		return ts.URL, func() { ts.Close(); inst.Close() }
	}
	url, stop := start(offload.Config{}, false, 16<<20)
	cold := hybridComplete(t, url, a)
	stop()
	full := (cold.prompt - 1) / B * B
	check := func(name string, got hybridAnswer, tierTokens int) {
		t.Helper()
		if !got.same(cold) {
			t.Errorf("%s: answer %v, cache off %v", name, got.tokens, cold.tokens)
		}
		if c := got.cache; tierTokens == 0 || c.Device+c.Host+c.Disk+c.Remote != full || c.Discarded != 0 || c.StateBytes == 0 || c.Computed != got.prompt-full {
			t.Errorf("%s: usage.cache %+v: want all %d reusable tokens reused, some from the tier, none discarded", name, c, full)
		}
	}
	t.Run("host", func(t *testing.T) {
		// A small pool (about 80 blocks of 16 tokens, beside their checkpoints): the other
		// prompt evicts a's blocks.
		url, stop := start(offload.Config{HostBytes: 64 << 20}, true, 4<<20)
		defer stop()
		hybridComplete(t, url, a)
		hybridComplete(t, url, other)
		got := hybridComplete(t, url, a)
		check("host", got, got.cache.Host)
	})
	t.Run("remote", func(t *testing.T) {
		to := offload.Config{RemoteURL: "redis://" + startRedis(t) + "/0", Remote: testRemote}
		url, stop := start(to, true, 16<<20)
		hybridComplete(t, url, a) // written through to Redis at each commit
		stop()
		url, stop = start(to, true, 16<<20)
		defer stop()
		got := hybridComplete(t, url, a)
		check("remote", got, got.cache.Remote)
	})
}

// TestHybridPinsCarryState: a hybrid prompt pinned (prompt_cache_retention) is written to the
// disk tier by the pin writer with its checkpoints, so after a crash (no shutdown write-back:
// the pin writer's records are all the disk has) the prompt still resumes from disk.
func TestHybridPinsCarryState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qwen35.gguf")
	if err := synth.WriteFile("tiny-qwen35", synth.Options{Seed: 13, Type: gguf.TypeF32}, path); err != nil {
		t.Fatal(err)
	}
	const B = 16
	prompt := longText(1600)
	to := offload.Config{DiskDir: t.TempDir(), DiskBytes: 1 << 30}
	o := serveOptions{model: path, threads: 2, tiers: to, engine: engine.Config{BlockSize: B, KVMemory: 16 << 20, KVType: kvcache.F32, PrefixCache: true, Dedup: true, MaxBatchTokens: 64, MaxRunning: 8, Prefetch: engine.PrefetchWait}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	code, out := post(t, ts.URL+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 4, "temperature": 0,
		"ignore_eos": true, "prompt_cache_retention": "24h"})
	if code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	// A crash: the engine and the tiers stop without the pool's write-back.
	ts.Close()
	inst.engine.Close()
	inst.tiers.Close()
	inst.pool.Close()

	inst, err = newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts = newHTTPServer(inst)
	defer func() { ts.Close(); inst.Close() }()
	got := hybridComplete(t, ts.URL, prompt)
	if full := (got.prompt - 1) / B * B; got.cache.Disk != full || got.cache.Discarded != 0 || got.cache.StateBytes == 0 {
		t.Errorf("after a crash: usage.cache %+v, want %d disk tokens resumed from a pinned checkpoint", got.cache, full)
	}
}

// TestHybridModelCard: GET /v1/models says what a hybrid's reuse unit is, and warns when the
// configuration leaves no prompt a hit (never a silent zero).
func TestHybridModelCard(t *testing.T) {
	for _, every := range []int{3, 600} {
		_, ts := newTestInstance(t, func(o *serveOptions) { o.model = "synthetic:tiny-qwen35"; o.engine.StateCheckpointBlocks = every })
		resp, err := http.Get(ts.URL + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		var list struct {
			Data []struct {
				Stockpot struct {
					MinReusableTokens int    `json:"min_reusable_tokens"`
					StateBytes        int    `json:"state_bytes"`
					Warning           string `json:"warning"`
				}
			}
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil || len(list.Data) != 1 {
			t.Fatalf("models: %v %+v", err, list)
		}
		card := list.Data[0].Stockpot
		if card.MinReusableTokens != 16*every || card.StateBytes == 0 || (card.Warning != "") != (16*every >= 8192) {
			t.Errorf("every %d blocks: card %+v", every, card)
		}
		if got := scrape(t, ts.URL)["stockpot_prefix_cache_min_reusable_tokens"]; got != float64(16*every) {
			t.Errorf("every %d blocks: gauge %v", every, got)
		}
	}
}

// TestBenchHybridPrediction: `stockpot bench` against a hybrid served with a checkpoint every
// 4 blocks predicts hits in the server's unit (min_reusable_tokens from /v1/models), so every
// request's predicted reuse is what the server reported.
func TestBenchHybridPrediction(t *testing.T) {
	_, ts := newTestInstance(t, func(o *serveOptions) { o.model = "synthetic:tiny-qwen35"; o.engine.StateCheckpointBlocks = 4 })
	out := t.TempDir()
	if err := cmdBench([]string{"--target", ts.URL, "--workload", "agent", "--sessions", "2", "--turns", "3", "--max-tokens", "4",
		"--concurrency", "1", "--quiet", "--out", out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Errors     int `json:"errors"`
		PerRequest []struct {
			Cached    *int `json:"cached_tokens"`
			Predicted *int `json:"predicted_reusable_tokens"`
		} `json:"per_request"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	hits := 0
	for i, r := range rep.PerRequest {
		if r.Cached == nil || r.Predicted == nil || *r.Cached != *r.Predicted || *r.Cached%64 != 0 {
			t.Errorf("request %d: cached %v, predicted %v (want equal multiples of 64)", i, deref(r.Cached), deref(r.Predicted))
		}
		if r.Cached != nil && *r.Cached > 0 {
			hits++
		}
	}
	if rep.Errors != 0 || len(rep.PerRequest) != 6 || hits == 0 {
		t.Errorf("%d errors, %d requests, %d hits", rep.Errors, len(rep.PerRequest), hits)
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
