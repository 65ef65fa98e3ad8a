package engine

// QueuedCancels is how many cancellations wait for the runner (tests pause the runner, cancel
// a burst of requests and wait for all of them to be queued before resuming).
func (e *Engine) QueuedCancels() int { return len(e.cancel) }
