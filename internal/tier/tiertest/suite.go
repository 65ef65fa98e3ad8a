package tiertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// Run runs the conformance suite against stores made by newStore. Each
// subtest gets a fresh store; a store that is an io.Closer is closed at the
// end of its subtest (newStore may also register its own cleanup).
func Run(t *testing.T, newStore func(t *testing.T) tier.Store) {
	RunOptions(t, newStore, Options{})
}

// Options adapt the suite to a kind of store.
type Options struct {
	// SharedStats: the store is shared with others and evicts on its own
	// (Redis), so its Stats report only hits and misses; Items and
	// UsedBytes are not checked.
	SharedStats bool
	// Pins makes stores for the tier.Pinner cases; it must be set for a store that is a
	// Pinner (the suite fails otherwise).
	Pins PinStore
	// ServerClock: pins expire on the server's own clock (Redis); the test clock drives only
	// the store's own view of them (Pins, Stats).
	ServerClock bool
}

// RunOptions is Run with options.
func RunOptions(t *testing.T, newStore func(t *testing.T) tier.Store, opts Options) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s tier.Store, opts Options)
	}{
		{"PutGet", testPutGet},
		{"EmptyBatches", testEmptyBatches},
		{"Contains", testContains},
		{"Delete", testDelete},
		{"Overwrite", testOverwrite},
		{"Namespaces", testNamespaces},
		{"Stats", testStats},
		{"CallerBuffers", testCallerBuffers},
		{"CanceledContext", testCanceledContext},
		{"Concurrent", testConcurrent},
		{"Shadowed", testShadowed},
		{"Lister", testLister},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			closeAtEnd(t, s)
			tt.fn(t, s, opts)
		})
	}
	t.Run("Pins", func(t *testing.T) {
		s := newStore(t)
		closeAtEnd(t, s)
		_, pinner := s.(tier.Pinner)
		switch {
		case pinner && opts.Pins == nil:
			t.Fatalf("%T is a tier.Pinner: set Options.Pins to run its cases", s)
		case opts.Pins != nil:
			runPins(t, opts.Pins, opts)
		}
	})
}

func closeAtEnd(t *testing.T, s tier.Store) {
	if c, ok := s.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
}

var (
	identityA = [32]byte{0xa}
	rootA     = prefix.Root(identityA[:], "")
	rootSalt  = prefix.Root(identityA[:], "tenant-2")
)

func mustPut(t *testing.T, s tier.Store, items []tier.Item) {
	t.Helper()
	if err := s.Put(context.Background(), items); err != nil {
		t.Fatalf("Put(%d items): %v", len(items), err)
	}
}

func mustGet(t *testing.T, s tier.Store, keys []tier.Key) [][]byte {
	t.Helper()
	vals, err := s.Get(context.Background(), keys)
	if err != nil {
		t.Fatalf("Get(%d keys): %v", len(keys), err)
	}
	if len(vals) != len(keys) {
		t.Fatalf("Get(%d keys) returned %d values", len(keys), len(vals))
	}
	return vals
}

func mustContains(t *testing.T, s tier.Store, keys []tier.Key) []bool {
	t.Helper()
	has, err := s.Contains(context.Background(), keys)
	if err != nil {
		t.Fatalf("Contains(%d keys): %v", len(keys), err)
	}
	if len(has) != len(keys) {
		t.Fatalf("Contains(%d keys) returned %d answers", len(keys), len(has))
	}
	return has
}

// checkValues checks that vals[i] equals want[i] (nil = miss) and decodes.
func checkValues(t *testing.T, vals [][]byte, want [][]byte) {
	t.Helper()
	for i := range want {
		switch {
		case want[i] == nil && vals[i] != nil:
			t.Fatalf("key %d: got %d bytes, want a miss", i, len(vals[i]))
		case want[i] != nil && !bytes.Equal(vals[i], want[i]):
			t.Fatalf("key %d: got %d bytes, want the %d bytes put", i, len(vals[i]), len(want[i]))
		case want[i] != nil:
			if _, err := tier.Decode(vals[i]); err != nil {
				t.Fatalf("key %d: stored value does not decode: %v", i, err)
			}
		}
	}
}

func testPutGet(t *testing.T, s tier.Store, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 8, 1)
	items := Items(recs)
	mustPut(t, s, items[:5])
	vals := mustGet(t, s, Keys(recs))
	want := make([][]byte, len(recs))
	for i := range 5 {
		want[i] = items[i].Value
	}
	checkValues(t, vals, want)
	// Order follows the keys, duplicates included.
	keys := []tier.Key{recs[3].Key(), recs[7].Key(), recs[0].Key(), recs[3].Key()}
	checkValues(t, mustGet(t, s, keys), [][]byte{items[3].Value, nil, items[0].Value, items[3].Value})
}

func testEmptyBatches(t *testing.T, s tier.Store, opts Options) {
	ctx := context.Background()
	if vals, err := s.Get(ctx, nil); err != nil || len(vals) != 0 {
		t.Fatalf("Get(nil) = %d values, %v", len(vals), err)
	}
	if has, err := s.Contains(ctx, nil); err != nil || len(has) != 0 {
		t.Fatalf("Contains(nil) = %v, %v", has, err)
	}
	if err := s.Put(ctx, nil); err != nil {
		t.Fatalf("Put(nil): %v", err)
	}
	if err := s.Delete(ctx, nil); err != nil {
		t.Fatalf("Delete(nil): %v", err)
	}
}

func testContains(t *testing.T, s tier.Store, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 6, 2)
	mustPut(t, s, Items(recs[:3]))
	has := mustContains(t, s, Keys(recs))
	for i, h := range has {
		if h != (i < 3) {
			t.Fatalf("Contains[%d] = %v, want %v", i, h, i < 3)
		}
	}
}

func testDelete(t *testing.T, s tier.Store, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 4, 3)
	items := Items(recs)
	mustPut(t, s, items)
	if err := s.Delete(context.Background(), []tier.Key{recs[1].Key(), recs[3].Key(), Chain(identityA, rootA, SmallLayout, 1, 99)[0].Key()}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	checkValues(t, mustGet(t, s, Keys(recs)), [][]byte{items[0].Value, nil, items[2].Value, nil})
	if st := s.Stats(); !opts.SharedStats && st.Items != 2 {
		t.Fatalf("Stats().Items = %d after deleting 2 of 4, want 2", st.Items)
	}
}

func testOverwrite(t *testing.T, s tier.Store, opts Options) {
	r := Chain(identityA, rootA, SmallLayout, 1, 4)[0]
	mustPut(t, s, []tier.Item{{Key: r.Key(), Value: Encode(r)}})
	used := s.Stats().UsedBytes
	r2 := *r
	r2.KV = bytes.Repeat([]byte{0x5a}, len(r.KV))
	v2 := Encode(&r2)
	mustPut(t, s, []tier.Item{{Key: r.Key(), Value: v2}})
	checkValues(t, mustGet(t, s, []tier.Key{r.Key()}), [][]byte{v2})
	st := s.Stats()
	if opts.SharedStats {
		return
	}
	if st.Items != 1 {
		t.Fatalf("Stats().Items = %d after overwriting one key, want 1", st.Items)
	}
	if st.UsedBytes != used {
		t.Fatalf("Stats().UsedBytes = %d after overwriting with a same-size value, want %d", st.UsedBytes, used)
	}
}

// A block hash under another root (another model, or another tenant's salt)
// is another key.
func testNamespaces(t *testing.T, s tier.Store, opts Options) {
	r := Chain(identityA, rootA, SmallLayout, 1, 5)[0]
	mustPut(t, s, Items([]*tier.Record{r}))
	salted := tier.Key{Root: rootSalt, Hash: r.Hash}
	other := tier.Key{Root: prefix.Root([]byte("another model"), ""), Hash: r.Hash}
	checkValues(t, mustGet(t, s, []tier.Key{salted, other, r.Key()}), [][]byte{nil, nil, Encode(r)})
	if has := mustContains(t, s, []tier.Key{salted, other}); has[0] || has[1] {
		t.Fatalf("Contains under foreign roots = %v, want false", has)
	}
}

func testStats(t *testing.T, s tier.Store, opts Options) {
	before := s.Stats()
	recs := Chain(identityA, rootA, SmallLayout, 3, 6)
	items := Items(recs)
	mustPut(t, s, items[:2])
	mustGet(t, s, Keys(recs)) // 2 hits, 1 miss
	st := s.Stats()
	if hits, misses := st.Hits-before.Hits, st.Misses-before.Misses; hits != 2 || misses != 1 {
		t.Fatalf("hits, misses = %d, %d; want 2, 1", hits, misses)
	}
	if opts.SharedStats {
		return
	}
	if st.Items != 2 {
		t.Fatalf("Items = %d, want 2", st.Items)
	}
	if st.UsedBytes < int64(len(items[0].Value)+len(items[1].Value)) {
		t.Fatalf("UsedBytes = %d, less than the %d bytes stored", st.UsedBytes, len(items[0].Value)+len(items[1].Value))
	}
	if st.CapacityBytes != 0 && st.UsedBytes > st.CapacityBytes {
		t.Fatalf("UsedBytes %d over CapacityBytes %d", st.UsedBytes, st.CapacityBytes)
	}
	if hits, misses := st.Hits-before.Hits, st.Misses-before.Misses; hits != 2 || misses != 1 {
		t.Fatalf("hits, misses = %d, %d; want 2, 1", hits, misses)
	}
}

// The caller may reuse its keys slice after a call, and values got earlier
// do not change when the key is overwritten.
func testCallerBuffers(t *testing.T, s tier.Store, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 2, 7)
	items := Items(recs)
	want0 := bytes.Clone(items[0].Value)
	mustPut(t, s, items[:1])
	keys := []tier.Key{recs[0].Key()}
	got := mustGet(t, s, keys)
	keys[0] = recs[1].Key()
	r2 := *recs[0]
	r2.KV = bytes.Repeat([]byte{1}, len(r2.KV))
	mustPut(t, s, []tier.Item{{Key: recs[0].Key(), Value: Encode(&r2)}})
	if !bytes.Equal(got[0], want0) {
		t.Fatal("a value returned by Get changed after its key was overwritten")
	}
}

func testCanceledContext(t *testing.T, s tier.Store, opts Options) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	recs := Chain(identityA, rootA, SmallLayout, 1, 8)
	if _, err := s.Get(ctx, Keys(recs)); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a canceled context: %v, want context.Canceled", err)
	}
	if err := s.Put(ctx, Items(recs)); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := s.Contains(ctx, Keys(recs)); !errors.Is(err, context.Canceled) {
		t.Errorf("Contains with a canceled context: %v, want context.Canceled", err)
	}
	if err := s.Delete(ctx, Keys(recs)); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with a canceled context: %v, want context.Canceled", err)
	}
}

// Concurrent writers and readers of overlapping keys: run under -race. Every
// value read is one of the values written for its key.
func testConcurrent(t *testing.T, s tier.Store, opts Options) {
	const workers, rounds = 4, 20
	recs := Chain(identityA, rootA, SmallLayout, 16, 9)
	items := Items(recs)
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := range rounds {
				lo := (w*3 + i) % len(items)
				hi := min(lo+4, len(items))
				batch := make([]tier.Item, hi-lo)
				for j := range batch {
					batch[j] = tier.Item{Key: items[lo+j].Key, Value: bytes.Clone(items[lo+j].Value)}
				}
				if err := s.Put(ctx, batch); err != nil {
					errc <- err
					return
				}
				vals, err := s.Get(ctx, Keys(recs))
				if err != nil {
					errc <- err
					return
				}
				for k, v := range vals {
					if v != nil && !bytes.Equal(v, items[k].Value) {
						errc <- fmt.Errorf("key %d: read a value never written", k)
						return
					}
				}
				if i%5 == 4 {
					if err := s.Delete(ctx, []tier.Key{items[lo].Key}); err != nil {
						errc <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// Shadowed items are stored and served like any other while there is room, and a store that
// is a tier.Unshadower reports which keys it holds (package tier, "Sole copies").
func testShadowed(t *testing.T, s tier.Store, opts Options) {
	recs := Chain(identityA, rootA, SmallLayout, 4, 10)
	items := Items(recs)
	for i := range items[:3] {
		items[i].Shadowed = true
	}
	mustPut(t, s, items[:3])
	checkValues(t, mustGet(t, s, Keys(recs)), [][]byte{items[0].Value, items[1].Value, items[2].Value, nil})
	u, ok := s.(tier.Unshadower)
	if !ok {
		return
	}
	held, err := u.Unshadow(context.Background(), Keys(recs[1:]))
	if err != nil {
		t.Fatalf("Unshadow: %v", err)
	}
	if fmt.Sprint(held) != fmt.Sprint([]bool{true, true, false}) {
		t.Fatalf("Unshadow(1, 2, 3) = %v, want [true true false]", held)
	}
	checkValues(t, mustGet(t, s, Keys(recs)), [][]byte{items[0].Value, items[1].Value, items[2].Value, nil})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := u.Unshadow(ctx, Keys(recs)); !errors.Is(err, context.Canceled) {
		t.Errorf("Unshadow with a canceled context: %v, want context.Canceled", err)
	}
}
