package disk

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"stockpot/internal/kvcache"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// bigLayout makes files of several pages with a partial last page (64 KiB of K/V plus the
// record and file headers), so O_DIRECT's aligned reads and the tail are both exercised.
var bigLayout = kvcache.Layout{BlockSize: 16, Layers: 4, KVHeads: 2, HeadDim: 64, DType: kvcache.F32}

// evictPages drops path's pages in [off, off+n) from the page cache (n = 0: to the end), so
// the next read of them goes to the device.
func evictPages(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unix.Fdatasync(int(f.Fd()))
	if err := unix.Fadvise(int(f.Fd()), off, n, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// openBig opens a store in dir holding n records of bigLayout, and returns their files.
func openBig(t *testing.T, dir string, n int) (*Store, []*tier.Record, []string) {
	t.Helper()
	s, err := Open(Config{Dir: dir, CapacityBytes: 1 << 30, IdentityDigest: digestA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	recs := tiertest.Chain(digestA, rootA, bigLayout, n, 7)
	if err := s.Put(context.Background(), tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, r := range recs {
		files = append(files, filepath.Join(s.Dir(), fileName(r.Key())))
	}
	return s, recs, files
}

func checkValues(t *testing.T, s *Store, recs []*tier.Record) {
	t.Helper()
	got := get(t, s, tiertest.Keys(recs))
	for i, r := range recs {
		if !bytes.Equal(got[i], tiertest.Encode(r)) {
			t.Fatalf("block %d: read back %d bytes, not what was written", i, len(got[i]))
		}
	}
}

// Files out of the page cache are read with O_DIRECT, wholly or past the cached part, in
// parallel, and come back intact.
func TestReadDirect(t *testing.T) {
	s, recs, files := openBig(t, t.TempDir(), 12)
	checkValues(t, s, recs) // cached: buffered reads
	cached := s.directReads.Load()
	for i, f := range files {
		switch i % 3 {
		case 0:
			evictPages(t, f, 0, 0) // all of it
		case 1:
			evictPages(t, f, 3*directAlign, 0) // the pages after the third
		case 2:
			evictPages(t, f, 5000, 0) // from inside the second page
		}
	}
	checkValues(t, s, recs)
	if s.noDirect.Load() {
		t.Skip("this file system refuses O_DIRECT; TestReadBufferedOnTmpfs covers the fallback")
	}
	if got := s.directReads.Load() - cached; got != uint64(len(files)) {
		t.Fatalf("%d files read with O_DIRECT, want %d (every evicted one)", got, len(files))
	}
}

// A file system that refuses O_DIRECT (tmpfs before Linux 6.6, some FUSE and network file
// systems: EINVAL) gets buffered reads: the store turns O_DIRECT off and reads stay intact.
// The store reads files in parallel, so the reads already past their check when the first
// refusal lands may each try once (1 to 4 tries here); once it has learned, it never tries
// again: a second round of evicted files costs no try.
func TestReadBufferedWithoutDirect(t *testing.T) {
	s, recs, files := openBig(t, t.TempDir(), 4)
	defer func(f func(int, int) error) { setFlags = f }(setFlags)
	var tries atomic.Int32
	setFlags = func(fd, flags int) error {
		if flags&unix.O_DIRECT != 0 {
			tries.Add(1)
			return unix.EINVAL
		}
		return nil
	}
	evictAndRead := func() {
		for _, f := range files {
			evictPages(t, f, 0, 0)
		}
		checkValues(t, s, recs)
		if !s.noDirect.Load() || s.directReads.Load() != 0 {
			t.Fatalf("refused O_DIRECT: noDirect %v, %d direct reads; want true, 0", s.noDirect.Load(), s.directReads.Load())
		}
	}
	evictAndRead()
	if n := tries.Load(); n < 1 || n > int32(len(files)) {
		t.Fatalf("O_DIRECT tried %d times over %d parallel reads; want 1 to %d", n, len(files), len(files))
	}
	tries.Store(0)
	evictAndRead()
	if n := tries.Load(); n != 0 {
		t.Fatalf("O_DIRECT tried %d more times after the store turned it off", n)
	}
}

// On tmpfs (refusing O_DIRECT or not, by kernel version) reads come back intact.
func TestReadOnTmpfs(t *testing.T) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("no tmpfs at /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "stockpot-disk-test-")
	if err != nil {
		t.Skip("cannot write /dev/shm:", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, recs, _ := openBig(t, dir, 4)
	checkValues(t, s, recs)
}

// A damaged file read with O_DIRECT is caught like any other (counted, deleted, Corrupted).
func TestReadDirectDamaged(t *testing.T) {
	s, recs, files := openBig(t, t.TempDir(), 2)
	b, _ := os.ReadFile(files[1])
	b[len(b)/2] ^= 1
	os.WriteFile(files[1], b, 0o644)
	evictPages(t, files[1], 0, 0)
	got := get(t, s, tiertest.Keys(recs))
	if !bytes.Equal(got[1], Corrupted) || s.Corrupt() != 1 {
		t.Fatalf("damaged file: value %q, corrupt %d; want Corrupted, 1", got[1], s.Corrupt())
	}
	if _, err := os.Stat(files[1]); !os.IsNotExist(err) {
		t.Fatalf("damaged file not deleted: %v", err)
	}
}

// Recycled read buffers are reused by later Gets, and the values they then hold are right.
func TestRecycle(t *testing.T) {
	s, recs, files := openBig(t, t.TempDir(), 6)
	keys := tiertest.Keys(recs)
	got := get(t, s, keys)
	first := unsafe.SliceData(got[0])
	s.Recycle(got)
	s.Recycle([][]byte{Corrupted, nil}) // what Get returns for damage and misses: skipped
	for _, f := range files[:3] {
		evictPages(t, f, 0, 0) // some read with O_DIRECT into recycled buffers
	}
	again := get(t, s, keys)
	reused := false
	for i, v := range again {
		if !bytes.Equal(v, tiertest.Encode(recs[i])) {
			t.Fatalf("block %d wrong after recycling", i)
		}
		for _, w := range got {
			reused = reused || unsafe.SliceData(v) == unsafe.SliceData(w)
		}
	}
	if !reused {
		t.Logf("no buffer reused (the pool may drop them at a GC); first was %p", first)
	}
}
