package engine_test

import (
	"slices"
	"sync"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/model"
	"stockpot/internal/prefix"
)

// FuzzRestoredState feeds arbitrary bytes as the recurrent-state checkpoint a tier returns for
// a hybrid prompt's last reusable block (its K/V intact, the block before it whole). The
// engine never panics and its usage adds up; bytes that are not a checkpoint of this model at
// that block's end (DecodeState and the position decide) are no checkpoint: the prompt
// resumes from the block before, the block is discarded as incomplete_state, and the answer
// is the cold one, bit for bit. (Well-formed bytes at the right position are a checkpoint:
// their integrity is the record's checksum and identity, upstream of this.)
func FuzzRestoredState(f *testing.F) {
	const B = 16
	var once sync.Once
	var cold result
	var m *model.Model
	var warm *engine.Engine
	tr := &stateTier{kv: map[prefix.Hash][]byte{}, state: map[prefix.Hash][]byte{}}
	req := engine.Request{Prompt: seqPrompt(50, 40), MaxTokens: 3, IgnoreEOS: true, Logprobs: 1} // 2 reusable blocks
	setup := func(t *testing.T) {
		m = hybridModel(t)
		mk := func(r engine.Restorer, hook func([]prefix.Event, [][]byte, [][]byte)) *engine.Engine {
			cfg := engine.DefaultConfig()
			cfg.Identity = []byte("hybrid")
			cfg.KVMemory = 8 << 20
			cfg.Restorer, cfg.Prefetch, cfg.Hooks = r, engine.PrefetchWait, blockHooks(hook)
			e, err := engine.New(m, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		a := mk(nil, tr.store)
		cold = collect(t, a, req)
		a.Close()
		warm = mk(tr, nil) // the fuzz target's fixture, for the whole process
	}
	f.Add([]byte(nil))
	f.Add([]byte("SPST"))
	f.Add([]byte("SPST\x20\x00\x00\x00\x00\x00\x00\x00"))
	f.Add(slices.Repeat([]byte{0xff}, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		once.Do(func() { setup(t) })
		if len(tr.hashes) < 2 || tr.state[tr.hashes[0]] == nil {
			t.Fatal("the cold run stored too little")
		}
		last := tr.hashes[1]
		tr.mu.Lock()
		saved := tr.state[last]
		tr.state[last] = b
		tr.mu.Unlock()
		defer func() { tr.mu.Lock(); tr.state[last] = saved; tr.mu.Unlock() }()
		warm.DropCache("", true)
		got := collect(t, warm, req)
		u := got.usage
		if u.CachedTokens()+u.ComputedTokens != u.PromptTokens {
			t.Fatalf("state %x: usage %+v does not add up", b, u)
		}
		if st, err := m.DecodeState(b); err == nil && st.Pos == 2*B {
			return // a checkpoint
		}
		if !slices.Equal(got.tokens, cold.tokens) || !sameBits(got.logprobs, cold.logprobs) {
			t.Fatalf("state %x: answer %v %v, cold %v %v", b, got.tokens, got.logprobs, cold.tokens, cold.logprobs)
		}
		if u.DiskTokens != B || u.DiscardedBy[engine.ReasonIncompleteState] != B {
			t.Fatalf("state %x: usage %+v: want block 0 restored, block 1 discarded", b, u)
		}
	})
}
