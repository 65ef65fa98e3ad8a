package engine

import (
	"time"

	"stockpot/internal/prefix"
)

// Hooks is how a component that plugs in below the engine (offload's tiers) follows the
// runner: Config.Hooks, set once. Every method runs on the runner goroutine, must be quick,
// and must not call back into the engine. The slices, their token slices and the bytes
// passed in are valid only during the call.
//
// A component that wants only some of them embeds NopHooks; one that adds to another's (the
// replica's event publisher above the tiers) embeds that Hooks and calls it on.
type Hooks interface {
	// BlockEvents receives the prefix cache's block events (stored, evicted, removed,
	// cleared, reused), after each scheduling step and before the forward pass writes into
	// any reallocated block. kv[i] is the K/V of evs[i].Block for a Stored, Evicted or Reused
	// event (nil for the others): an Evicted block's bytes are still intact during the call,
	// the copy-out window of the write-back tiers. state[i], for a hybrid model, is the
	// recurrent-state checkpoint at the end of that block (model.State.AppendBinary bytes),
	// nil when the pool holds none for it, and nil for a Stored event tagged Restored
	// (nothing writes a restored block down again).
	BlockEvents(evs []prefix.Event, kv, state [][]byte)
	// PinEvents receives the pin events (created, refreshed, removed) after each step, as
	// BlockEvents does: kv[i] is the K/V of evs[i].Block for a PinCreated event (nil for the
	// others).
	PinEvents(evs []PinEvent, kv [][]byte)
	// Discarded receives blocks the engine itself found but could not use, by reason (a
	// hybrid model's hits past the last checkpoint: incomplete_state;
	// stockpot_kv_blocks_discarded_total; the Restorer counts its own).
	Discarded(reason string, blocks int)
	// ForwardStep receives each forward step's token count, the positions those tokens
	// attend over (Σ of each token's position: the part of the work that grows with
	// context), and the step's duration (the runner's measured prefill rate feeds the
	// restore-vs-recompute cost model).
	ForwardStep(tokens int, attended int64, d time.Duration)
	// RestoreStall receives the time an admission was held back waiting for its prefetch
	// (stockpot_kv_restore_stall_seconds_total).
	RestoreStall(d time.Duration)
}

// BlockDataHooks is a Hooks that reads the bytes of only some block events. The engine
// takes an event's K/V view and encodes its checkpoint (a hybrid model's recurrent state,
// some 230 KB a block on small-kimi-linear, every block of every prompt) only for the events
// WantsBlockData accepts; the others reach BlockEvents with nil kv and state. A Hooks that is
// not one gets every event's bytes.
type BlockDataHooks interface {
	WantsBlockData(ev prefix.Event) bool
}

// NopHooks does nothing: embedded, it leaves a Hooks only the methods it wants.
type NopHooks struct{}

func (NopHooks) BlockEvents([]prefix.Event, [][]byte, [][]byte) {}
func (NopHooks) PinEvents([]PinEvent, [][]byte)                 {}
func (NopHooks) Discarded(string, int)                          {}
func (NopHooks) ForwardStep(int, int64, time.Duration)          {}
func (NopHooks) RestoreStall(time.Duration)                     {}
