package pipeline

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"sync"
	"testing"

	"stockpot/internal/api"
	"stockpot/internal/grammar"
)

// TestGrammarCacheSameGrammar: the same key gives the very same grammar, built once.
func TestGrammarCacheSameGrammar(t *testing.T) {
	var c grammarCache
	key := grammarKey{kind: "json_schema", spec: "s"}
	builds := 0
	build := func() (*grammar.Grammar, error) { builds++; return grammar.Compile(grammar.JSONObject()) }
	none := func() error { return nil }
	g1, err1 := c.get(context.Background(), GrammarConfig{}, key, none, build)
	g2, err2 := c.get(context.Background(), GrammarConfig{}, key, none, build)
	if err1 != nil || err2 != nil || g1 != g2 || builds != 1 {
		t.Errorf("get twice: %p %p (%v %v), %d builds; want one grammar built once", g1, g2, err1, err2, builds)
	}
}

// TestGrammarSingleFlight: concurrent gets of one key share the leader's compile, which the
// test holds open until every follower is waiting on it.
func TestGrammarSingleFlight(t *testing.T) {
	var c grammarCache
	key := grammarKey{kind: "json_schema", spec: "one"}
	started, release := make(chan struct{}), make(chan struct{})
	builds := 0
	build := func() (*grammar.Grammar, error) {
		builds++
		close(started)
		<-release
		return grammar.Compile(grammar.JSONObject())
	}
	none := func() error { return nil }
	const n = 6
	got := make([]*grammar.Grammar, n)
	var wg sync.WaitGroup
	wg.Go(func() { got[0], _ = c.get(context.Background(), GrammarConfig{}, key, none, build) })
	<-started
	for i := 1; i < n; i++ {
		wg.Go(func() { got[i], _ = c.get(context.Background(), GrammarConfig{}, key, none, build) })
	}
	close(release)
	wg.Wait()
	for i, g := range got {
		if g == nil || g != got[0] {
			t.Fatalf("caller %d got %p, the leader %p", i, g, got[0])
		}
	}
	if builds != 1 {
		t.Errorf("%d builds, want 1", builds)
	}
}

// TestGrammarWaiterLeaves: with every compile slot taken, a request whose context ends
// while it waits gets a 503 and leaves; a full queue answers 429 at once. The slot's
// compile still completes and is kept.
func TestGrammarWaiterLeaves(t *testing.T) {
	var c grammarCache
	cfg := GrammarConfig{Compiles: 1, MaxWaiting: 1}
	started, release := make(chan struct{}), make(chan struct{})
	slow := func() (*grammar.Grammar, error) {
		close(started)
		<-release
		return grammar.Compile(grammar.JSONObject())
	}
	none := func() error { return nil }
	done := make(chan error)
	go func() {
		_, err := c.get(context.Background(), cfg, grammarKey{spec: "slow"}, none, slow)
		done <- err
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fast := func() (*grammar.Grammar, error) { return grammar.Compile(grammar.JSONObject()) }
	_, err := c.get(ctx, cfg, grammarKey{spec: "other"}, none, fast)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Errorf("a waiter whose context ended: %v, want a 503", err)
	}
	// The queue: one waiter fills it, the next is refused with a 429.
	waitCtx, stop := context.WithCancel(context.Background())
	waiting := make(chan error)
	go func() {
		_, err := c.get(waitCtx, cfg, grammarKey{spec: "waiter"}, none, fast)
		waiting <- err
	}()
	for {
		c.mu.Lock()
		w := c.mu.waiting
		c.mu.Unlock()
		if w == 1 {
			break
		}
		select {
		case err := <-waiting:
			t.Fatalf("the waiter returned without waiting: %v", err)
		default:
		}
		runtime.Gosched()
	}
	if _, err := c.get(context.Background(), cfg, grammarKey{spec: "third"}, none, fast); !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests {
		t.Errorf("past MaxWaiting: %v, want a 429", err)
	}
	stop()
	if err := <-waiting; !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Errorf("the waiter that gave up: %v, want a 503", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _, compiles := c.stats(); n != 1 || compiles != 1 {
		t.Errorf("%d kept, %d compiled; want the slow one alone", n, compiles)
	}
}

// TestGrammarCacheEvictsByBytes: the cache holds what fits in CacheBytes, dropping the least
// recently used; a grammar larger than the whole cache is served but not kept.
func TestGrammarCacheEvictsByBytes(t *testing.T) {
	one, err := grammar.Compile(grammar.JSONObject())
	if err != nil {
		t.Fatal(err)
	}
	size := one.Bytes()
	var c grammarCache
	cfg := GrammarConfig{CacheBytes: 2*size + size/2} // two fit, three do not
	none := func() error { return nil }
	get := func(spec string) {
		t.Helper()
		if _, err := c.get(context.Background(), cfg, grammarKey{spec: spec}, none, func() (*grammar.Grammar, error) {
			return grammar.Compile(grammar.JSONObject())
		}); err != nil {
			t.Fatal(err)
		}
	}
	get("a")
	get("b")
	get("a") // a is now the most recent
	get("c") // evicts b
	if n, bytes, compiles := c.stats(); n != 2 || bytes > cfg.CacheBytes || compiles != 3 {
		t.Errorf("%d kept, %d bytes, %d compiles; want 2 within %d, 3 compiles", n, bytes, compiles, cfg.CacheBytes)
	}
	get("a") // still kept
	if _, _, compiles := c.stats(); compiles != 3 {
		t.Errorf("a was evicted (%d compiles)", compiles)
	}
	get("b") // was evicted: compiled again
	if _, _, compiles := c.stats(); compiles != 4 {
		t.Errorf("b was kept (%d compiles)", compiles)
	}
	var tiny grammarCache
	if _, err := tiny.get(context.Background(), GrammarConfig{CacheBytes: 1}, grammarKey{spec: "big"}, none, func() (*grammar.Grammar, error) {
		return grammar.Compile(grammar.JSONObject())
	}); err != nil {
		t.Fatal(err)
	}
	if n, bytes, _ := tiny.stats(); n != 0 || bytes != 0 {
		t.Errorf("a grammar over the whole cache is kept: %d entries, %d bytes", n, bytes)
	}
}
