package offload

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
	"stockpot/internal/tier/disk"
	"stockpot/internal/tier/hostmem"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

func recordBytes(r *tier.Record) int64 { return int64(len(tiertest.Encode(r))) }

// diskFileBytes is what one SmallLayout record costs the disk store (its file header and
// trailer included).
func diskFileBytes(r *tier.Record) int64 { return recordBytes(r) + 112 + 4 }

func openDisk(t *testing.T, dir string, capacity int64, fs disk.FS) *disk.Store {
	t.Helper()
	s, err := disk.Open(disk.Config{Dir: dir, CapacityBytes: capacity, IdentityDigest: identity, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func has(t *testing.T, s tier.Store, recs []*tier.Record) string {
	t.Helper()
	h, err := s.Contains(ctx, tiertest.Keys(recs))
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len(h))
	for i, ok := range h {
		b[i] = '.'
		if ok {
			b[i] = 'x'
		}
	}
	return string(b)
}

// Issue 17 in miniature: after a restart the disk is full of the blocks that survived it, the
// host tier (RAM) is empty and large; a pass of new prompts evicts their blocks down the
// tiers. Today's write-backs are shadowed by the host tier, so they do not push the survivors
// out before a lookup reaches them. When the host tier later evicts a block, the disk's copy
// becomes a sole copy (or the block is written there), and only then may it displace others.
func TestWriterShadowedWritesKeepSoleCopies(t *testing.T) {
	dir := t.TempDir()
	old := tiertest.Chain(identity, root, layout, 4, 20) // survived the crash
	fresh := tiertest.Chain(identity, root, layout, 12, 21)
	per := diskFileBytes(old[0])
	d := openDisk(t, dir, 6*per, nil)
	if err := d.Put(ctx, tiertest.Items(old)); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = openDisk(t, dir, 6*per, nil) // the restart: every file is a sole copy
	host, _ := hostmem.New(hostmem.Config{CapacityBytes: 8 * (recordBytes(old[0]) + 192)})
	w, _ := NewWriter(WriterConfig{Identity: identity, Layout: layout, MaxBatch: 1}, []TierStore{{kvtier.Host, host}, {kvtier.Disk, d}}, nil)
	for _, r := range fresh[:8] { // the host tier holds all 8
		w.Enqueue(evicted(r, 0, 0), r.KV)
	}
	w.Close()
	if got, want := has(t, d, old), "xxxx"; got != want {
		t.Errorf("survivors on disk after 8 shadowed write-backs: %s, want %s", got, want)
	}
	// Shadowed write-backs rotate through the room the survivors leave (the 2 most recent
	// stay, for a crash), evicting only each other.
	if got, want := has(t, d, fresh[:8]), "......xx"; got != want {
		t.Errorf("write-backs on disk: %s, want %s", got, want)
	}
	if st := d.Stats(); st.Declined != 0 || st.Evictions != 6 {
		t.Errorf("disk stats %+v, want 6 evictions among the write-backs", st)
	}

	// The host tier evicts 6, 7, 5 and 4 (least recent first, after a restore of 0-5): the
	// disk's copies of 6 and 7 become sole copies, not written again; 5 and 4 are written as
	// sole copies, displacing the least recently used survivors, 0 and 1.
	w, _ = NewWriter(WriterConfig{Identity: identity, Layout: layout, MaxBatch: 1}, []TierStore{{kvtier.Host, host}, {kvtier.Disk, d}}, nil)
	host.Get(ctx, tiertest.Keys(fresh[:6]))
	if err := host.Put(ctx, tiertest.Items(fresh[8:])); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if st := w.Stats(); st.Spilled[1] != 4 || st.Written[1] != 2 {
		t.Errorf("writer stats %+v: want 4 spilled to disk, 2 of them written (2 were held)", st)
	}
	if got, want := has(t, d, fresh[:8]), "....xxxx"; got != want {
		t.Errorf("disk after the host tier's evictions: %s, want %s", got, want)
	}
	if got, want := has(t, d, old), "..xx"; got != want {
		t.Errorf("survivors: %s, want %s (the two least recent gave way to the host's evictions)", got, want)
	}
	// Now every file is a sole copy: a shadowed write-back is declined, nothing evicted.
	host2, _ := hostmem.New(hostmem.Config{CapacityBytes: 1 << 20})
	w, _ = NewWriter(WriterConfig{Identity: identity, Layout: layout, MaxBatch: 1}, []TierStore{{kvtier.Host, host2}, {kvtier.Disk, d}}, nil)
	before := d.Stats()
	w.Enqueue(evicted(fresh[9], 0, 0), fresh[9].KV)
	w.Close()
	if st := d.Stats(); st.Declined != before.Declined+1 || st.Evictions != before.Evictions || has(t, d, old) != "..xx" {
		t.Errorf("a shadowed write-back into a disk of sole copies: stats %+v (before %+v), survivors %s", st, before, has(t, d, old))
	}
}

// failingStore fails each item's Put with itemErr(key) (joined), or every Put with batchErr.
type failingStore struct {
	tier.Store
	itemErr  func(k tier.Key) error
	batchErr error
	block    bool // wait for the context to end
}

func (f *failingStore) Put(ctx context.Context, items []tier.Item) error {
	if f.block {
		<-ctx.Done()
		return ctx.Err()
	}
	if f.batchErr != nil {
		return f.batchErr
	}
	var errs []error
	for _, it := range items {
		if err := f.itemErr(it.Key); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Every write that does not reach a tier is counted by tier and reason (issue 17: a full
// tmpfs under the disk tier failed writes and no metric showed it).
func TestWriteFailuresByReason(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := NewMetrics(reg)
	recs := tiertest.Chain(identity, root, layout, 4, 22)
	perItem := &failingStore{Store: memstore.New(), itemErr: func(k tier.Key) error {
		i := 0
		for i < len(recs) && recs[i].Key() != k {
			i++
		}
		switch i {
		case 0:
			return fmt.Errorf("disk: put: %w: %w", tier.ErrNoSpace, &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC})
		case 1:
			return tier.TooLarge(tier.Key{}, 10, 1)
		case 2:
			return errors.New("disk: put: input/output error")
		}
		return nil
	}}
	down := &failingStore{Store: memstore.New(), batchErr: fmt.Errorf("redis: %w", tier.ErrUnavailable)}
	stuck := &failingStore{Store: memstore.New(), block: true}
	w, _ := NewWriter(WriterConfig{Identity: identity, Layout: layout, MaxBatch: 4, QueueLen: 4, PutTimeout: 20 * time.Millisecond, Remote: WriteBack},
		[]TierStore{{kvtier.Disk, perItem}, {kvtier.Remote, down}, {kvtier.Host, stuck}}, m)
	for _, r := range recs {
		w.Enqueue(evicted(r, 0, 0), r.KV)
	}
	w.Close()
	want := map[[2]string]float64{
		{"disk", "no_space"}: 1, {"disk", "too_large"}: 1, {"disk", "io_error"}: 1, {"disk", "queue_full"}: 0,
		{"remote", "unavailable"}: 4, {"host", "timeout"}: 4,
	}
	for k, v := range want {
		if got := counterValue(m.failures.WithLabelValues(k[0], k[1])); got != v {
			t.Errorf("write failures{tier=%q,reason=%q} = %v, want %v", k[0], k[1], got, v)
		}
	}
	if st := w.Stats(); st.Failed[0] != 3 || st.Written[0] != 1 || st.Failed[1] != 4 || st.Failed[2] != 4 {
		t.Errorf("writer stats %+v, want disk 3 failed 1 written, remote and slow 4 failed", st)
	}

	// queue_full: a tier whose worker is stuck drops what its queue cannot hold.
	slow := &blockingStore{Store: memstore.New(), release: make(chan struct{})}
	m, _ = NewMetrics(prometheus.NewRegistry()) // fresh counters: the tier's label is reused
	w, _ = NewWriter(WriterConfig{Identity: identity, Layout: layout, QueueLen: 1, MaxBatch: 1}, []TierStore{{kvtier.Host, slow}}, m)
	for _, r := range tiertest.Chain(identity, root, layout, 6, 23) {
		w.Enqueue(evicted(r, 0, 0), r.KV)
	}
	close(slow.release)
	w.Close()
	dropped := w.Stats().Dropped[0]
	if got := counterValue(m.failures.WithLabelValues("host", "queue_full")); dropped == 0 || got != float64(dropped) {
		t.Errorf("queue_full = %v, want the %d dropped", got, dropped)
	}
}

// fullFS is a disk.FS over a file system of limit bytes (as an 8 MiB tmpfs under a larger
// --disk-cache-size): a write past the limit fails with ENOSPC.
type fullFS struct {
	dir   string
	limit int64
	hits  int
}

type fullFile struct {
	*os.File
	fs *fullFS
}

func (fs *fullFS) CreateTemp(dir, pattern string) (disk.File, error) {
	f, err := os.CreateTemp(dir, pattern)
	return fullFile{f, fs}, err
}

func (fs *fullFS) Rename(a, b string) error { return os.Rename(a, b) }

func (f fullFile) Write(b []byte) (int, error) {
	var used int64
	filepath.Walk(f.fs.dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			used += fi.Size()
		}
		return nil
	})
	if used+int64(len(b)) > f.fs.limit {
		f.fs.hits++
		return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return f.File.Write(b)
}

// A disk tier on a file system smaller than its budget: each write that meets ENOSPC evicts
// and is retried, and succeeds, so nothing fails; a file system with no room at all fails
// every write, counted as no_space.
func TestWriterDiskFull(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := NewMetrics(reg)
	dir := t.TempDir()
	recs := tiertest.Chain(identity, root, layout, 10, 24)
	fs := &fullFS{dir: dir, limit: 4 * diskFileBytes(recs[0])}
	d := openDisk(t, dir, 1<<20, fs)
	w, _ := NewWriter(WriterConfig{Identity: identity, Layout: layout}, []TierStore{{kvtier.Disk, d}}, m)
	for _, r := range recs {
		w.Enqueue(evicted(r, 0, 0), r.KV)
	}
	w.Close()
	if fs.hits == 0 || counterValue(m.failures.WithLabelValues("disk", "no_space")) != 0 || w.Stats().Written[0] != 10 {
		t.Errorf("%d ENOSPC, %v no_space failures, stats %+v: want ENOSPC met, every write retried and written",
			fs.hits, counterValue(m.failures.WithLabelValues("disk", "no_space")), w.Stats())
	}
	if got, want := has(t, d, recs), "......xxxx"; got != want {
		t.Errorf("disk holds %s, want %s (the 4 most recent)", got, want)
	}
	fs.limit = 0
	w, _ = NewWriter(WriterConfig{Identity: identity, Layout: layout}, []TierStore{{kvtier.Disk, d}}, m)
	more := tiertest.Chain(identity, root, layout, 3, 25)
	for _, r := range more {
		w.Enqueue(evicted(r, 0, 0), r.KV)
	}
	w.Close()
	if got := counterValue(m.failures.WithLabelValues("disk", "no_space")); got != 3 {
		t.Errorf("no_space = %v on a file system with no room, want 3", got)
	}
}

// stuckHost is a host tier whose Puts wait for release.
type stuckHost struct {
	*hostmem.Store
	release chan struct{}
}

func (s stuckHost) Put(ctx context.Context, items []tier.Item) error {
	<-s.release
	return s.Store.Put(ctx, items)
}

// A write-back the host tier dropped (its queue was full) is not shadowed on the disk: no
// tier above holds it, so the disk takes it as a sole copy.
func TestWriterUnshadowedWhenHostDrops(t *testing.T) {
	dir := t.TempDir()
	old := tiertest.Chain(identity, root, layout, 3, 26)
	fresh := tiertest.Chain(identity, root, layout, 3, 27)
	d := openDisk(t, dir, 3*diskFileBytes(old[0]), nil)
	d.Put(ctx, tiertest.Items(old)) // no tier above: sole copies, the disk is full
	h, _ := hostmem.New(hostmem.Config{CapacityBytes: 1 << 20})
	host := stuckHost{h, make(chan struct{})}
	w, _ := NewWriter(WriterConfig{Identity: identity, Layout: layout, QueueLen: 1, MaxBatch: 1}, []TierStore{{kvtier.Host, host}, {kvtier.Disk, d}}, nil)
	w.Enqueue(evicted(fresh[0], 0, 0), fresh[0].KV)
	for w.Stats().Written[1] == 0 || len(w.queues[0].ch) > 0 { // the disk declined it; the host worker is stuck on it
		time.Sleep(time.Millisecond)
	}
	w.Enqueue(evicted(fresh[1], 0, 0), fresh[1].KV) // fills the host queue
	w.Enqueue(evicted(fresh[2], 0, 0), fresh[2].KV) // dropped by the host
	close(host.release)
	w.Close()
	if st := w.Stats(); st.Dropped[0] != 1 {
		t.Fatalf("writer stats %+v, want the host to drop 1", st)
	}
	if got, want := has(t, d, fresh), "..x"; got != want {
		t.Errorf("disk holds %s of the write-backs, want %s (only the one the host dropped)", got, want)
	}
	if st := d.Stats(); st.Declined != 2 {
		t.Errorf("disk stats %+v, want the 2 shadowed write-backs declined", st)
	}
}
