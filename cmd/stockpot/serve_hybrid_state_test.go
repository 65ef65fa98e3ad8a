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
	cache    struct {
		Device, Host, Disk, Remote, Computed, Discarded, StateBytes int
		Miss                                                        *struct{ Cause string }
	}
}

func hybridComplete(t *testing.T, url, prompt string) hybridAnswer {
	t.Helper()
	code, out := post(t, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 12, "temperature": 0,
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
			PromptTokens int `json:"prompt_tokens"`
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
	a := hybridAnswer{tokens: r.Choices[0].TokenIDs, logprobs: r.Choices[0].Logprobs.TokenLogprobs, prompt: r.Usage.PromptTokens}
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
func diskRecords(t *testing.T, dir string) (*disk.Store, []*tier.Record) {
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
func rewrite(t *testing.T, s *disk.Store, chain []*tier.Record, change func(i int, r *tier.Record) []byte) {
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

func encodeRecord(t *testing.T, r *tier.Record) []byte {
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHybridSeedsTrap is the seeds' Kimi-K3 story as a test: a long prompt to a hybrid model
// (qwen35) fills the disk tier, the server stops gracefully (the pool is written back, each
// block with its recurrent-state checkpoint) and starts again on the same directory.
//   - Checkpoints intact: the prompt resumes from disk (every reusable block), and the answer
//     equals the answer with no cache at all, bit for bit.
//   - The K/V written without its state (the records re-written with the checkpoints cut
//     out): the store still reports the hit, but the engine rightly discards all of it as
//     incomplete_state (usage, metric, miss cause), recomputes, and answers the same.
//   - Only the last checkpoints lost: the prefix ends at the last block with one; the K/V
//     past it is discarded. A damaged checkpoint (state bytes flipped) fails the record's
//     checksum: discarded too, never used.
func TestHybridSeedsTrap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "qwen35.gguf")
	if err := synth.WriteFile("tiny-qwen35", synth.Options{Seed: 11, Type: gguf.TypeF32}, path); err != nil {
		t.Fatal(err)
	}
	prompt := longText(2400)
	const B = 16
	start := func(to offload.Config, cache bool) (string, func()) {
		o := serveOptions{model: path, threads: 2, blockSize: B, kvBudget: 16 << 20, kvType: kvcache.F32,
			prefixCache: cache, dedup: cache, maxBatch: 40, maxRunning: 8, tiers: to, prefetch: engine.PrefetchWait}
		inst, err := newInstance(o)
		if err != nil {
			t.Fatal(err)
		}
		ts := newHTTPServer(inst)
		return ts.URL, func() { ts.Close(); inst.Close() }
	}
	// The reference: no cache at all.
	url, stop := start(offload.Config{}, false)
	cold := hybridComplete(t, url, prompt)
	stop()
	if cold.cache.Computed != cold.prompt {
		t.Fatalf("cache off: %+v", cold.cache)
	}
	full := (cold.prompt - 1) / B // blocks a warm request reuses

	dir := t.TempDir()
	to := offload.Config{DiskDir: dir, DiskBytes: 1 << 30}
	url, stop = start(to, true)
	first := hybridComplete(t, url, prompt)
	stop() // graceful: every block goes to disk with its checkpoint
	if !first.same(cold) || first.cache.Computed != first.prompt {
		t.Fatalf("first run: %v %+v, cold %v", first.tokens, first.cache, cold.tokens)
	}
	s, chain := diskRecords(t, dir)
	if len(chain) < full {
		t.Fatalf("disk holds a chain of %d blocks, want at least %d", len(chain), full)
	}
	for i, r := range chain[:full] {
		if !r.StateComplete || len(r.Aux) != 1 || len(r.Aux[0]) == 0 {
			t.Fatalf("block %d on disk: complete %v, %d state entries", i, r.StateComplete, len(r.Aux))
		}
	}
	orig := make([][]byte, len(chain))
	for i, r := range chain {
		orig[i] = encodeRecord(t, r)
	}
	s.Close()

	type scenario struct {
		name        string
		change      func(i int, r *tier.Record) []byte // nil return: keep the original
		disk        int                                // blocks restored
		discarded   int                                // blocks discarded
		reason      string
		missCause   string
		stateResume bool
	}
	for _, sc := range []scenario{
		{name: "checkpoints intact", disk: full, stateResume: true},
		{name: "K/V without state", change: func(i int, r *tier.Record) []byte {
			r.Aux, r.StateComplete = nil, false
			return encodeRecord(t, r)
		}, disk: 0, discarded: full, reason: engine.ReasonIncompleteState, missCause: "incomplete_state"},
		{name: "last 4 checkpoints lost", change: func(i int, r *tier.Record) []byte {
			if i < full-4 {
				return nil
			}
			r.Aux, r.StateComplete = nil, false
			return encodeRecord(t, r)
		}, disk: full - 4, discarded: 4, reason: engine.ReasonIncompleteState, missCause: "incomplete_state", stateResume: true},
		{name: "a checkpoint's bytes flipped", change: func(i int, r *tier.Record) []byte {
			if i != full-2 {
				return nil
			}
			b := encodeRecord(t, r)
			b[len(b)-40] ^= 0x5a // inside the state, before the trailing checksum
			return b
		}, disk: full - 2, discarded: 2, reason: tier.ReasonChecksum, stateResume: true},
	} {
		t.Run(sc.name, func(t *testing.T) {
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
			before := scrape(t, url)
			got := hybridComplete(t, url, prompt)
			after := scrape(t, url)
			stop()
			if !got.same(cold) {
				t.Errorf("answer %v %v, cache off %v %v", got.tokens, got.logprobs, cold.tokens, cold.logprobs)
			}
			c := got.cache
			if c.Disk != sc.disk*B || c.Discarded != sc.discarded*B || c.Device+c.Host+c.Disk+c.Remote+c.Computed != got.prompt {
				t.Errorf("usage.cache %+v: want %d disk tokens, %d discarded", c, sc.disk*B, sc.discarded*B)
			}
			if sc.stateResume != (c.StateBytes > 0) {
				t.Errorf("state_bytes %d, resumed from a checkpoint: %v", c.StateBytes, sc.stateResume)
			}
			if sc.missCause != "" && (c.Miss == nil || c.Miss.Cause != sc.missCause) {
				t.Errorf("miss %+v, want cause %s", c.Miss, sc.missCause)
			}
			if sc.reason != "" {
				series := `stockpot_kv_blocks_discarded_total{reason="` + sc.reason + `"}`
				if d := after[series] - before[series]; d != float64(sc.discarded) {
					t.Errorf("%s rose by %v, want %d", series, d, sc.discarded)
				}
			}
			if got := after["stockpot_prefix_cache_min_reusable_tokens"]; got != B {
				t.Errorf("min reusable prefix gauge %v, want %d", got, B)
			}
		})
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
		o := serveOptions{model: path, threads: 2, blockSize: B, kvBudget: kv, kvType: kvcache.F32,
			prefixCache: cache, dedup: cache, maxBatch: 48, maxRunning: 8, tiers: to, prefetch: engine.PrefetchWait}
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
	o := serveOptions{model: path, threads: 2, blockSize: B, kvBudget: 16 << 20, kvType: kvcache.F32,
		prefixCache: true, dedup: true, maxBatch: 64, maxRunning: 8, tiers: to, prefetch: engine.PrefetchWait}
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
		_, ts := newTestInstance(t, func(o *serveOptions) { o.model = "synthetic:tiny-qwen35"; o.stateEvery = every })
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
	_, ts := newTestInstance(t, func(o *serveOptions) { o.model = "synthetic:tiny-qwen35"; o.stateEvery = 4 })
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
