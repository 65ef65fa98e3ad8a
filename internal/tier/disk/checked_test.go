package disk

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// decodeCheck is a reader's check: the value must be an intact record. The store runs checks
// from its parallel readers, so the count is atomic.
func decodeCheck(calls *atomic.Int64) func(int, []byte) error {
	return func(_ int, v []byte) error {
		calls.Add(1)
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
	var calls atomic.Int64
	vals, checked, err := s.GetChecked(ctx, keys, decodeCheck(&calls))
	if err != nil || !checked[0] || calls.Load() != 1 || !bytes.Equal(vals[0], tiertest.Encode(recs[0])) {
		t.Fatalf("intact file: checked %v, %d checks, err %v, value right %v", checked, calls.Load(), err, bytes.Equal(vals[0], tiertest.Encode(recs[0])))
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
	var calls atomic.Int64
	vals, checked, err := s.GetChecked(ctx, tiertest.Keys(recs), decodeCheck(&calls))
	if err != nil || calls.Load() != int64(len(recs)) {
		t.Fatalf("%d checks for %d blocks, err %v", calls.Load(), len(recs), err)
	}
	for i, v := range vals {
		if !checked[i] || !bytes.Equal(v, tiertest.Encode(recs[i])) {
			t.Fatalf("block %d: checked %v, value right %v", i, checked[i], bytes.Equal(v, tiertest.Encode(recs[i])))
		}
	}
}

// FuzzGetChecked: whatever bytes a block's file holds, GetChecked serves what Get serves (the
// value, or Corrupted), deletes and counts what Get does, and says checked only for a value
// that is an intact record.
func FuzzGetChecked(f *testing.F) {
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 1, 6)
	item := tiertest.Items(recs)[0]
	dir := f.TempDir()
	seed, err := Open(Config{Dir: dir, CapacityBytes: 1 << 20, IdentityDigest: digestA})
	if err != nil {
		f.Fatal(err)
	}
	seed.Put(ctx, []tier.Item{{Key: item.Key, Value: bytes.Clone(item.Value)}})
	good, err := os.ReadFile(filepath.Join(seed.Dir(), fileName(item.Key)))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { seed.Close() })
	f.Add(good)
	for _, off := range []int{7, 120, len(good) / 2, len(good) - 2} {
		bad := bytes.Clone(good)
		bad[off] ^= 0x10
		f.Add(bad)
	}
	f.Add(good[:len(good)-1])
	s := seed // one store for every input: each read below re-puts the block first
	f.Fuzz(func(t *testing.T, file []byte) {
		path := filepath.Join(s.Dir(), fileName(item.Key))
		read := func(checkedGet bool) (v []byte, checked, kept bool) {
			s.Put(ctx, []tier.Item{{Key: item.Key, Value: bytes.Clone(item.Value)}})
			if err := os.WriteFile(path, file, 0o644); err != nil {
				t.Fatal(err)
			}
			var vals [][]byte
			var ok []bool
			var err error
			if checkedGet {
				var calls atomic.Int64
				vals, ok, err = s.GetChecked(ctx, []tier.Key{item.Key}, decodeCheck(&calls))
			} else {
				vals, err = s.Get(ctx, []tier.Key{item.Key})
				ok = []bool{false}
			}
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(path)
			return bytes.Clone(vals[0]), ok[0], statErr == nil
		}
		c0 := s.Corrupt()
		want, _, wantKept := read(false)
		c1 := s.Corrupt()
		got, checked, kept := read(true)
		if c2 := s.Corrupt(); !bytes.Equal(got, want) || kept != wantKept || c2-c1 != c1-c0 {
			t.Fatalf("GetChecked served %.16q (kept %v, %d counted corrupt), Get %.16q (kept %v, %d)", got, kept, c2-c1, want, wantKept, c1-c0)
		}
		if checked {
			if _, err := tier.Decode(got); err != nil {
				t.Fatalf("checked a value that is no intact record: %v", err)
			}
		}
	})
}
