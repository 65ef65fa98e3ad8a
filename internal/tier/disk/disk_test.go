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
	tiertest.Run(t, func(t *testing.T) tier.Store { return open(t, t.TempDir(), digestA, 64<<20) })
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

// Disk full: Put fails with ENOSPC, leaves no file, and the store serves
// exactly what it served before.
func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, digestA, 1<<20)
	defer s.Close()
	recs := tiertest.Chain(digestA, rootA, tiertest.SmallLayout, 3, 7)
	items := tiertest.Items(recs)
	s.Put(ctx, items[:1])
	s.write = func(f *os.File, bufs ...[]byte) error {
		f.Write(bufs[0][:10]) // a partial write, then the disk is full
		return syscall.ENOSPC
	}
	err := s.Put(ctx, items[1:])
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Put on a full disk: %v, want ENOSPC", err)
	}
	ents, _ := os.ReadDir(s.Dir())
	if len(ents) != 1 {
		t.Fatalf("%d files after failed writes, want 1", len(ents))
	}
	v := get(t, s, tiertest.Keys(recs))
	if v[0] == nil || v[1] != nil || v[2] != nil {
		t.Fatalf("after disk full: served %v", v)
	}
	s.write = writeAll
	if err := s.Put(ctx, items[1:]); err != nil {
		t.Fatalf("Put after space came back: %v", err)
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
		for _, e := range ents {
			if _, ok := parseName(e.Name()); !ok {
				t.Fatalf("round %d: %s left after Open", round, e.Name())
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
	for _, it := range tiertest.Items(crashRecords(seed)) {
		if err := s.Put(ctx, []tier.Item{it}); err != nil {
			panic(err)
		}
		fmt.Println("ok") // acknowledged: renamed into place
	}
	time.Sleep(time.Minute)
}
