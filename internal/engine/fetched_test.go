package engine

import "testing"

// A prefetch result that arrives after the runner returned, with the channel full, must not
// leave a goroutine blocked forever on the send: it is dropped once e.done is closed.
func TestSendFetchedAfterRunnerReturns(t *testing.T) {
	e := &Engine{fetched: make(chan prefetchMsg, 1), done: make(chan struct{})}
	e.sendFetched(prefetchMsg{id: 1}) // fills the buffer
	e.sendFetched(prefetchMsg{id: 2}) // buffer full: a goroutine waits to send
	close(e.done)                     // the runner returns without reading
	e.senders.Wait()                  // blocked forever before the fix
	if got := len(e.fetched); got != 1 {
		t.Fatalf("fetched holds %d results, want 1 (the late one is dropped)", got)
	}
	e.sendFetched(prefetchMsg{id: 3}) // after the runner is gone: dropped, no goroutine
	e.senders.Wait()
}

// While the runner is alive a result that found the buffer full is still delivered.
func TestSendFetchedFullBufferDelivers(t *testing.T) {
	e := &Engine{fetched: make(chan prefetchMsg, 1), done: make(chan struct{})}
	e.sendFetched(prefetchMsg{id: 1})
	e.sendFetched(prefetchMsg{id: 2})
	if m := <-e.fetched; m.id != 1 {
		t.Fatalf("first result id %d, want 1", m.id)
	}
	if m := <-e.fetched; m.id != 2 {
		t.Fatalf("second result id %d, want 2", m.id)
	}
	e.senders.Wait()
}
