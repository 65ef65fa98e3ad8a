package engine

// QueuedCancels is how many cancellations wait for the runner (tests pause the runner, cancel
// a burst of requests and wait for all of them to be queued before resuming).
func (e *Engine) QueuedCancels() int { return len(e.cancel) }

// QueuedRequests is how many new requests wait for the runner (tests pause the runner and
// wait for a burst to be queued before resuming).
func (e *Engine) QueuedRequests() int { return len(e.in) }
