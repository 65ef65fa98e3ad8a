package engine_test

import (
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/prefix"
)

// wantingHooks is funcHooks that reads the bytes of the events want accepts.
type wantingHooks struct {
	funcHooks
	want func(prefix.Event) bool
}

func (h wantingHooks) WantsBlockData(ev prefix.Event) bool { return h.want(ev) }

// TestBlockDataHooks: a hook that is an engine.BlockDataHooks gets the K/V and the hybrid
// checkpoint of only the events it wants (the others nil, their checkpoints never encoded),
// and every event all the same; a plain Hooks gets every stored block's bytes.
func TestBlockDataHooks(t *testing.T) {
	m := hybridModel(t)
	prompt := seqPrompt(31, 70) // 4 full blocks of 16
	type seen struct{ stored, withKV, withState int }
	run := func(want func(prefix.Event) bool) seen {
		var s seen
		f := func(evs []prefix.Event, kv, state [][]byte) {
			for i, ev := range evs {
				if ev.Kind != prefix.Stored {
					continue
				}
				s.stored++
				if kv[i] != nil {
					s.withKV++
				}
				if state[i] != nil {
					s.withState++
				}
			}
		}
		var hooks engine.Hooks = funcHooks{blocks: f}
		if want != nil {
			hooks = wantingHooks{funcHooks{blocks: f}, want}
		}
		e := engineFor(t, m, func(c *engine.Config) { c.Hooks = hooks })
		collect(t, e, engine.Request{Prompt: prompt, MaxTokens: 2})
		return s
	}
	if s := run(nil); s.stored != 4 || s.withKV != 4 || s.withState != 4 {
		t.Errorf("a plain Hooks: %+v, want 4 stored blocks, each with its K/V and checkpoint", s)
	}
	if s := run(func(prefix.Event) bool { return false }); s.stored != 4 || s.withKV != 0 || s.withState != 0 {
		t.Errorf("wanting nothing: %+v, want 4 stored blocks and no bytes", s)
	}
	if s := run(func(ev prefix.Event) bool { return ev.Depth == 1 }); s.stored != 4 || s.withKV != 1 || s.withState != 1 {
		t.Errorf("wanting the second block: %+v, want its bytes only", s)
	}
}
