package main

import (
	"stockpot/internal/engine"
	"stockpot/internal/kvevents"
)

// replicaLoad reads the replica's load for its event stream's load lines (kvevents.Load):
// what every router in front of it reads in place of its own count of requests in flight.
// Stats is a copy under a short mutex, so the stream handlers may call it at every tick.
func replicaLoad(e *engine.Engine) func() kvevents.Load {
	return func() kvevents.Load {
		st := e.Stats()
		l := kvevents.Load{Running: st.Running, Waiting: st.Waiting, QueuedPrefillTokens: st.QueuedPrefillTokens}
		if st.KVBlocksTotal > 0 {
			l.KVUsage = min(1, float64(st.KVBlocksUsed)/float64(st.KVBlocksTotal)) // stockpot_kv_cache_usage_ratio
		}
		return l
	}
}
