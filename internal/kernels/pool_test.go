package kernels

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolForCoversRange checks that For runs every index exactly once, for
// sizes around the chunking's edges and several thread counts, with the pool
// used back to back (workers catch jobs while spinning) and after idling
// past spinFor (workers park and are woken).
func TestPoolForCoversRange(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		p := NewPool(threads)
		for _, idle := range []bool{false, true} {
			for _, n := range []int{1, 2, 3, 7, 8, 9, 16, 17, 100, 1000} {
				if idle {
					time.Sleep(2 * spinFor)
				}
				hits := make([]atomic.Int32, n)
				p.For(n, func(lo, hi int) {
					if lo < 0 || hi > n || lo >= hi {
						t.Errorf("threads %d n %d: range [%d, %d)", threads, n, lo, hi)
						return
					}
					for i := lo; i < hi; i++ {
						hits[i].Add(1)
					}
				})
				for i := range hits {
					if h := hits[i].Load(); h != 1 {
						t.Fatalf("threads %d n %d idle %v: index %d ran %d times", threads, n, idle, i, h)
					}
				}
			}
		}
		p.Close()
	}
}

// TestPoolForWorkerIndex checks that forWorker passes each running worker a
// distinct index in [0, Threads()) (per-worker scratch relies on it).
func TestPoolForWorkerIndex(t *testing.T) {
	p := NewPool(4)
	defer p.Close()
	for range 200 {
		var busy [4]atomic.Int32
		p.forWorker(64, func(w, lo, hi int) {
			if w < 0 || w >= 4 {
				t.Errorf("worker index %d", w)
				return
			}
			if busy[w].Add(1) != 1 {
				t.Errorf("worker %d runs two chunks at once", w)
			}
			for i := 0; i < 1000; i++ {
				spinPause()
			}
			busy[w].Add(-1)
		})
	}
}

// TestPoolConcurrentCallers checks that For calls from several goroutines
// are serialized and each sees its own job.
func TestPoolConcurrentCallers(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range 300 {
				n := 1 + (g*7+it)%50
				var sum atomic.Int64
				p.For(n, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						sum.Add(int64(i))
					}
				})
				if want := int64(n * (n - 1) / 2); sum.Load() != want {
					t.Errorf("goroutine %d n %d: sum %d, want %d", g, n, sum.Load(), want)
					return
				}
				if it%50 == 0 {
					time.Sleep(2 * spinFor)
				}
			}
		}()
	}
	wg.Wait()
}

// TestPoolStatsCount checks the hand-off counters.
func TestPoolStatsCount(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	s0 := p.Stats()
	p.For(1, func(lo, hi int) {})
	p.For(10, func(lo, hi int) {})
	s := p.Stats()
	if s.Inline-s0.Inline != 1 || s.Loops-s0.Loops != 1 {
		t.Fatalf("stats %+v after %+v: want one inline and one parallel loop", s, s0)
	}
	var nilPool *Pool
	if (nilPool.Stats() != PoolStats{}) {
		t.Fatal("nil pool has stats")
	}
}

func TestPoolCloseWithParkedWorkers(t *testing.T) {
	p := NewPool(4)
	p.For(100, func(lo, hi int) {})
	time.Sleep(3 * spinFor)
	p.Close()
	p.Close() // idempotent
}
