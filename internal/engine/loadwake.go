package engine

// LoadChanged returns a channel closed at the next change of the engine's running or waiting
// count (a request queued, admitted, preempted or finished): the replica's event stream sends
// its load to the routers at once (kvevents.LoadNotifier) instead of at its next poll. Nothing
// is allocated while nobody waits.
func (e *Engine) LoadChanged() <-chan struct{} {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	if e.loadWake == nil {
		e.loadWake = make(chan struct{})
	}
	return e.loadWake
}

// wakeLoadLocked closes the LoadChanged channel when st's running or waiting count differs
// from the last published; statsMu is held.
func (e *Engine) wakeLoadLocked(st *Stats) {
	if e.loadWake != nil && (st.Running != e.stats.Running || st.Waiting != e.stats.Waiting) {
		close(e.loadWake)
		e.loadWake = nil
	}
}
