package engine

import "stockpot/internal/model"

// Hybrid models (model.Config.Hybrid: Gated DeltaNet layers beside attention) carry, besides
// their K/V blocks, a recurrent state per sequence that the model advances token by token. The
// engine keeps one per running request here, keyed by the core's sequence id.
//
// The state at a block boundary is not part of the block, so a cached prefix cannot be resumed:
// for hybrid models the engine turns prefix reuse, in-flight dedup and tier restores off
// (hybridConfig), every prompt is computed from position 0 (Usage counts all of it as
// computed), and a plan item at position 0 starts from a zero state. A preempted request is
// recomputed from position 0 on readmission, so its state is reset then.

// seqStates holds the recurrent states of a hybrid model's sequences; nil for other models.
type seqStates struct {
	m    *model.Model
	by   map[uint64]*model.State
	free []*model.State
}

func newSeqStates(m *model.Model) *seqStates {
	if !m.Config().Hybrid() {
		return nil
	}
	return &seqStates{m: m, by: map[uint64]*model.State{}}
}

// get returns the state for a plan item, fresh when the item starts at position 0. The model
// refuses an item whose position is not where its state stands.
func (s *seqStates) get(it PlanItem) *model.State {
	if s == nil {
		return nil
	}
	st := s.by[it.Seq]
	if st == nil {
		if n := len(s.free); n > 0 {
			st, s.free = s.free[n-1], s.free[:n-1]
		} else {
			st = s.m.NewState()
		}
		s.by[it.Seq] = st
	}
	if it.Pos == 0 {
		st.Reset()
	}
	return st
}

// release drops a finished sequence's state (kept for reuse).
func (s *seqStates) release(seq uint64) {
	if s == nil {
		return
	}
	if st := s.by[seq]; st != nil {
		delete(s.by, seq)
		s.free = append(s.free, st)
	}
}

// hybridConfig turns off what would resume a hybrid model's sequence from cached blocks
// without its recurrent state.
func hybridConfig(mc model.Config, cfg Config) Config {
	if !mc.Hybrid() {
		return cfg
	}
	if cfg.PrefixCache || cfg.Dedup {
		cfg.Logger.Warn("hybrid model: prefix reuse off (recurrent state is not checkpointed at block boundaries); every prompt is recomputed",
			"arch", mc.Arch, "deltanet_layers", mc.DeltaLayers(), "attention_layers", mc.KVLayers())
	}
	cfg.PrefixCache, cfg.Dedup = false, false
	return cfg
}
