package engine_test

import (
	"stockpot/internal/engine"
	"stockpot/internal/prefix"
)

// funcHooks adapts a test's closures to engine.Hooks; a nil one does nothing.
type funcHooks struct {
	engine.NopHooks
	blocks func(evs []prefix.Event, kv, state [][]byte)
	pins   func(evs []engine.PinEvent, kv [][]byte)
}

func (h funcHooks) BlockEvents(evs []prefix.Event, kv, state [][]byte) {
	if h.blocks != nil {
		h.blocks(evs, kv, state)
	}
}

func (h funcHooks) PinEvents(evs []engine.PinEvent, kv [][]byte) {
	if h.pins != nil {
		h.pins(evs, kv)
	}
}

// blockHooks is Config.Hooks for a test that follows only the block events: nil for a nil
// f, so that the engine queues no events a hook would not read.
func blockHooks(f func(evs []prefix.Event, kv, state [][]byte)) engine.Hooks {
	if f == nil {
		return nil
	}
	return funcHooks{blocks: f}
}
