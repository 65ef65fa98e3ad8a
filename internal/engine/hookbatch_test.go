package engine_test

import (
	"bytes"
	"slices"
	"sync"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/prefix"
)

// hookLog records what the engine's block and pin hooks were given, call by call.
type hookLog struct {
	mu         sync.Mutex
	blockCalls []int // checkpoints carried by each BlockEvents call
	pinCalls   []int // checkpoints carried by each PinEvents call
	stored     map[prefix.Hash][]byte
	pinned     []prefix.Hash
	pinState   map[prefix.Hash][]byte
}

func (l *hookLog) blocks(evs []prefix.Event, kv, state [][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i, ev := range evs {
		if state[i] != nil {
			n++
			if ev.Kind == prefix.Stored {
				l.stored[ev.Hash] = slices.Clone(state[i])
			}
		}
	}
	l.blockCalls = append(l.blockCalls, n)
}

func (l *hookLog) pins(evs []engine.PinEvent, kv [][]byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i, ev := range evs {
		if ev.Kind != engine.PinCreated {
			continue
		}
		if kv[i] == nil {
			panic("a created pin without its K/V")
		}
		l.pinned = append(l.pinned, ev.Hash)
		if ev.State != nil {
			n++
			l.pinState[ev.Hash] = slices.Clone(ev.State)
		}
	}
	l.pinCalls = append(l.pinCalls, n)
}

// TestHybridHookBatches: the checkpoints the block and pin hooks carry are encoded into one
// reused buffer, valid during the call, so a long prefix is handed over in calls of a bounded
// size rather than all at once (at 480K tokens of small-kimi-k3 that would be 1.9 GiB in one
// buffer, doubling as it grows). With the bound lowered to 3 checkpoints, a pinned prompt of
// 15 blocks (one step, a checkpoint each) reaches both hooks in calls of at most 3
// checkpoints, and every block's checkpoint is there, byte for byte what an engine with the
// default bound (one call) hands over.
func TestHybridHookBatches(t *testing.T) {
	m := hybridModel(t)
	sb := m.Config().StateEncodedBytes()
	run := func(batch int) *hookLog {
		l := &hookLog{stored: map[prefix.Hash][]byte{}, pinState: map[prefix.Hash][]byte{}}
		e := hybridEngine(t, m, func(cfg *engine.Config) {
			cfg.MaxBatchTokens = 512 // the whole prompt in one step
			cfg.Hooks = funcHooks{blocks: l.blocks, pins: l.pins}
		})
		defer e.Close() // no hook call after run returns its log
		if batch > 0 {
			e.SetStateBatch(batch)
		}
		p := seqPrompt(31, 15*16+5)
		collect(t, e, engine.Request{Prompt: p, MaxTokens: 1, Pins: []engine.PinSpec{{Tokens: len(p), TTL: time.Hour}}})
		return l
	}
	want := run(0)
	got := run(3 * sb)
	if len(want.pinned) != 15 || len(want.pinState) != 15 || len(want.stored) < 15 {
		t.Fatalf("default bound: %d blocks pinned, %d with checkpoints, %d stored; want 15", len(want.pinned), len(want.pinState), len(want.stored))
	}
	if !slices.Equal(got.pinned, want.pinned) {
		t.Fatalf("pinned %d blocks in another order or set than the default bound's %d", len(got.pinned), len(want.pinned))
	}
	for h, st := range want.pinState {
		if len(st) != sb {
			t.Fatalf("a pinned checkpoint of %d bytes, want %d", len(st), sb)
		}
		if !bytes.Equal(got.pinState[h], st) || !bytes.Equal(got.stored[h], want.stored[h]) || !bytes.Equal(st, want.stored[h]) {
			t.Fatalf("block %x: its checkpoint differs between the bounds or between the hooks", h[:4])
		}
	}
	for name, calls := range map[string][]int{"PinEvents": got.pinCalls, "BlockEvents": got.blockCalls} {
		if slices.Max(calls) > 3 {
			t.Errorf("%s calls carried %v checkpoints; want at most 3 each", name, calls)
		}
	}
	if len(got.pinCalls) < 5 || slices.Max(want.pinCalls) != 15 {
		t.Errorf("pin calls: %v with the bound of 3, %v with the default; want 5 or more, and one of 15", got.pinCalls, want.pinCalls)
	}
}

// TestRestoredBlocksTagged: the Stored events of blocks an admission restored from a tier carry
// Restored (write-through skips them); the blocks the request computes do not.
func TestRestoredBlocksTagged(t *testing.T) {
	m := hybridModel(t)
	const B = 16
	tr := &stateTier{kv: map[prefix.Hash][]byte{}, state: map[prefix.Hash][]byte{}}
	var mu sync.Mutex
	var restored, computed int
	tag := func(evs []prefix.Event, kv, state [][]byte) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			if ev.Kind != prefix.Stored {
				continue
			}
			if ev.Restored {
				restored++
			} else {
				computed++
			}
		}
	}
	newEngine := func(r engine.Restorer, hook func([]prefix.Event, [][]byte, [][]byte)) *engine.Engine {
		return hybridEngine(t, m, func(cfg *engine.Config) {
			cfg.Restorer, cfg.Prefetch = r, engine.PrefetchWait
			cfg.Hooks = blockHooks(hook)
		})
	}
	p := seqPrompt(41, 150)
	req := engine.Request{Prompt: p, MaxTokens: 20, IgnoreEOS: true}
	collect(t, newEngine(nil, tr.store), req)
	got := collect(t, newEngine(tr, tag), req)
	full := (len(p) - 1) / B // restorable blocks: 9
	if got.usage.DiskTokens != full*B {
		t.Fatalf("restored %d tokens, want %d", got.usage.DiskTokens, full*B)
	}
	mu.Lock()
	defer mu.Unlock()
	// The computed blocks: the prompt's tail and the output, (150+20-1)/16 - 9 = 1.
	if restored != full || computed != (len(p)+20-1)/B-full {
		t.Errorf("%d Stored events tagged Restored, %d not; want %d and %d", restored, computed, full, (len(p)+20-1)/B-full)
	}
}
