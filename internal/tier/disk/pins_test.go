package disk

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

func openClock(t *testing.T, dir string, capacity int64, c *tiertest.Clock) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, CapacityBytes: capacity, IdentityDigest: digestA, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pinMap(s *Store) map[tier.Key]tier.PinInfo {
	m := map[tier.Key]tier.PinInfo{}
	for _, p := range s.Pins() {
		m[p.Key] = p
	}
	return m
}

func pinRecords(t *testing.T, s *Store) []tier.Key {
	t.Helper()
	ents, err := os.ReadDir(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var out []tier.Key
	for _, e := range ents {
		if k, ok := parsePinName(e.Name()); ok {
			out = append(out, k)
		}
	}
	return out
}

// Pins survive a restart with their remaining time (last use + TTL); a pin that expired while
// the store was down, or at run time, comes back as a plain entry, and its record is gone.
func TestPinsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	c := tiertest.NewClock()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 4, 50)
	items := tiertest.Items(recs)
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	s := openClock(t, dir, 6*per, c)
	a, b, d, plain := items[0], items[1], items[2], items[3]
	a.PinTTL = time.Hour
	if err := s.Put(ctx, []tier.Item{a, b, d, plain}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pin(ctx, []tier.Key{b.Key}, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pin(ctx, []tier.Key{d.Key}, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Advance(5 * time.Minute)
	get(t, s, []tier.Key{a.Key, d.Key}) // a's last use: 5m; d expired at 2m: no refresh
	getAt := c.Now()
	get(t, s, []tier.Key{d.Key}) // a use after expiry: d must not come back pinned
	if got := pinRecords(t, s); len(got) != 2 {
		t.Fatalf("%d pin records on disk, want 2 (a, b): %v", len(got), got)
	}
	s.Close()

	c.Advance(15 * time.Minute) // down 15m: b (10m from 0) expired, a has 45m left
	s = openClock(t, dir, 6*per, c)
	defer s.Close()
	pins := pinMap(s)
	if len(pins) != 1 {
		t.Fatalf("after reopen: pins %v, want only a", pins)
	}
	pa, ok := pins[a.Key]
	if want := getAt.Add(time.Hour); !ok || pa.TTL != time.Hour || pa.Expires.Before(want) || pa.Expires.After(want.Add(time.Millisecond)) {
		t.Fatalf("a after reopen: %+v, want TTL 1h expiring at %v (45m left)", pa, want)
	}
	if got := pinRecords(t, s); len(got) != 1 || got[0] != a.Key {
		t.Fatalf("pin records after reopen: %v, want only a's", got)
	}
	if st := s.Stats(); st.Items != 4 || st.PinnedItems != 1 || st.PinnedBytes != per {
		t.Fatalf("after reopen: %+v, want 4 items, 1 pinned of %d bytes", st, per)
	}
	// Under a flood the restored pin stays; the rest goes.
	flood := tiertest.Items(tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 12, 51))
	for i := range flood {
		if err := s.Put(ctx, flood[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	has, _ := s.Contains(ctx, tiertest.Keys(recs))
	if !slices.Equal(has, []bool{true, false, false, false}) {
		t.Fatalf("after the flood: held %v, want only the pin", has)
	}
	// And it ends on time: after its 45m it is a plain entry, its record removed by the sweep.
	c.Advance(45*time.Minute + time.Second)
	if n := s.Sweep(); n != 1 {
		t.Fatalf("Sweep() = %d, want 1", n)
	}
	if got := pinRecords(t, s); len(got) != 0 {
		t.Fatalf("pin records after expiry: %v", got)
	}
}

// A torn or foreign pin record never loses its block or fails Open: the block comes back
// unpinned and the record is removed; a record without a block is removed.
func TestTornPinRecord(t *testing.T) {
	dir := t.TempDir()
	c := tiertest.NewClock()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 3, 52)
	items := tiertest.Items(recs)
	for i := range items {
		items[i].PinTTL = time.Hour
	}
	s := openClock(t, dir, 1<<20, c)
	if err := s.Put(ctx, items); err != nil {
		t.Fatal(err)
	}
	s.Close()
	rec := func(i int) string { return filepath.Join(s.Dir(), pinName(items[i].Key)) }
	good, err := os.ReadFile(rec(0))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(rec(0), good[:pinSize/2], 0o644) // torn
	other, _ := os.ReadFile(rec(2))
	os.WriteFile(rec(1), other, 0o644) // valid, but another key's
	orphan := filepath.Join(s.Dir(), pinName(tier.Key{Root: rootA, Hash: prefix.Hash{9}}))
	os.WriteFile(orphan, good, 0o644)

	s = openClock(t, dir, 1<<20, c)
	defer s.Close()
	for i, v := range get(t, s, tiertest.Keys(recs)) {
		if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
			t.Fatalf("block %d after a damaged pin record: %v", i, err)
		}
	}
	pins := pinMap(s)
	if _, ok := pins[items[2].Key]; len(pins) != 1 || !ok {
		t.Fatalf("pins %v, want only the intact one", pins)
	}
	for _, p := range []string{rec(0), rec(1), orphan} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived Open", filepath.Base(p))
		}
	}
}

// Pins are ahead of both classes: a sole copy evicts sole copies, never a pin; a shadowed
// item that would need a pin's (or a sole copy's) room is declined. A pin's class (here
// sole, by Unshadow) is where it goes when it ends.
func TestPinsAheadOfSoleAndShadowed(t *testing.T) {
	dir := t.TempDir()
	c := tiertest.NewClock()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 8, 53)
	items := tiertest.Items(recs)
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	s := openClock(t, dir, 3*per, c)
	defer s.Close()
	p0, p1 := items[0], items[1]
	p0.PinTTL, p0.Shadowed = time.Hour, true
	p1.PinTTL = time.Hour
	s.Put(ctx, []tier.Item{p0, p1, items[2]}) // two pins, one sole copy
	if held, _ := s.Unshadow(ctx, []tier.Key{p0.Key}); !held[0] {
		t.Fatal("Unshadow of a pinned key: not held")
	}
	sh := items[3]
	sh.Shadowed = true
	s.Put(ctx, []tier.Item{sh})
	if st := s.Stats(); st.Declined != 1 || st.Evictions != 0 {
		t.Fatalf("shadowed Put with only pins and a sole copy: %+v, want declined, nothing evicted", st)
	}
	s.Put(ctx, items[4:6]) // sole copies: each evicts the sole LRU, never a pin
	has, _ := s.Contains(ctx, tiertest.Keys(recs[:6]))
	if !slices.Equal(has, []bool{true, true, false, false, false, true}) {
		t.Fatalf("held %v, want the two pins and the last sole copy", has)
	}
	c.Advance(time.Hour + time.Second)
	s.Put(ctx, items[6:8]) // the pins have ended: plain sole copies, least recent, so they go
	has, _ = s.Contains(ctx, tiertest.Keys(recs))
	if !slices.Equal(has, []bool{false, false, false, false, false, true, true, true}) {
		t.Fatalf("after expiry: held %v, want the three newest", has)
	}
	if st := s.Stats(); st.PinnedItems != 0 || st.PinnedBytes != 0 || st.UsedBytes != 3*per {
		t.Fatalf("stats %+v", st)
	}
}

// A smaller budget at Open evicts unpinned entries first, then the pins that expire first.
func TestPinsOverSmallerBudgetAtOpen(t *testing.T) {
	dir := t.TempDir()
	c := tiertest.NewClock()
	items := tiertest.Items(tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 4, 54))
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	items[0].PinTTL, items[1].PinTTL, items[2].PinTTL = 3*time.Hour, time.Hour, 2*time.Hour
	s := openClock(t, dir, 4*per, c)
	s.Put(ctx, items)
	s.Close()
	s = openClock(t, dir, 2*per, c)
	defer s.Close()
	has, _ := s.Contains(ctx, []tier.Key{items[0].Key, items[1].Key, items[2].Key, items[3].Key})
	if !slices.Equal(has, []bool{true, false, true, false}) {
		t.Fatalf("held %v, want the two pins expiring last", has)
	}
	if got := pinRecords(t, s); len(got) != 2 {
		t.Fatalf("%d pin records, want 2", len(got))
	}
}

// After concurrent pin operations the pin records on disk are exactly the pins in memory: a
// reopen restores the same pins, with the same TTLs.
func TestConcurrentPinsMatchRecords(t *testing.T) {
	dir := t.TempDir()
	c := tiertest.NewClock()
	s := openClock(t, dir, 1<<20, c)
	items := tiertest.Items(tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 12, 55))
	tiertest.ConcurrentPinOps(t, s, items, 4, 200)
	before := map[tier.Key]time.Duration{}
	for _, p := range s.Pins() {
		before[p.Key] = p.TTL
	}
	if got := pinRecords(t, s); len(got) != len(before) {
		t.Fatalf("%d pin records for %d pins", len(got), len(before))
	}
	s.Close()
	s = openClock(t, dir, 1<<20, c)
	defer s.Close()
	after := map[tier.Key]time.Duration{}
	for _, p := range s.Pins() {
		after[p.Key] = p.TTL
	}
	if len(before) == 0 || len(after) != len(before) {
		t.Fatalf("pins before a reopen %v, after %v", before, after)
	}
	for k, ttl := range before {
		if after[k] != ttl {
			t.Fatalf("pin %s: TTL %v before a reopen, %v after", k, ttl, after[k])
		}
	}
}

func FuzzParsePin(f *testing.F) {
	k := tier.Key{Root: rootA, Hash: prefix.Hash{1, 2, 3}}
	good := encodePin(k, time.Hour)
	f.Add(good)
	f.Add(good[:pinSize-1])
	f.Add(encodePin(tier.Key{Root: rootA}, time.Minute))
	f.Add(encodePin(k, -1))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		ttl, err := parsePin(b, k)
		if err != nil {
			return
		}
		if ttl <= 0 {
			t.Fatalf("accepted TTL %v", ttl)
		}
		if again := encodePin(k, ttl); !bytes.Equal(again, b) {
			t.Fatalf("accepted %x, which does not re-encode to itself (%x)", b, again)
		}
	})
}
