package disk

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// decodeCheck is a reader's check: the value must be an intact record.
func decodeCheck(calls *int) func(int, []byte) error {
	return func(_ int, v []byte) error {
		*calls++
		_, err := tier.Decode(v)
		return err
	}
}

// GetChecked judges files as Get does: an intact file's value is served with checked set; a
// flipped byte anywhere (header, padding, value, trailer) is never served, counted, deleted.
func TestGetCheckedDamage(t *testing.T) {
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 1, 4)
	s := open(t, t.TempDir(), digestA, 1<<20)
	defer s.Close()
	path := filepath.Join(s.Dir(), fileName(recs[0].Key()))
	items := tiertest.Items(recs)
	keys := tiertest.Keys(recs)
	s.Put(ctx, []tier.Item{{Key: items[0].Key, Value: bytes.Clone(items[0].Value)}})
	good, _ := os.ReadFile(path)
	calls := 0
	vals, checked, err := s.GetChecked(ctx, keys, decodeCheck(&calls))
	if err != nil || !checked[0] || calls != 1 || !bytes.Equal(vals[0], tiertest.Encode(recs[0])) {
		t.Fatalf("intact file: checked %v, %d checks, err %v, value right %v", checked, calls, err, bytes.Equal(vals[0], tiertest.Encode(recs[0])))
	}
	offs := []int{0, 6, 7, 9, 50, 100, 111, 112, 200, len(good) - 5, len(good) - 4, len(good) - 1}
	for _, off := range offs {
		s.Put(ctx, []tier.Item{{Key: items[0].Key, Value: bytes.Clone(items[0].Value)}})
		bad := bytes.Clone(good)
		bad[off] ^= 1
		os.WriteFile(path, bad, 0o644)
		vals, checked, err := s.GetChecked(ctx, keys, decodeCheck(&calls))
		if err != nil || checked[0] || !bytes.Equal(vals[0], Corrupted) {
			t.Fatalf("flip at %d: value %.20q, checked %v, err %v; want Corrupted, unchecked", off, vals[0], checked[0], err)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("flip at %d: damaged file not deleted", off)
		}
	}
	if s.Corrupt() != uint64(len(offs)) {
		t.Fatalf("Corrupt() = %d, want %d", s.Corrupt(), len(offs))
	}
}

// A check that fails on an intact file (the reader wanted another record, or the value is
// no record at all) leaves the file to the store's own checksum: served unchecked, kept.
func TestGetCheckedRefusedValue(t *testing.T) {
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 2, 5)
	s := open(t, t.TempDir(), digestA, 1<<20)
	defer s.Close()
	items := tiertest.Items(recs)
	items[1].Value = []byte("not a record, but stored intact")
	s.Put(ctx, items)
	refuse := errors.New("not the block I want")
	vals, checked, err := s.GetChecked(ctx, tiertest.Keys(recs), func(i int, v []byte) error {
		if i == 0 {
			return refuse
		}
		_, err := tier.Decode(v)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if checked[i] || !bytes.Equal(vals[i], items[i].Value) {
			t.Fatalf("block %d: checked %v, value %.20q; want unchecked, the stored value", i, checked[i], vals[i])
		}
	}
	if s.Corrupt() != 0 || s.Stats().Items != 2 {
		t.Fatalf("corrupt %d, items %d; want 0, 2", s.Corrupt(), s.Stats().Items)
	}
}

// With O_DIRECT reads (cold files) GetChecked serves the same values as Get, checked.
func TestGetCheckedDirect(t *testing.T) {
	s, recs, files := openBig(t, t.TempDir(), 4)
	for _, f := range files {
		evictPages(t, f, 0, 0)
	}
	calls := 0
	vals, checked, err := s.GetChecked(ctx, tiertest.Keys(recs), decodeCheck(&calls))
	if err != nil || calls != len(recs) {
		t.Fatalf("%d checks for %d blocks, err %v", calls, len(recs), err)
	}
	for i, v := range vals {
		if !checked[i] || !bytes.Equal(v, tiertest.Encode(recs[i])) {
			t.Fatalf("block %d: checked %v, value right %v", i, checked[i], bytes.Equal(v, tiertest.Encode(recs[i])))
		}
	}
}
