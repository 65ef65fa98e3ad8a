package engine_test

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/kvtier"
	"stockpot/internal/model"
	"stockpot/internal/prefix"
	"stockpot/internal/synth"
)

func hybridModel(t *testing.T) *model.Model {
	t.Helper()
	w, err := synth.Build("tiny-qwen35", synth.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f, kernels.NewPool(2))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// hybridEngine serves m (a hybrid model) with an 8 MiB pool; mutate adjusts the config.
func hybridEngine(t *testing.T, m *model.Model, mutate func(*engine.Config)) *engine.Engine {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.Identity = []byte("hybrid")
	cfg.KVMemory = 8 << 20
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := engine.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// greedyDirect runs one sequence through the model alone (whole prompt, then token by token).
func greedyDirect(t *testing.T, m *model.Model, prompt []int32, n int) []int32 {
	t.Helper()
	c := m.Config()
	const bs = 16
	blocks := kvcache.BlocksForTokens(len(prompt)+n, bs)
	a, err := kvcache.NewArena(kvcache.Layout{BlockSize: bs, Layers: c.KVLayers(), KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: kvcache.F32}, blocks)
	if err != nil {
		t.Fatal(err)
	}
	table := make([]int32, blocks)
	for i := range table {
		table[i] = int32(i)
	}
	kv := &kernels.PagedKV{F32: a.F32(), F16: a.F16(), BlockSize: bs, Layers: c.KVLayers(), KVHeads: c.KVHeads, HeadDim: c.HeadDim, Table: table}
	st := m.NewState()
	logits := make([]float32, c.Vocab)
	toks, pos := prompt, 0
	var out []int32
	for len(out) < n {
		if err := m.Forward([]model.Sequence{{Tokens: toks, Pos: pos, KV: kv, Logits: logits, State: st}}); err != nil {
			t.Fatal(err)
		}
		pos += len(toks)
		next := int32(kernels.Argmax(logits))
		out = append(out, next)
		toks = []int32{next}
	}
	return out
}

// TestHybridEngine serves a qwen35 model: several requests batched together, prompts prefilled
// in chunks over several steps, repeats of one prompt. Every greedy output equals the model run
// alone, and the repeats resume from the state checkpoints of their cached blocks: every block
// they could reuse, since a checkpoint is kept at every block's end.
func TestHybridEngine(t *testing.T) {
	m := hybridModel(t)
	cfg := engine.DefaultConfig()
	cfg.Identity = []byte("hybrid")
	cfg.KVMemory = 8 << 20
	cfg.MaxBatchTokens = 23 // prefill chunks that end mid-block, sequences sharing steps
	e, err := engine.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompts := [][]int32{seqPrompt(1, 70), seqPrompt(2, 41), seqPrompt(1, 70), seqPrompt(3, 9)}
	const n = 12
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		want[i] = greedyDirect(t, m, p, n)
	}
	for round := 0; round < 2; round++ {
		got := make([]result, len(prompts))
		var wg sync.WaitGroup
		for i, p := range prompts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i] = collect(t, e, engine.Request{Prompt: p, MaxTokens: n, IgnoreEOS: true})
			}()
		}
		wg.Wait()
		for i, r := range got {
			if !slices.Equal(r.tokens, want[i]) {
				t.Errorf("round %d, prompt %d: engine %v, model alone %v", round, i, r.tokens, want[i])
			}
			u := r.usage
			if u.CachedTokens()+u.ComputedTokens != u.PromptTokens || u.DiscardedTokens != 0 {
				t.Errorf("round %d, prompt %d: usage %+v", round, i, u)
			}
			if full := (len(prompts[i]) - 1) / 16 * 16; round == 1 && u.DeviceTokens != full {
				t.Errorf("round %d, prompt %d: %d device tokens, want %d (every block has a checkpoint)", round, i, u.DeviceTokens, full)
			}
		}
	}
	st := e.Stats()
	if st.MinReusableTokens != 16 || st.StateBytes != m.Config().StateBytes() || st.Checkpoints == 0 || st.CheckpointBudget < st.Checkpoints {
		t.Errorf("stats: min reusable %d, state bytes %d, checkpoints %d of %d", st.MinReusableTokens, st.StateBytes, st.Checkpoints, st.CheckpointBudget)
	}
	if err := e.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// hybridTurns is a conversation-like sequence of requests over shared prefixes: a document,
// the same document with more after it, another prompt sharing its start, the document again,
// and the document followed by its own continuation (so the blocks generated last turn, and
// their checkpoints, are reused).
func hybridTurns(doc []int32, cont []int32) [][]int32 {
	other := append(slices.Clone(doc[:45]), seqPrompt(9, 60)[1:]...)
	return [][]int32{
		doc,
		append(slices.Clone(doc), seqPrompt(5, 37)[1:]...),
		other,
		doc,
		append(slices.Clone(doc), cont...),
	}
}

// TestHybridCacheBitwise: greedy answers (tokens and logprobs, bit for bit) with the prefix
// cache on equal those with it off, for prefill chunks that end mid-block, on a block end, and
// across several checkpoints at once, with a checkpoint every block and every 3 blocks. With
// the cache on, what each request reuses ends at a checkpoint, and what it matched past the
// last one is reported as discarded (incomplete_state) with a miss of that cause.
func TestHybridCacheBitwise(t *testing.T) {
	m := hybridModel(t)
	const B, n = 16, 20 // 20 generated tokens cross a block end
	doc := seqPrompt(4, 107)
	newEngine := func(chunk, every int, cache bool) *engine.Engine {
		cfg := engine.DefaultConfig()
		cfg.Identity = []byte("hybrid")
		cfg.KVMemory = 8 << 20
		cfg.MaxBatchTokens = chunk
		cfg.PrefixCache, cfg.Dedup = cache, cache
		cfg.StateCheckpointBlocks = every
		e, err := engine.New(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		return e
	}
	off := newEngine(64, 1, false)
	first := collect(t, off, engine.Request{Prompt: doc, MaxTokens: n, IgnoreEOS: true, Logprobs: 1})
	turns := hybridTurns(doc, first.tokens)
	want := make([]result, len(turns))
	for i, p := range turns {
		want[i] = collect(t, off, engine.Request{Prompt: p, MaxTokens: n, IgnoreEOS: true, Logprobs: 1})
		if want[i].usage.ComputedTokens != len(p) {
			t.Fatalf("cache off: usage %+v", want[i].usage)
		}
	}
	for _, chunk := range []int{5, 16, 23, 64} {
		for _, every := range []int{1, 3} {
			t.Run(fmt.Sprintf("chunk=%d/every=%d", chunk, every), func(t *testing.T) {
				e := newEngine(chunk, every, true)
				unit := B * every
				for i, p := range turns {
					got := collect(t, e, engine.Request{Prompt: p, MaxTokens: n, IgnoreEOS: true, Logprobs: 1})
					if !slices.Equal(got.tokens, want[i].tokens) || !sameBits(got.logprobs, want[i].logprobs) {
						t.Errorf("turn %d: cache on %v %v\ncache off %v %v", i, got.tokens, got.logprobs, want[i].tokens, want[i].logprobs)
					}
					u := got.usage
					if u.CachedTokens()+u.ComputedTokens != u.PromptTokens || u.DeviceTokens%unit != 0 {
						t.Errorf("turn %d: usage %+v: want device tokens a multiple of %d", i, u, unit)
					}
					if i == 0 && u.DeviceTokens != 0 {
						t.Errorf("turn 0: %d device tokens of an empty pool", u.DeviceTokens)
					}
					// The document's whole blocks are cached (turns 1, 3, 4 begin with it):
					// reuse stops at the last checkpoint at or before them.
					if i == 1 || i == 3 || i == 4 {
						shared := min(len(doc)/B*B, (len(p)-1)/B*B)
						if i == 4 {
							shared = (len(doc) + n - 1) / B * B // turn 0's generated blocks too
							shared = min(shared, (len(p)-1)/B*B)
						}
						if wantDev := shared / unit * unit; u.DeviceTokens < wantDev {
							t.Errorf("turn %d: %d device tokens, want at least %d", i, u.DeviceTokens, wantDev)
						}
					}
					if u.DiscardedTokens != u.DiscardedBy[engine.ReasonIncompleteState] || u.DiscardedTokens >= unit {
						t.Errorf("turn %d: discarded %d (%v): want only incomplete_state, less than one checkpoint unit %d", i, u.DiscardedTokens, u.DiscardedBy, unit)
					}
					if u.DiscardedTokens > 0 && (u.Miss == nil || u.Miss.Cause != "incomplete_state" || u.Miss.Matched != u.CachedTokens()) {
						t.Errorf("turn %d: discarded %d tokens, miss %+v", i, u.DiscardedTokens, u.Miss)
					}
				}
				// Turn 2 shares 45 tokens (2 whole blocks) with the document: with a checkpoint
				// every 3 blocks none of it is resumable, and the 2 blocks are discarded.
				st := e.Stats()
				if every == 3 && st.StateDiscardedBlocks == 0 {
					t.Errorf("every 3 blocks: no block discarded for incomplete state")
				}
				if st.MinReusableTokens != unit {
					t.Errorf("min reusable %d, want %d", st.MinReusableTokens, unit)
				}
				if err := e.CheckInvariants(); err != nil {
					t.Error(err)
				}
			})
		}
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// stateTier is a lower tier for hybrid engine tests: the blocks (K/V and checkpoint) one
// engine evicted or flushed, restored into another; drop removes the checkpoints of chosen
// blocks (K/V written without state), as the seeds' trap does on disk.
type stateTier struct {
	mu     sync.Mutex
	kv     map[prefix.Hash][]byte
	state  map[prefix.Hash][]byte
	hashes []prefix.Hash // in store order
}

func (s *stateTier) store(evs []prefix.Event, kv, state [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, ev := range evs {
		if ev.Kind != prefix.Stored || kv[i] == nil {
			continue
		}
		if _, ok := s.kv[ev.Hash]; !ok {
			s.hashes = append(s.hashes, ev.Hash)
		}
		s.kv[ev.Hash] = slices.Clone(kv[i])
		if state[i] != nil {
			s.state[ev.Hash] = slices.Clone(state[i])
		}
	}
}

func (s *stateTier) Prefetch(root prefix.Hash, hashes []prefix.Hash, tokens []int32, first int, done func(engine.Prefetched)) {
	s.mu.Lock()
	p := engine.Prefetched{First: first, Discarded: map[string]int{}}
	for i := first; i < len(hashes); i++ {
		d, ok := s.kv[hashes[i]]
		if !ok {
			break
		}
		p.Blocks = append(p.Blocks, engine.RestoredBlock{Tier: kvtier.Disk, Data: d, State: s.state[hashes[i]]})
	}
	s.mu.Unlock()
	go done(p)
}

// TestHybridRestoreCheckpoints: blocks with their checkpoints restored into a fresh engine
// (a restart) are reused up to the last restored checkpoint; with the checkpoints dropped
// (K/V only) or damaged, the K/V found is discarded as incomplete_state and the prompt is
// recomputed; and every answer equals the cold one bit for bit.
func TestHybridRestoreCheckpoints(t *testing.T) {
	m := hybridModel(t)
	const B = 16
	newEngine := func(r engine.Restorer, hook func([]prefix.Event, [][]byte, [][]byte)) *engine.Engine {
		return hybridEngine(t, m, func(cfg *engine.Config) {
			cfg.MaxBatchTokens = 37
			cfg.Restorer, cfg.Prefetch = r, engine.PrefetchWait
			cfg.Hooks = blockHooks(hook)
		})
	}
	tr := &stateTier{kv: map[prefix.Hash][]byte{}, state: map[prefix.Hash][]byte{}}
	p := seqPrompt(21, 150)
	req := engine.Request{Prompt: p, MaxTokens: 10, IgnoreEOS: true, Logprobs: 1}
	cold := collect(t, newEngine(nil, tr.store), req)
	full := (len(p) - 1) / B // blocks a warm request can reuse
	if len(tr.kv) < full || len(tr.state) < full {
		t.Fatalf("stored %d blocks, %d checkpoints; want at least %d", len(tr.kv), len(tr.state), full)
	}
	check := func(name string, wantDisk, wantDiscarded int) {
		t.Helper()
		got := collect(t, newEngine(tr, nil), req)
		if !slices.Equal(got.tokens, cold.tokens) || !sameBits(got.logprobs, cold.logprobs) {
			t.Errorf("%s: %v %v, cold %v %v", name, got.tokens, got.logprobs, cold.tokens, cold.logprobs)
		}
		u := got.usage
		if u.DiskTokens != wantDisk*B || u.DiscardedBy[engine.ReasonIncompleteState] != wantDiscarded*B || u.CachedTokens()+u.ComputedTokens != u.PromptTokens {
			t.Errorf("%s: usage %+v, want %d disk and %d discarded tokens", name, u, wantDisk*B, wantDiscarded*B)
		}
	}
	check("intact", full, 0)
	// The checkpoints of the last 3 reusable blocks lost: the prefix ends 3 blocks earlier.
	order := tr.hashes[:full]
	for _, h := range order[full-3:] {
		delete(tr.state, h)
	}
	check("last 3 checkpoints dropped", full-3, 3)
	// A damaged checkpoint (another position) is no checkpoint either.
	tr.state[order[full-4]] = slices.Clone(tr.state[order[0]])
	check("checkpoint of another block", full-4, 4)
	// K/V written without any state: the whole hit is discarded, the prompt recomputed.
	clear(tr.state)
	check("no checkpoints", 0, full)
}

// TestHybridPreemption: with a pool too small for every running request to finish, decodes
// preempt other sequences; a preempted hybrid sequence is readmitted from the deepest
// checkpoint of its cached blocks (its generated blocks' too), not from position 0, and
// every output still equals the model run alone.
func TestHybridPreemption(t *testing.T) {
	m := hybridModel(t)
	cfg := engine.DefaultConfig()
	cfg.Identity = []byte("hybrid")
	cfg.KVMemory = 3300000 // a small pool: 65 blocks of 16 tokens, beside their checkpoints
	cfg.MaxBatchTokens = 48
	e, err := engine.New(m, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	const n = 110
	prompts := [][]int32{seqPrompt(31, 200), seqPrompt(32, 190), seqPrompt(33, 210), seqPrompt(34, 180)}
	got := make([]result, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = collect(t, e, engine.Request{Prompt: p, MaxTokens: n, IgnoreEOS: true})
		}()
	}
	wg.Wait()
	for i, p := range prompts {
		if want := greedyDirect(t, m, p, n); !slices.Equal(got[i].tokens, want) {
			t.Errorf("prompt %d: engine %v\nmodel alone %v", i, got[i].tokens, want)
		}
	}
	if st := e.Stats(); st.Preemptions == 0 {
		t.Errorf("no preemption (pool %d blocks): the test does not test it", st.KVBlocksTotal)
	}
	if err := e.CheckInvariants(); err != nil {
		t.Error(err)
	}
}

// TestHybridHitClassByReuseUnit: a qwen35 prompt reused up to its deepest checkpoint (every 3
// blocks) is warm, though blocks past that checkpoint were computed; the engine's own
// evidence counts it warm too.
func TestHybridHitClassByReuseUnit(t *testing.T) {
	m := hybridModel(t)
	const B, every = 16, 3
	e := hybridEngine(t, m, func(c *engine.Config) { c.StateCheckpointBlocks = every })
	doc := seqPrompt(4, 8*B+5) // 8 full blocks before the last token: 2 units of 3 reusable
	collect(t, e, engine.Request{Prompt: doc, MaxTokens: 1})
	u := collect(t, e, engine.Request{Prompt: doc, MaxTokens: 1}).usage
	if u.DeviceTokens != 6*B || u.ReuseUnitBlocks != every {
		t.Fatalf("repeat: usage %+v: want %d device tokens, reuse unit %d", u, 6*B, every)
	}
	if got := u.HitClass(B); got != engine.HitWarm {
		t.Errorf("repeat: class %v, want warm (reused up to the deepest checkpoint)", got)
	}
	if h := e.Stats().Evidence.Hits; h[engine.HitWarm] != 1 || h[engine.HitPartial] != 0 || h[engine.HitCold] != 1 {
		t.Errorf("evidence hits %v: want one cold, one warm", h)
	}
}
