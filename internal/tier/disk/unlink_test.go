package disk

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// TestEvictedFilesUnlinked: files evicted by a Put, removed by Delete and pin records of
// unpinned blocks are gone from the directory once the call returns (unlinked after the lock,
// unlink.go), and nothing is left doomed.
func TestEvictedFilesUnlinked(t *testing.T) {
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 8, 9)
	items := tiertest.Items(recs)
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	s := open(t, t.TempDir(), digestA, 3*per)
	defer s.Close()
	for i := range items {
		if err := s.Put(ctx, items[i:i+1]); err != nil {
			t.Fatal(err)
		}
	}
	checkDir(t, s, 3) // 5 evicted, their files gone
	for _, it := range items[:5] {
		if _, err := os.Stat(filepath.Join(s.Dir(), fileName(it.Key))); !os.IsNotExist(err) {
			t.Errorf("evicted %s: stat %v, want not there", it.Key, err)
		}
	}
	if _, err := s.Pin(ctx, []tier.Key{items[7].Key}, time.Hour); err != nil {
		t.Fatal(err)
	}
	checkDir(t, s, 4) // a block file and its pin record
	if _, err := s.Pin(ctx, []tier.Key{items[7].Key}, 0); err != nil {
		t.Fatal(err)
	}
	checkDir(t, s, 3)
	if err := s.Delete(ctx, []tier.Key{items[5].Key, items[6].Key}); err != nil {
		t.Fatal(err)
	}
	checkDir(t, s, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.mu.doomed) != 0 || len(s.mu.unlinking) != 0 {
		t.Errorf("left doomed %v, unlinking %v", s.mu.doomed, s.mu.unlinking)
	}
}

// TestDoomedPathReputSurvives: a key whose file is doomed (evicted, its unlink not yet run)
// and then put again keeps its new file: the rename settles the doomed unlink first, so the
// late unlink never removes the new file.
func TestDoomedPathReputSurvives(t *testing.T) {
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 1, 10)
	items := tiertest.Items(recs)
	s := open(t, t.TempDir(), digestA, 1<<20)
	defer s.Close()
	if err := s.Put(ctx, items); err != nil {
		t.Fatal(err)
	}
	// Evict it by hand, as a Put of another key would, and stop before the unlink.
	s.mu.Lock()
	s.removeLocked(s.mu.m[items[0].Key])
	s.mu.Unlock()
	if err := s.Put(ctx, items); err != nil { // settles the doomed path, then renames
		t.Fatal(err)
	}
	s.unlinkDoomed() // a late unlink of the old file (nothing is left to do)
	if got := get(t, s, tiertest.Keys(recs)); got[0] == nil {
		t.Fatal("the put again was lost to the evicted file's unlink")
	}
	checkDir(t, s, 1)
}
