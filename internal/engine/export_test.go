package engine

import "sync"

// QueuedCancels is how many cancellations wait for the runner (tests pause the runner, cancel
// a burst of requests and wait for all of them to be queued before resuming).
func (e *Engine) QueuedCancels() int { return len(e.cancel) }

// QueuedRequests is how many new requests wait for the runner (tests pause the runner and
// wait for a burst to be queued before resuming).
func (e *Engine) QueuedRequests() int { return len(e.in) }

// PauseWhen makes the runner stop itself after the first scheduling step whose published
// stats satisfy cond (cond runs on the runner goroutine). paused is closed once it has
// stopped; resume lets it go on (and removes the condition). Outputs of that step are
// delivered before it stops. Tests use it to hold a burst of requests in a phase exactly
// when the phase is reached, which polling Stats and then calling Pause cannot do: the
// runner takes any number of steps between the poll and the pause on a busy machine.
//
// Call it while the runner is not paused.
func (e *Engine) PauseWhen(cond func(Stats) bool) (paused <-chan struct{}, resume func()) {
	stopped := make(chan struct{})
	release := make(chan struct{})
	e.do(func() {
		e.afterStep = func() {
			if !cond(e.Stats()) {
				return
			}
			e.afterStep = nil
			close(stopped)
			<-release
		}
	})
	var once sync.Once
	return stopped, func() { once.Do(func() { close(release) }) }
}

// StepGate makes the runner stop after every scheduling step: wait returns once it has
// stopped after one (that step's outputs pushed to their streams), release lets it take the
// next. stop lets it run freely again. Passes of an idle runner are not held. Tests use it to
// measure what single steps cost.
//
// Call it while the runner is idle or not paused.
func (e *Engine) StepGate() (wait, release, stop func()) {
	stepped, next, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	e.do(func() {
		e.afterStep = func() {
			if e.core.Idle() {
				return // the pass of an idle runner (nothing planned): not a step to hold
			}
			select {
			case stepped <- struct{}{}:
			case <-done:
				e.afterStep = nil
				return
			}
			select {
			case <-next:
			case <-done:
				e.afterStep = nil
			}
		}
	})
	wait = func() { <-stepped }
	release = func() {
		select {
		case next <- struct{}{}:
		case <-done:
		}
	}
	var once sync.Once
	return wait, release, func() { once.Do(func() { close(done) }) }
}

// SetStateBatch sets the most checkpoint bytes one PinEvents or BlockEvents hook call carries
// (stateBatchBytes by default). Call it before the first request.
func (e *Engine) SetStateBatch(n int) { e.do(func() { e.stateBatch = n }) }
