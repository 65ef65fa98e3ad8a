package kernels

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPoolForCoversRange checks that For runs every index exactly once, for
// sizes around the chunking's edges and several thread counts, with the pool
// used back to back (workers catch jobs while spinning) and after idling
// past spinMax (workers park and are woken).
func TestPoolForCoversRange(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 5} {
		p := NewPool(threads)
		for _, idle := range []bool{false, true} {
			for _, n := range []int{1, 2, 3, 7, 8, 9, 16, 17, 100, 1000} {
				if idle {
					time.Sleep(2 * spinMax)
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
					time.Sleep(2 * spinMax)
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
	time.Sleep(3 * spinMax)
	p.Close()
	p.Close() // idempotent
}

// TestSpinPolicy checks how a waiter's spin budget follows its waits: the
// short budget until most waits end within spinMax, the long one while they
// do, back to the short one when a share of them run long (a loaded machine),
// and the long one again when they end soon after parking (a machine that
// quieted down: the short budget must not lock itself in).
func TestSpinPolicy(t *testing.T) {
	var s spinPolicy
	if s.budget() != spinMin {
		t.Fatalf("new policy spins %v, want %v", s.budget(), spinMin)
	}
	steps := []struct {
		waits []time.Duration // one round of waits, repeated
		want  time.Duration
	}{
		{[]time.Duration{0, 3 * time.Microsecond, 20 * time.Microsecond}, spinMax},
		// one wait in two is long: a peer descheduled by other processes
		{[]time.Duration{0, 2 * time.Millisecond}, spinMin},
		// parked (budget spinMin) but the hand-off came 10 µs later
		{[]time.Duration{10 * time.Microsecond}, spinMax},
		// one long wait in ten (an idle pool between requests) keeps the long budget
		{[]time.Duration{0, 0, 0, 0, 0, 0, 0, 0, 0, time.Second}, spinMax},
		// one in three does not
		{[]time.Duration{0, 0, spinMax + time.Microsecond}, spinMin},
	}
	for i, st := range steps {
		for range 40 {
			for _, d := range st.waits {
				s.note(d)
			}
		}
		if got := s.budget(); got != st.want {
			t.Fatalf("step %d (waits %v): budget %v, want %v (short %d/1024)", i, st.waits, got, st.want, s.short)
		}
	}
}

// TestOversubscribed checks the load signal: the pool's own threads busy
// on all cores is not load; more runnable threads than cores is.
func TestOversubscribed(t *testing.T) {
	for _, c := range []struct {
		runnable16, cpus int
		want             bool
	}{
		{16 * 2, 2, false},
		{16*2 + 8, 2, false},
		{16*2 + 9, 2, true},
		{16 * 8, 2, true},
		{16 * 17, 16, true},
		{16 * 12, 16, false},
	} {
		if got := oversubscribed(c.runnable16, c.cpus); got != c.want {
			t.Errorf("oversubscribed(%d/16, %d cpus) = %v, want %v", c.runnable16, c.cpus, got, c.want)
		}
	}
}

// TestParseRunnable reads /proc/loadavg lines, and refuses what is not one.
func TestParseRunnable(t *testing.T) {
	for _, c := range []struct {
		line string
		n    int
		ok   bool
	}{
		{"0.53 1.41 2.30 3/345 12345\n", 3, true},
		{"12.00 8.00 4.00 17/1200 99", 17, true},
		{"0.00 0.00 0.00 1/1 1", 1, true},
		{"0.53 1.41 2.30 /345 12345", 0, false},
		{"0.53 1.41 2.30 3", 0, false},
		{"0.53 1.41", 0, false},
		{"", 0, false},
		{"0.53 1.41 2.30 99999999999/3 1", 0, false},
	} {
		n, ok := parseRunnable([]byte(c.line))
		if n != c.n || ok != c.ok {
			t.Errorf("parseRunnable(%q) = %d, %v; want %d, %v", c.line, n, ok, c.n, c.ok)
		}
	}
	if _, err := os.Stat("/proc/loadavg"); err == nil {
		n, ok := runnableThreads()
		if !ok || n < 1 {
			t.Fatalf("runnableThreads() = %d, %v on a machine with /proc/loadavg (this test runs, so at least 1)", n, ok)
		}
	}
}

// FuzzParseRunnable: any bytes, no panic, and a count only when a "/" ends it.
func FuzzParseRunnable(f *testing.F) {
	f.Add([]byte("0.53 1.41 2.30 3/345 12345\n"))
	f.Add([]byte("   /"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, ok := parseRunnable(b); ok && (n < 0 || !strings.Contains(string(b), "/")) {
			t.Fatalf("parseRunnable(%q) = %d, true", b, n)
		}
	})
}
