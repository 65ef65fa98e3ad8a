package main

import (
	"stockpot/internal/engine"
	"stockpot/internal/kvevents"
)

// engineLoad is the replica's load for its event stream's load lines (kvevents.Load): what
// every router in front of it reads in place of its own count of requests in flight. Stats is
// a copy under a short mutex, so the stream handlers may read it at every tick; LoadChanged
// (kvevents.LoadNotifier) wakes them the step a request is queued, admitted or finishes, so a
// router sees a finished request gone before the client's next turn reaches it, as a rule.
type engineLoad struct{ e *engine.Engine }

// replicaLoad is the LoadSource serve registers with its publisher.
func replicaLoad(e *engine.Engine) kvevents.LoadSource { return engineLoad{e} }

func (l engineLoad) Load() kvevents.Load {
	st := l.e.Stats()
	out := kvevents.Load{Running: st.Running, Waiting: st.Waiting, QueuedPrefillTokens: st.QueuedPrefillTokens}
	if st.KVBlocksTotal > 0 {
		out.KVUsage = min(1, float64(st.KVBlocksUsed)/float64(st.KVBlocksTotal)) // stockpot_kv_cache_usage_ratio
	}
	return out
}

func (l engineLoad) LoadChanged() <-chan struct{} { return l.e.LoadChanged() }

var _ kvevents.LoadNotifier = engineLoad{}
