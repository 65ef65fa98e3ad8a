package disk

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

var (
	digestA = [32]byte{0xaa}
	digestB = [32]byte{0xbb}
	rootA   = prefix.Root(digestA[:], "")
	rootB   = prefix.Root(digestB[:], "")
	ctx     = context.Background()
)

func open(t *testing.T, dir string, digest [32]byte, capacity int64) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, CapacityBytes: capacity, IdentityDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	tiertest.RunOptions(t, func(t *testing.T) tier.Store { return open(t, t.TempDir(), digestA, 64<<20) }, tiertest.Options{
		Pins: func(t *testing.T, capacity int64, now func() time.Time) tier.Store {
			s, err := Open(Config{Dir: t.TempDir(), CapacityBytes: capacity, IdentityDigest: digestA, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}

func TestConfig(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no dir":      {CapacityBytes: 1, IdentityDigest: digestA},
		"no capacity": {Dir: t.TempDir(), IdentityDigest: digestA},
		"no digest":   {Dir: t.TempDir(), CapacityBytes: 1},
	} {
		if _, err := Open(cfg); err == nil {
			t.Errorf("%s: Open accepted %+v", name, cfg)
		}
	}
}

func get(t *testing.T, s *Store, keys []tier.Key) [][]byte {
	t.Helper()
	v, err := s.Get(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 10, 1)
	items := tiertest.Items(recs)
	s := open(t, dir, digestA, 1<<20)
	if err := s.Put(ctx, items); err != nil {
		t.Fatal(err)
	}
	used := s.Stats().UsedBytes
	s.Close()
	if _, err := s.Get(ctx, tiertest.Keys(recs)); !errors.Is(err, tier.ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
	s = open(t, dir, digestA, 1<<20)
	defer s.Close()
	if st := s.Stats(); st.Items != 10 || st.UsedBytes != used {
		t.Fatalf("after reopen: %+v, want 10 items, %d bytes", st, used)
	}
	for i, v := range get(t, s, tiertest.Keys(recs)) {
		if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
			t.Fatalf("block %d after reopen: %v", i, err)
		}
	}
}

func TestLockedDir(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, digestA, 1<<20)
	if _, err := Open(Config{Dir: dir, CapacityBytes: 1 << 20, IdentityDigest: digestA}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
	s.Close()
	open(t, dir, digestA, 1<<20).Close()
}

// Another model on the same directory reuses nothing, and its Open collects
// the first model's records.
func TestForeignIdentityCollected(t *testing.T) {
	dir := t.TempDir()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 4, 2)
	s := open(t, dir, digestA, 1<<20)
	s.Put(ctx, tiertest.Items(recs))
	s.Close()

	b := open(t, dir, digestB, 1<<20)
	if st := b.Stats(); st.Items != 0 || st.UsedBytes != 0 {
		t.Fatalf("model B sees %+v of model A's records", st)
	}
	for _, v := range get(t, b, tiertest.Keys(recs)) {
		if v != nil {
			t.Fatal("model B served a record of model A")
		}
	}
	if _, err := os.Stat(s.Dir()); !os.IsNotExist(err) {
		t.Fatalf("model A's directory not collected: %v", err)
	}
	b.Put(ctx, tiertest.Items(tiertest.Chain(digestB, rootB, tiertest.SmallLayout, 2, 3)))
	b.Close()
	a := open(t, dir, digestA, 1<<20)
	defer a.Close()
	if st := a.Stats(); st.Items != 0 {
		t.Fatalf("model A reopened with %d items, want 0", st.Items)
	}
}

// A flipped byte anywhere in a file: never served, counted, deleted.
func TestCorruptFileNeverServed(t *testing.T) {
	dir := t.TempDir()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 1, 4)
	s := open(t, dir, digestA, 1<<20)
	defer s.Close()
	path := filepath.Join(s.Dir(), fileName(recs[0].Key()))
	items := tiertest.Items(recs)
	s.Put(ctx, items)
	good, _ := os.ReadFile(path)
	for _, off := range []int{0, 9, 50, 100, 111, 200, len(good) - 1} {
		s.Put(ctx, []tier.Item{{Key: items[0].Key, Value: bytes.Clone(items[0].Value)}})
		bad := bytes.Clone(good)
		bad[off] ^= 1
		os.WriteFile(path, bad, 0o644)
		if v := get(t, s, tiertest.Keys(recs)); v[0] != nil && !bytes.Equal(v[0], Corrupted) {
			t.Fatalf("flip at %d served", off)
		}
		if _, err := os.Stat(path); !os.IsNotExist(err) {
			t.Fatalf("flip at %d: damaged file not deleted", off)
		}
		if has, _ := s.Contains(ctx, tiertest.Keys(recs)); has[0] {
			t.Fatalf("flip at %d: still indexed", off)
		}
	}
	if s.Corrupt() != 7 {
		t.Fatalf("Corrupt() = %d, want 7", s.Corrupt())
	}
	// Truncation (a torn write).
	s.Put(ctx, []tier.Item{{Key: items[0].Key, Value: bytes.Clone(items[0].Value)}})
	os.WriteFile(path, good[:len(good)/2], 0o644)
	if v := get(t, s, tiertest.Keys(recs)); v[0] != nil && !bytes.Equal(v[0], Corrupted) {
		t.Fatal("torn file served")
	}
}

func TestStrayAndTempFilesRemovedAtOpen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, digestA, 1<<20)
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 2, 5)
	s.Put(ctx, tiertest.Items(recs))
	s.Close()
	tmp := filepath.Join(s.Dir(), tempPrefix+"123")
	os.WriteFile(tmp, []byte("SPDF half a record"), 0o644)
	stray := filepath.Join(s.Dir(), fileName(tier.Key{Root: rootA, Hash: prefix.Hash{1}}))
	os.WriteFile(stray, []byte("short"), 0o644)
	s = open(t, dir, digestA, 1<<20)
	defer s.Close()
	for _, p := range []string{tmp, stray} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived Open", filepath.Base(p))
		}
	}
	if st := s.Stats(); st.Items != 2 {
		t.Fatalf("items %d, want 2", st.Items)
	}
}

// Budget: a Put over budget evicts the least recently used file; recency
// survives a restart (file mtimes), and a smaller budget at Open evicts.
func TestBudgetLRU(t *testing.T) {
	dir := t.TempDir()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 5, 6)
	items := tiertest.Items(recs)
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	s := open(t, dir, digestA, 3*per)
	for i := range 3 {
		s.Put(ctx, items[i:i+1])
		// mtime granularity: make the order visible to the next Open.
		os.Chtimes(filepath.Join(s.Dir(), fileName(items[i].Key)), time.Unix(int64(1000+i), 0), time.Unix(int64(1000+i), 0))
	}
	get(t, s, []tier.Key{items[0].Key}) // 0 is now the most recent (mtime = now)
	s.Put(ctx, items[3:4])              // evicts 1
	has, _ := s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{true, false, true, true, false}; !equal(has, want) {
		t.Fatalf("after put 3: %v, want %v", has, want)
	}
	if st := s.Stats(); st.Evictions != 1 || st.UsedBytes != 3*per {
		t.Fatalf("stats %+v, want 1 eviction and %d bytes", st, 3*per)
	}
	s.Close()
	// Reopen with room for 2: the oldest by mtime (2) goes.
	s = open(t, dir, digestA, 2*per)
	defer s.Close()
	has, _ = s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{true, false, false, true, false}; !equal(has, want) {
		t.Fatalf("after reopen with 2 slots: %v, want %v", has, want)
	}
	ents, _ := os.ReadDir(s.Dir())
	if len(ents) != 2 {
		t.Fatalf("%d files on disk, want 2", len(ents))
	}
}

func equal(a, b []bool) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// smallFS is a file system of limit bytes under its directory: a write past the limit
// writes what fits and fails with ENOSPC, as a full tmpfs does.
type smallFS struct {
	dir    string
	limit  int64
	enospc int // writes refused
}

type smallFile struct {
	*os.File
	fs *smallFS
}

func (fs *smallFS) CreateTemp(dir, pattern string) (File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return smallFile{f, fs}, nil
}

func (fs *smallFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (fs *smallFS) used() int64 {
	var n int64
	filepath.Walk(fs.dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

func (f smallFile) Write(b []byte) (int, error) {
	if room := f.fs.limit - f.fs.used(); int64(len(b)) > room {
		f.fs.enospc++
		n, _ := f.File.Write(b[:max(room, 0)])
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Write(b)
}

func openFS(t *testing.T, dir string, capacity int64, fs FS) *Store {
	t.Helper()
	s, err := Open(Config{Dir: dir, CapacityBytes: capacity, IdentityDigest: digestA, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A file system smaller than the budget (issue 17: an 8 MiB tmpfs under a larger
// --disk-cache-size): a write that meets ENOSPC evicts the least recently used file and is
// retried once, and succeeds; the store stays within what the file system holds.
func TestDiskFullEvictsAndRetries(t *testing.T) {
	dir := t.TempDir()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 6, 7)
	items := tiertest.Items(recs)
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	fs := &smallFS{dir: dir, limit: 3*per + per/2} // room for 3 files and a half
	s := openFS(t, dir, 1<<20, fs)
	for i := range items {
		if err := s.Put(ctx, items[i:i+1]); err != nil {
			t.Fatalf("Put %d on a full file system: %v (want it to evict and retry)", i, err)
		}
	}
	if fs.enospc != 3 {
		t.Errorf("%d writes met ENOSPC, want 3 (puts 3, 4 and 5)", fs.enospc)
	}
	has, _ := s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{false, false, false, true, true, true}; !equal(has, want) {
		t.Fatalf("after the retries: %v, want %v (the oldest evicted)", has, want)
	}
	if st := s.Stats(); st.Evictions != 3 || st.Items != 3 || st.UsedBytes != 3*per {
		t.Fatalf("stats %+v, want 3 evictions, 3 items, %d bytes", st, 3*per)
	}
	checkDir(t, s, 3)
	v := get(t, s, tiertest.Keys(recs[3:]))
	for i := range v {
		if !bytes.Equal(v[i], items[3+i].Value) {
			t.Fatalf("value %d after the retries is not what was put", 3+i)
		}
	}
}

// checkDir checks the store's directory holds exactly n block files and no temp file.
func checkDir(t *testing.T, s *Store, n int) {
	t.Helper()
	ents, _ := os.ReadDir(s.Dir())
	if len(ents) != n {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("%d files in the directory, want %d: %v", len(ents), n, names)
	}
}

// A disk that stays full: the retry fails too; the error says no space (tier.ErrNoSpace and
// ENOSPC), nothing is left behind, and what could not be kept was evicted, not corrupted.
func TestDiskFullForGood(t *testing.T) {
	dir := t.TempDir()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 3, 7)
	items := tiertest.Items(recs)
	fs := &smallFS{dir: dir, limit: 1 << 20}
	s := openFS(t, dir, 1<<20, fs)
	if err := s.Put(ctx, items[:1]); err != nil {
		t.Fatal(err)
	}
	fs.limit = 10 // nothing fits any more, not even after evicting
	err := s.Put(ctx, items[1:])
	if !errors.Is(err, tier.ErrNoSpace) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Put on a full disk: %v, want ErrNoSpace wrapping ENOSPC", err)
	}
	checkDir(t, s, 0)
	if st := s.Stats(); st.Items != 0 || st.UsedBytes != 0 {
		t.Fatalf("stats %+v, want an empty index", st)
	}
	fs.limit = 1 << 20
	if err := s.Put(ctx, items[1:]); err != nil {
		t.Fatalf("Put after space came back: %v", err)
	}
	checkDir(t, s, 2)
}

// A real 8 MiB tmpfs under a 64 MiB budget, when the test may mount one (root); the seam
// tests above always run.
func TestDiskFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; TestDiskFullEvictsAndRetries covers ENOSPC through the FS seam")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s; TestDiskFullEvictsAndRetries covers ENOSPC through the FS seam", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	s := open(t, dir, digestA, 64<<20)
	defer s.Close()
	l := tiertest.SmallLayout
	l.Layers, l.HeadDim = 16, 64 // 32 KiB blocks
	recs := tiertest.Chain(digestA, rootA, l, 400, 8)
	for i, it := range tiertest.Items(recs) { // 12.5 MiB into 8
		if err := s.Put(ctx, []tier.Item{it}); err != nil {
			t.Fatalf("Put %d into a full tmpfs: %v (want it to evict and retry)", i, err)
		}
	}
	st := s.Stats()
	if st.Evictions == 0 || st.UsedBytes > 8<<20 {
		t.Fatalf("stats %+v: want evictions, and no more than the 8 MiB the tmpfs holds", st)
	}
	if v := get(t, s, []tier.Key{recs[len(recs)-1].Key()}); v[0] == nil {
		t.Fatal("the last block put is not served")
	}
}

// Sole copies (issue 17): after a restart every file is a sole copy, and shadowed
// write-backs (the host tier holds them too) do not evict them; they evict only each other.
// A sole write evicts shadowed files first. Unshadow makes a shadowed file sole.
func TestShadowedNeverEvictSole(t *testing.T) {
	dir := t.TempDir()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 10, 9)
	items := tiertest.Items(recs)
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	s := open(t, dir, digestA, 4*per)
	s.Put(ctx, items[:3]) // no tier above: sole
	s.Close()
	s = open(t, dir, digestA, 4*per)
	defer s.Close()
	shadowed := func(its []tier.Item) []tier.Item {
		out := make([]tier.Item, len(its))
		for i, it := range its {
			out[i] = it
			out[i].Shadowed = true
		}
		return out
	}
	if err := s.Put(ctx, shadowed(items[3:7])); err != nil { // room for one
		t.Fatal(err)
	}
	has, _ := s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{true, true, true, false, false, false, true, false, false, false}; !equal(has, want) {
		t.Fatalf("after shadowed puts: %v, want %v (0-2 kept, 6 replaced 3, 4 and 5)", has, want)
	}
	if st := s.Stats(); st.Declined != 0 || st.Evictions != 3 {
		t.Fatalf("stats %+v, want 3 evictions, 0 declined", st)
	}
	// 6 becomes sole: now a shadowed put is declined before anything is written.
	if held, _ := s.Unshadow(ctx, []tier.Key{items[6].Key, items[9].Key}); !equal(held, []bool{true, false}) {
		t.Fatalf("Unshadow = %v, want [true false]", held)
	}
	if err := s.Put(ctx, shadowed(items[7:8])); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Declined != 1 || st.Items != 4 {
		t.Fatalf("stats %+v, want 1 declined, 4 items", st)
	}
	checkDir(t, s, 4)
	// A sole put evicts the least recently used sole copy.
	get(t, s, tiertest.Keys(recs[:1]))
	s.Put(ctx, items[8:9])
	has, _ = s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{true, false, true, false, false, false, true, false, true, false}; !equal(has, want) {
		t.Fatalf("after a sole put: %v, want %v", has, want)
	}
}

// A restored chain is touched head last: eviction then takes its tail first, so what
// survives is a prefix a lookup can use.
func TestGetKeepsChainHeads(t *testing.T) {
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 6, 10)
	items := tiertest.Items(recs)
	per := int64(headerSize + len(items[0].Value) + trailerSize)
	s := open(t, t.TempDir(), digestA, 4*per)
	defer s.Close()
	s.Put(ctx, items[:4])
	get(t, s, tiertest.Keys(recs[:4])) // the whole chain, in prefix order
	s.Put(ctx, items[4:6])             // two evictions
	has, _ := s.Contains(ctx, tiertest.Keys(recs))
	if want := []bool{true, true, false, false, true, true}; !equal(has, want) {
		t.Fatalf("after a restore and two puts: %v, want %v (the tail evicted, not the head)", has, want)
	}
}

// kill -9 mid-write: a child process writes records in a loop; it is killed
// at a random point; the reopened store serves only whole, correct records.
func TestCrashMidWrite(t *testing.T) {
	if os.Getenv("STOCKPOT_DISK_CRASH_CHILD") != "" {
		crashChild()
		return
	}
	dir := t.TempDir()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashMidWrite$", "-test.count=1")
		cmd.Env = append(os.Environ(), "STOCKPOT_DISK_CRASH_CHILD="+dir, "STOCKPOT_DISK_CRASH_SEED="+strconv.Itoa(round))
		out, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		for n := 0; n < 20+round*15 && sc.Scan(); n++ {
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		s := open(t, dir, digestA, 1<<30)
		recs := crashRecords(round)
		vals := get(t, s, tiertest.Keys(recs))
		served := 0
		for i, v := range vals {
			if v == nil {
				continue
			}
			served++
			if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
				t.Fatalf("round %d: block %d served damaged: %v", round, i, err)
			}
		}
		if served < 20 {
			t.Fatalf("round %d: %d blocks survived, want at least the 20 acknowledged", round, served)
		}
		ents, _ := os.ReadDir(s.Dir())
		records := 0
		for _, e := range ents {
			_, block := parseName(e.Name())
			k, pin := parsePinName(e.Name())
			if !block && !pin {
				t.Fatalf("round %d: %s left after Open", round, e.Name())
			}
			if pin {
				records++
				if has, _ := s.Contains(ctx, []tier.Key{k}); !has[0] {
					t.Fatalf("round %d: pin record of %s without its block", round, k)
				}
			}
		}
		// Every odd block is Put pinned; those acknowledged are pinned after the crash.
		pins := map[tier.Key]bool{}
		for _, p := range s.Pins() {
			pins[p.Key] = true
		}
		if len(pins) != records {
			t.Fatalf("round %d: %d pins, %d pin records", round, len(pins), records)
		}
		for i := 1; i < 20; i += 2 {
			if !pins[recs[i].Key()] {
				t.Fatalf("round %d: acknowledged pinned block %d not pinned after the crash", round, i)
			}
		}
		s.Close()
	}
}

func crashRecords(seed int) []*tier.Record {
	// Large enough blocks that a kill often lands mid-write.
	l := tiertest.SmallLayout
	l.Layers, l.HeadDim = 8, 256
	return tiertest.Chain(digestA, rootA, l, 150, uint64(100+seed))
}

func crashChild() {
	seed, _ := strconv.Atoi(os.Getenv("STOCKPOT_DISK_CRASH_SEED"))
	s, err := Open(Config{Dir: os.Getenv("STOCKPOT_DISK_CRASH_CHILD"), CapacityBytes: 1 << 30, IdentityDigest: digestA})
	if err != nil {
		panic(err)
	}
	for i, it := range tiertest.Items(crashRecords(seed)) {
		if i%2 == 1 {
			it.PinTTL = time.Hour
		}
		if err := s.Put(ctx, []tier.Item{it}); err != nil {
			panic(err)
		}
		fmt.Println("ok") // acknowledged: renamed into place
	}
	time.Sleep(time.Minute)
}

// Start-up drops: a zero-length record file, a symlink to a real record elsewhere (under a
// record's name and under a temp name), a truncated record and a stray file beside good
// records. Open indexes the good ones alone, removes what it wrote or cannot use, never
// follows a link (the target is neither read, indexed nor removed), and counts each drop by
// reason, on the store and in its metric.
func TestStartupDropsCounted(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, digestA, 1<<20)
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 3, 5)
	items := tiertest.Items(recs)
	if err := s.Put(ctx, items[:2]); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// A real record elsewhere: item 2, written by another store of the same identity.
	elsewhere := open(t, t.TempDir(), digestA, 1<<20)
	if err := elsewhere.Put(ctx, items[2:3]); err != nil {
		t.Fatal(err)
	}
	elsewhere.Close()
	target := filepath.Join(elsewhere.Dir(), fileName(items[2].Key))
	want, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}

	empty := filepath.Join(s.Dir(), fileName(tier.Key{Root: rootA, Hash: prefix.Hash{1}}))
	short := filepath.Join(s.Dir(), fileName(tier.Key{Root: rootA, Hash: prefix.Hash{2}}))
	stray := filepath.Join(s.Dir(), "notes.txt")
	link := filepath.Join(s.Dir(), fileName(items[2].Key))
	tmpLink := filepath.Join(s.Dir(), tempPrefix+"link")
	for p, b := range map[string][]byte{empty: nil, short: []byte("SPDF"), stray: []byte("hello")} {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{link, tmpLink} {
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
	}

	reg := prometheus.NewPedanticRegistry()
	s = open(t, dir, digestA, 1<<20)
	defer s.Close()
	reg.MustRegister(s)

	has, _ := s.Contains(ctx, tiertest.Keys(recs))
	if w := []bool{true, true, false}; !equal(has, w) {
		t.Errorf("indexed %v, want %v (the linked record must not be indexed)", has, w)
	}
	if st := s.Stats(); st.Items != 2 {
		t.Errorf("items %d, want 2", st.Items)
	}
	for _, p := range []string{empty, short, stray} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s survived Open (err %v)", filepath.Base(p), err)
		}
	}
	for _, l := range []string{link, tmpLink} {
		if fi, err := os.Lstat(l); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s: link not left in place: %v %v", filepath.Base(l), fi, err)
		}
	}
	if got, err := os.ReadFile(target); err != nil || !bytes.Equal(got, want) {
		t.Errorf("link target changed or removed: err %v, %d bytes, want %d", err, len(got), len(want))
	}
	vals := get(t, s, []tier.Key{items[2].Key})
	if vals[0] != nil {
		t.Errorf("Get of the linked key returned %d bytes, want a miss", len(vals[0]))
	}

	wantDrops := map[string]uint64{DropEmpty: 1, DropTruncated: 1, DropSymlink: 2, DropNotRegular: 0,
		DropBadName: 1, DropTemp: 0, DropUnreadable: 0}
	got := s.StartupDrops()
	for r, n := range wantDrops {
		if got[r] != n {
			t.Errorf("StartupDrops[%s] = %d, want %d (all: %v)", r, got[r], n, got)
		}
	}
	if len(got) != len(wantDrops) {
		t.Errorf("StartupDrops has %d reasons, want %d: %v", len(got), len(wantDrops), got)
	}
	if got := gatherDrops(t, reg); fmt.Sprint(got) != fmt.Sprint(wantDrops) {
		t.Errorf("stockpot_kv_disk_startup_dropped_total %v, want %v", got, wantDrops)
	}
}

// gatherDrops reads stockpot_kv_disk_startup_dropped_total from g, by reason.
func gatherDrops(t *testing.T, g prometheus.Gatherer) map[string]uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "stockpot_kv_disk_startup_dropped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = uint64(m.GetCounter().GetValue())
		}
	}
	return out
}
