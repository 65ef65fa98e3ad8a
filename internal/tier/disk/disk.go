package disk

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/crc32c"
	"stockpot/internal/tier/lru"
)

// Config configures a Store.
type Config struct {
	// Dir is the cache directory (--disk-cache). Created if missing.
	Dir string
	// CapacityBytes is the budget for file bytes (--disk-cache-size). > 0.
	CapacityBytes int64
	// IdentityDigest is the identity.Descriptor digest of the served model.
	// Records of any other digest are collected at Open. Must be nonzero.
	IdentityDigest [32]byte
	// Sync fsyncs each file and the directory before it is visible, for
	// durability across power loss. Off by default: see the package doc.
	Sync bool
	// FS is what block files are written through; nil is the OS. Tests wrap it to
	// inject faults (a file system smaller than the budget).
	FS FS
	// Now is the clock of recency stamps and pin expiry; nil is time.Now. Tests set a test
	// clock.
	Now func() time.Time
}

// FS creates and renames the store's files. Reads, listing and removal go to the OS
// directly: the seam is for the faults of the write path (a full disk).
type FS interface {
	CreateTemp(dir, pattern string) (File, error)
	Rename(oldpath, newpath string) error
}

// File is a temp file being written.
type File interface {
	io.Writer
	Name() string
	Sync() error
	Close() error
}

type osFS struct{}

func (osFS) CreateTemp(dir, pattern string) (File, error) { return os.CreateTemp(dir, pattern) }
func (osFS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }

// DefaultConfig returns a 10 GiB budget; Dir and IdentityDigest must be set.
func DefaultConfig() Config { return Config{CapacityBytes: 10 << 30} }

func (c Config) validate() (Config, error) {
	switch {
	case c.Dir == "":
		return c, errors.New("disk: Config.Dir is empty")
	case c.CapacityBytes <= 0:
		return c, fmt.Errorf("disk: capacity %d bytes must be > 0", c.CapacityBytes)
	case c.IdentityDigest == [32]byte{}:
		return c, errors.New("disk: Config.IdentityDigest is zero")
	}
	if c.FS == nil {
		c.FS = osFS{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// ErrLocked is returned by Open when another process holds the directory.
var ErrLocked = errors.New("disk: cache directory in use by another process")

const (
	fileMagic   = "SPDF"
	fileVersion = 1
	headerSize  = 4 + 2 + 2 + 32 + 32 + 32 + 8 // 112
	trailerSize = 4
	fileSuffix  = ".kv"
	tempPrefix  = ".tmp-"
	lockName    = "LOCK"
)

type entry struct {
	key  tier.Key
	size int64 // file size
	sole bool  // no faster tier holds it (see tier.Item.Shadowed); picks its LRU list
	// owner is tier.Item.Owner (owners.go); 0: none, and after a restart (not on disk).
	owner uint16
	node  lru.Node[*entry] // in its class's LRU list, or in Store.mu.pins while pinned; protected by Store.mu
}

// Store is the disk tier. Safe for concurrent use.
type Store struct {
	cfg                  Config
	dir                  string // DIR/<digest hex>
	lock                 *os.File
	tier.Guarded         // SetOwnerLimit, OwnerBytes: s.mu.owners under s.mu (owners.go)
	tier.Indexed[*entry] // Keys, Contains: s.mu.m under s.mu (index only: no file is read)

	mu struct {
		sync.Mutex
		closed bool
		m      map[tier.Key]*entry
		// One LRU list per class of unpinned entries (front: the most recent). Eviction takes
		// the shadowed list's back first; a shadowed Put never takes from the sole list.
		shadowed, sole lru.List[*entry]
		// pins holds the pinned entries, by expiry, out of both lists: never evicted. An
		// entry is pinned iff its pin record (pinName) exists, but for a crash in between.
		pins lru.Pins[*entry]
		// used = the sum of indexed file sizes = soleBytes (unpinned sole copies) +
		// pinnedBytes + the unpinned shadowed entries' bytes.
		used, soleBytes, pinnedBytes int64
		stats                        tier.Stats
		corrupt                      uint64
		// clock is the last modification time given to a file (see tickLocked).
		clock time.Time
		// owners: per-owner bytes and limits (owners.go).
		owners tier.OwnerBudgets
		// doomed: paths to unlink once the lock is released; unlinking: paths being
		// unlinked now, with how many unlinks of each are in flight (unlink.go).
		doomed    []string
		unlinking map[string]int
	}
	// unlinked is signalled (on s.mu) when unlinks in flight end (settleLocked waits on it).
	unlinked *sync.Cond
	// noDirect: the file system refused O_DIRECT once; reads stay buffered (read.go).
	noDirect atomic.Bool
	// directReads counts files whose uncached part was read with O_DIRECT (tests, benchmarks).
	directReads atomic.Uint64
	// bufs holds read buffers handed back by Recycle (*[]byte, aligned; read.go).
	bufs sync.Pool
	// drops counts the directory entries rebuild did not index, by reason (startup.go).
	// Written only by Open, read-only after.
	drops map[string]uint64
}

var (
	_ tier.Store  = (*Store)(nil)
	_ tier.Pinner = (*Store)(nil)
	_ tier.Lister = (*Store)(nil)
)

// Open opens (creating if needed) the store in cfg.Dir: it takes the
// directory lock, removes partial temp files and other identities' records,
// and rebuilds the index from the files present, evicting the oldest if they
// exceed the budget.
func Open(cfg Config) (*Store, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(cfg.Dir, lockName), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%w: %s: %v", ErrLocked, cfg.Dir, err)
	}
	s := &Store{cfg: cfg, lock: lock, dir: filepath.Join(cfg.Dir, hex.EncodeToString(cfg.IdentityDigest[:]))}
	s.Guarded = tier.Guarded{L: &s.mu, B: &s.mu.owners}
	s.Indexed = tier.Indexed[*entry]{L: &s.mu, Index: func() (map[tier.Key]*entry, error) {
		if s.mu.closed {
			return nil, tier.ErrClosed
		}
		return s.mu.m, nil
	}}
	s.mu.m = make(map[tier.Key]*entry)
	s.mu.unlinking = map[string]int{}
	s.unlinked = sync.NewCond(&s.mu)
	if err := s.collectForeign(); err != nil {
		lock.Close()
		return nil, err
	}
	if err := s.rebuild(); err != nil {
		lock.Close()
		return nil, err
	}
	s.unlinkDoomed() // what rebuild evicted past the budget
	return s, nil
}

// collectForeign removes DIR/<digest> directories of other digests.
func (s *Store) collectForeign() error {
	ents, err := os.ReadDir(s.cfg.Dir)
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	own := filepath.Base(s.dir)
	for _, e := range ents {
		if !e.IsDir() || e.Name() == own || !isHex(e.Name(), 64) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(s.cfg.Dir, e.Name())); err != nil {
			return fmt.Errorf("disk: collecting foreign identity %s: %w", e.Name()[:12], err)
		}
	}
	return nil
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// fileName is "<root hex>-<hash hex>.kv".
func fileName(k tier.Key) string {
	var b [64 + 1 + 64 + len(fileSuffix)]byte
	hex.Encode(b[:64], k.Root[:])
	b[64] = '-'
	hex.Encode(b[65:129], k.Hash[:])
	copy(b[129:], fileSuffix)
	return string(b[:])
}

func parseName(name string) (tier.Key, bool) { return parseKeyName(name, fileSuffix) }

// parseKeyName parses "<root hex>-<hash hex><suffix>".
func parseKeyName(name, suffix string) (tier.Key, bool) {
	var k tier.Key
	if len(name) != 129+len(suffix) || name[64] != '-' || !strings.HasSuffix(name, suffix) {
		return k, false
	}
	if _, err := hex.Decode(k.Root[:], []byte(name[:64])); err != nil {
		return k, false
	}
	if _, err := hex.Decode(k.Hash[:], []byte(name[65:129])); err != nil {
		return k, false
	}
	return k, true
}

// rebuild lists s.dir, removes temp files and strays, and indexes the rest
// in modification-time order; block files with a valid, unexpired pin record are pinned
// until their last use (mtime) + the recorded TTL, the other pin records are removed.
func (s *Store) rebuild() error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	type found struct {
		key   tier.Key
		size  int64
		mtime time.Time
	}
	var files []found
	pinFiles := map[tier.Key]bool{}
	s.drops = map[string]uint64{}
	// e.Type() comes from the listing (lstat semantics): a symlink is seen as one, never
	// followed, and only its own name would ever be unlinked (it is not).
	for _, e := range ents {
		path := filepath.Join(s.dir, e.Name())
		switch t := e.Type(); {
		case t&fs.ModeSymlink != 0:
			s.drops[DropSymlink]++
			continue
		case !t.IsRegular():
			s.drops[DropNotRegular]++
			continue
		}
		if key, ok := parsePinName(e.Name()); ok {
			pinFiles[key] = true
			continue
		}
		key, ok := parseName(e.Name())
		if !ok {
			// Partial temp files of a crash, and anything we did not write.
			if strings.HasPrefix(e.Name(), tempPrefix) {
				s.drops[DropTemp]++
			} else {
				s.drops[DropBadName]++
			}
			os.Remove(path)
			continue
		}
		info, err := e.Info()
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // else removed meanwhile
				s.drops[DropUnreadable]++
			}
			continue
		}
		if info.Size() < headerSize+trailerSize {
			if info.Size() == 0 {
				s.drops[DropEmpty]++
			} else {
				s.drops[DropTruncated]++
			}
			os.Remove(path)
			continue
		}
		files = append(files, found{key, info.Size(), info.ModTime()})
	}
	slices.SortStableFunc(files, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range files {
		// Whatever a faster tier held died with the process: every file is a sole copy.
		e := &entry{key: f.key, size: f.size, sole: true}
		s.insertLocked(e)
		if !pinFiles[f.key] {
			continue
		}
		delete(pinFiles, f.key)
		ttl, err := readPin(filepath.Join(s.dir, pinName(f.key)), f.key)
		if expires := f.mtime.Add(ttl); err != nil || !expires.After(now) {
			s.doomLocked(filepath.Join(s.dir, pinName(f.key))) // torn, or expired while down
			continue
		}
		last := f.mtime
		if last.After(now) {
			last = now // a clock that went back: never more than the TTL left
		}
		s.pinLocked(e, ttl, last.Add(ttl))
	}
	for k := range pinFiles { // a pin record without its block
		s.doomLocked(filepath.Join(s.dir, pinName(k)))
	}
	for s.mu.used > s.cfg.CapacityBytes {
		if s.evictLocked(true) == 0 {
			// Only pins left over a budget made smaller: the budget wins, the pin that would
			// expire first goes.
			s.removeLocked(s.mu.pins.First().Value)
			s.mu.stats.Evictions++
		}
	}
	return nil
}

// tickLocked returns the modification time for the next file written or touched: now, but
// strictly after the last one. File times are set explicitly, to the nanosecond, because the
// kernel stamps writes with a coarse clock (a tick of milliseconds): the dozens of blocks of
// one write-back batch would tie, and the LRU order rebuilt at Open, chain heads after their
// tails, would be lost.
// REQUIRES: s.mu held.
func (s *Store) tickLocked() time.Time {
	now := s.cfg.Now()
	if !now.After(s.mu.clock) {
		now = s.mu.clock.Add(time.Nanosecond)
	}
	s.mu.clock = now
	return now
}

// listLocked returns the LRU list of e's class.
// REQUIRES: s.mu held.
func (s *Store) listLocked(e *entry) *lru.List[*entry] {
	if e.sole {
		return &s.mu.sole
	}
	return &s.mu.shadowed
}

// unlinkLocked takes an unpinned e out of its class's list (and soleBytes).
// REQUIRES: s.mu held; e in the list of its class (change e.sole only while unlinked or pinned).
func (s *Store) unlinkLocked(e *entry) {
	s.listLocked(e).Remove(&e.node)
	if e.sole {
		s.mu.soleBytes -= e.size
	}
}

// linkLocked puts e into its class's list, as the most recent (front) or the least.
// REQUIRES: s.mu held; e unlinked and not pinned.
func (s *Store) linkLocked(e *entry, front bool) {
	e.node.Value = e
	if front {
		s.listLocked(e).PushFront(&e.node)
	} else {
		s.listLocked(e).PushBack(&e.node)
	}
	if e.sole {
		s.mu.soleBytes += e.size
	}
}

func (s *Store) pinnedLocked(e *entry) bool { return s.mu.pins.Pinned(&e.node) }

// pinnedWithLocked reports whether e (nil: no entry) is pinned with ttl, so that its pin
// record holds ttl.
// REQUIRES: s.mu held.
func (s *Store) pinnedWithLocked(e *entry, ttl time.Duration) bool {
	if e == nil || !s.pinnedLocked(e) {
		return false
	}
	t, _ := s.mu.pins.TTL(&e.node)
	return t == ttl
}

// pinLocked pins e (or repins it) until expires, in memory only (the caller writes the pin
// record).
// REQUIRES: s.mu held; e indexed; ttl > 0.
func (s *Store) pinLocked(e *entry, ttl time.Duration, expires time.Time) {
	if !s.pinnedLocked(e) {
		s.unlinkLocked(e)
		s.mu.pinnedBytes += e.size
	}
	s.mu.pins.PinUntil(&e.node, ttl, expires)
}

// unpinLocked ends e's pin and removes its pin record; e is linked into its class's list
// (front or back) if link.
// REQUIRES: s.mu held; e pinned.
func (s *Store) unpinLocked(e *entry, link, front bool) {
	s.mu.pins.Unpin(&e.node)
	s.mu.pinnedBytes -= e.size
	s.doomLocked(filepath.Join(s.dir, pinName(e.key)))
	if link {
		s.linkLocked(e, front)
	}
}

// expiredLocked ends a pin that expired: the entry becomes the least recent of its class (the
// earliest expired last) and its pin record is removed.
// REQUIRES: s.mu held.
func (s *Store) expiredLocked(n *lru.Node[*entry]) {
	e := n.Value
	s.mu.pinnedBytes -= e.size
	s.doomLocked(filepath.Join(s.dir, pinName(e.key)))
	s.linkLocked(e, false)
}

// sweepNowLocked ends the pins expired now and returns how many; without pins it reads no
// clock, and one comparison (the heap's top) when none expired.
// REQUIRES: s.mu held.
func (s *Store) sweepNowLocked() int {
	_, n := s.mu.pins.ExpireNow(s.cfg.Now, s.expiredLocked)
	return n
}

// insertLocked indexes e as the most recent of its class.
// REQUIRES: s.mu held; e.key not indexed.
func (s *Store) insertLocked(e *entry) {
	s.mu.m[e.key] = e
	s.linkLocked(e, true)
	s.mu.used += e.size
	s.mu.owners.Add(e.owner, e.size)
}

// dropLocked unindexes e, pinned or not; its files stay (the caller removes or replaces
// them).
// REQUIRES: s.mu held; e indexed.
func (s *Store) dropLocked(e *entry) {
	if s.pinnedLocked(e) {
		s.mu.pins.Unpin(&e.node)
		s.mu.pinnedBytes -= e.size
	} else {
		s.unlinkLocked(e)
	}
	delete(s.mu.m, e.key)
	s.mu.used -= e.size
	s.mu.owners.Add(e.owner, -e.size)
}

// removeLocked drops e from the index and dooms its file and pin record: they are unlinked
// once the lock is released (unlink.go).
// REQUIRES: s.mu held; e indexed.
func (s *Store) removeLocked(e *entry) {
	pinned := s.pinnedLocked(e)
	s.dropLocked(e)
	s.doomLocked(filepath.Join(s.dir, fileName(e.key)))
	if pinned {
		s.doomLocked(filepath.Join(s.dir, pinName(e.key)))
	}
}

// evictLocked evicts the least recently used shadowed entry, or, if there is none and sole
// allows, the least recently used sole copy; never a pin. It reports the bytes freed (0:
// nothing it may evict).
// REQUIRES: s.mu held.
func (s *Store) evictLocked(sole bool) int64 {
	n := s.mu.shadowed.Back()
	if n == nil {
		if n = s.mu.sole.Back(); !sole || n == nil {
			return 0
		}
	}
	victim := n.Value
	if s.mu.owners.AnyOver() {
		victim = s.overOwnerVictimLocked(sole, victim)
	}
	s.removeLocked(victim)
	s.mu.stats.Evictions++
	return victim.size
}

// roomLocked reports whether an item of size bytes fits once old (the entry it replaces, or
// nil) is gone: no item may count on evicting a pin, and a shadowed unpinned one (sole and
// pinned false) only on evicting shadowed entries.
// REQUIRES: s.mu held.
func (s *Store) roomLocked(size int64, sole, pinned bool, old *entry) bool {
	keep := s.mu.pinnedBytes
	if old != nil && s.pinnedLocked(old) {
		keep -= old.size
	}
	if !sole && !pinned {
		keep += s.mu.soleBytes
		if old != nil && old.sole && !s.pinnedLocked(old) {
			keep -= old.size
		}
	}
	return keep+size <= s.cfg.CapacityBytes
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return tier.ErrClosed
	}
	return nil
}

// Corrupted is what Get returns for a damaged file: never a valid record.
var Corrupted = []byte("stockpot: damaged block file")

// Get reads each key's file and checks it. A damaged file is deleted and counted (see Corrupt),
// and Corrupted is returned in its place: a value that fails every record check, so the reader
// counts the discard against the request that found it (reason "checksum") and recomputes.
func (s *Store) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	out, _, err := s.get(ctx, keys, nil)
	return out, err
}

var _ tier.CheckedGetter = (*Store)(nil)

// GetChecked implements tier.CheckedGetter: Get, with the reader's check of each value in
// place of the file checksum's pass over it (readOne).
func (s *Store) GetChecked(ctx context.Context, keys []tier.Key, check func(i int, v []byte) error) ([][]byte, []bool, error) {
	return s.get(ctx, keys, check)
}

func (s *Store) get(ctx context.Context, keys []tier.Key, check func(int, []byte) error) ([][]byte, []bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, err
	}
	out := make([][]byte, len(keys))
	checked := make([]bool, len(keys))
	// Touch the keys last to first: a batch is a prefix in order, so its head ends the most
	// recent and eviction takes the chain from its tail (a chain without its head is useless).
	found := make([]*entry, len(keys))
	stamps := make([]time.Time, len(keys))
	s.mu.Lock()
	s.sweepNowLocked()
	for i := len(keys) - 1; i >= 0; i-- {
		if e, ok := s.mu.m[keys[i]]; ok {
			found[i], stamps[i] = e, s.tickLocked()
			if s.pinnedLocked(e) {
				// A use refreshes the pin: expiry = this stamp (the file's mtime) + TTL.
				s.mu.pins.Touch(&e.node, stamps[i])
			} else {
				s.listLocked(e).MoveToFront(&e.node)
			}
		}
	}
	s.mu.Unlock()
	s.unlinkDoomed() // pins that expired (sweepNowLocked)
	if err := s.readAll(ctx, keys, found, stamps, out, checked, check); err != nil {
		return nil, nil, err
	}
	return out, checked, nil
}

func (s *Store) count(hit bool) {
	s.mu.Lock()
	if hit {
		s.mu.stats.Hits++
	} else {
		s.mu.stats.Misses++
	}
	s.mu.Unlock()
}

// parse checks a file's bytes and returns the value inside (aliasing b).
func (s *Store) parse(b []byte, k tier.Key) ([]byte, error) {
	if len(b) < headerSize+trailerSize {
		return nil, fmt.Errorf("disk: %d bytes, shorter than a header", len(b))
	}
	body := b[:len(b)-trailerSize]
	if crc32c.Checksum(body) != binary.LittleEndian.Uint32(b[len(body):]) {
		return nil, errors.New("disk: checksum mismatch")
	}
	return s.parseFrame(b, k)
}

// parseFrame is parse without the checksum: the header's fields and the length.
func (s *Store) parseFrame(b []byte, k tier.Key) ([]byte, error) {
	if len(b) < headerSize+trailerSize {
		return nil, fmt.Errorf("disk: %d bytes, shorter than a header", len(b))
	}
	body := b[:len(b)-trailerSize]
	if string(b[:4]) != fileMagic || binary.LittleEndian.Uint16(b[4:]) != fileVersion {
		return nil, errors.New("disk: bad magic or version")
	}
	if [32]byte(b[8:40]) != s.cfg.IdentityDigest || prefix.Hash(b[40:72]) != k.Root || prefix.Hash(b[72:104]) != k.Hash {
		return nil, errors.New("disk: file of another identity or key")
	}
	if n := binary.LittleEndian.Uint64(b[104:]); n != uint64(len(body)-headerSize) {
		return nil, fmt.Errorf("disk: value length %d, file holds %d", n, len(body)-headerSize)
	}
	return body[headerSize:len(body):len(body)], nil
}

func (s *Store) header(k tier.Key, n int) []byte {
	h := make([]byte, 0, headerSize)
	h = append(h, fileMagic...)
	h = binary.LittleEndian.AppendUint16(h, fileVersion)
	h = binary.LittleEndian.AppendUint16(h, 0)
	h = append(h, s.cfg.IdentityDigest[:]...)
	h = append(h, k.Root[:]...)
	h = append(h, k.Hash[:]...)
	return binary.LittleEndian.AppendUint64(h, uint64(n))
}

// Put writes each item to a temp file and renames it into place, evicting
// least recently used files first to stay within the budget. A failed write
// (disk full) leaves nothing behind; the error says which key, and the other
// items are still written.
func (s *Store) Put(ctx context.Context, items []tier.Item) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	var errs []error
	for i, it := range items {
		if err := ctx.Err(); err != nil {
			for range items[i:] { // one error per item not written (tier.Store.Put)
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		}
		if err := s.put(it); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// put stores one item: a temp file, then (room made under the lock) a rename into place. A
// full file system (ENOSPC: the disk is smaller than the budget, or shared) evicts from this
// store's own LRU, as much as the item needs, and retries once.
func (s *Store) put(it tier.Item) error {
	size := int64(headerSize + len(it.Value) + trailerSize)
	if size > s.cfg.CapacityBytes {
		return tier.TooLarge(it.Key, size, s.cfg.CapacityBytes)
	}
	sole := !it.Shadowed
	defer s.unlinkDoomed() // what it evicted, after every unlock below
	s.mu.Lock()
	s.sweepNowLocked()
	old := s.mu.m[it.Key]
	pinned := it.PinTTL > 0 || (old != nil && s.pinnedLocked(old))
	fits := s.roomLocked(size, sole, pinned, old)
	record := it.PinTTL > 0 && !s.pinnedWithLocked(old, it.PinTTL) // else its record stands
	if !fits {
		s.mu.stats.Declined++
	}
	s.mu.Unlock()
	if !fits {
		return nil // keeping it would cost a pin, or (shadowed) a sole copy
	}
	var pinTmp string // the new pin record, when the TTL is new
	if record {
		var err error
		if pinTmp, err = s.writePinTemp(it.Key, it.PinTTL); err != nil {
			return fmt.Errorf("disk: put %s: pin record: %w", it.Key, noSpace(err))
		}
	}
	defer func() {
		if pinTmp != "" {
			os.Remove(pinTmp) // not renamed into place
		}
	}()
	tmp, err := s.writeTemp(it, size)
	if isNoSpace(err) {
		s.mu.Lock()
		var freed int64
		for freed < size {
			n := s.evictLocked(sole || pinned)
			if n == 0 {
				break
			}
			freed += n
		}
		s.mu.Unlock()
		s.unlinkDoomed() // the space comes back only once the files are gone
		if freed > 0 {
			tmp, err = s.writeTemp(it, size)
		}
	}
	if err != nil {
		if isNoSpace(err) {
			return fmt.Errorf("disk: put %s (%d bytes): %w: %w", it.Key, size, tier.ErrNoSpace, err)
		}
		return fmt.Errorf("disk: put %s (%d bytes): %w", it.Key, size, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// No unlink of what this rename replaces may come after it (unlink.go).
	s.settleLocked(filepath.Join(s.dir, fileName(it.Key)))
	s.settleLocked(filepath.Join(s.dir, pinName(it.Key)))
	if s.mu.closed {
		s.doomLocked(tmp)
		return tier.ErrClosed
	}
	s.sweepNowLocked()
	old = s.mu.m[it.Key]
	ttl := it.PinTTL
	if ttl <= 0 && old != nil && s.pinnedLocked(old) {
		ttl, _ = s.mu.pins.TTL(&old.node) // a write-back keeps the pin and its record
	}
	if !s.roomLocked(size, sole, ttl > 0, old) { // sole copies or pins came in meanwhile
		s.doomLocked(tmp)
		s.mu.stats.Declined++
		return nil
	}
	oldPinned := old != nil && s.pinnedLocked(old)
	recordStands := s.pinnedWithLocked(old, ttl)
	if old != nil {
		s.dropLocked(old) // the rename below replaces its file
	}
	for s.mu.used+size > s.cfg.CapacityBytes {
		s.evictLocked(sole || ttl > 0) // roomLocked guarantees this ends
	}
	ts := s.tickLocked()
	os.Chtimes(tmp, ts, ts) // recency (and a pin's last use) for the next Open; best effort
	if err := s.cfg.FS.Rename(tmp, filepath.Join(s.dir, fileName(it.Key))); err != nil {
		s.doomLocked(tmp)
		s.doomLocked(filepath.Join(s.dir, fileName(it.Key))) // the old value, now unindexed
		if oldPinned {
			s.doomLocked(filepath.Join(s.dir, pinName(it.Key)))
		}
		return fmt.Errorf("disk: put %s: %w", it.Key, noSpace(err))
	}
	e := &entry{key: it.Key, size: size, sole: sole, owner: it.Owner}
	s.insertLocked(e)
	var pinErr error
	if ttl > 0 {
		s.pinLocked(e, ttl, ts.Add(ttl))
		if pinTmp == "" && !recordStands { // the pin changed meanwhile: write its record now
			var err error
			if pinTmp, err = s.writePinTemp(it.Key, ttl); err != nil {
				pinErr = fmt.Errorf("disk: put %s: pin record (pinned until a restart): %w", it.Key, noSpace(err))
			}
		}
		if pinTmp != "" {
			// After the block: a crash in between loses the pin, never the block.
			if err := s.cfg.FS.Rename(pinTmp, filepath.Join(s.dir, pinName(it.Key))); err != nil {
				pinErr = fmt.Errorf("disk: put %s: pin record (pinned until a restart): %w", it.Key, noSpace(err))
			} else {
				pinTmp = ""
			}
		}
	}
	if s.cfg.Sync {
		syncDir(s.dir)
	}
	return pinErr
}

// noSpace wraps tier.ErrNoSpace around a full file system's error.
func noSpace(err error) error {
	if isNoSpace(err) {
		return fmt.Errorf("%w: %w", tier.ErrNoSpace, err)
	}
	return err
}

// writeTemp writes it to a new temp file and returns its path; on error nothing is left.
func (s *Store) writeTemp(it tier.Item, size int64) (string, error) {
	h := s.header(it.Key, len(it.Value))
	crc := crc32c.Update(crc32c.Checksum(h), it.Value)
	return s.writeTempFile(h, it.Value, binary.LittleEndian.AppendUint32(nil, crc))
}

// writeTempFile writes the parts, in order, to a new temp file in the store's folder (synced
// when the store syncs) and returns its path; on error nothing is left. Block files and pin
// records are both made this way, then renamed into place.
func (s *Store) writeTempFile(parts ...[]byte) (string, error) {
	f, err := s.cfg.FS.CreateTemp(s.dir, tempPrefix+"*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	for _, b := range parts {
		if err == nil {
			_, err = f.Write(b)
		}
	}
	if err == nil && s.cfg.Sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

func (s *Store) Delete(ctx context.Context, keys []tier.Key) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	defer s.unlinkDoomed() // after the unlock below
	s.mu.Lock()
	defer s.mu.Unlock()
	tier.Each(s.mu.m, keys, s.removeLocked)
	return nil
}

// Unshadow implements tier.Unshadower: the keys it holds become sole copies (the most recent
// of that class: the faster tier has just let them go).
func (s *Store) Unshadow(ctx context.Context, keys []tier.Key) ([]bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		e, ok := s.mu.m[k]
		if !ok {
			continue
		}
		out[i] = true
		if s.pinnedLocked(e) {
			e.sole = true // its class once the pin ends
			continue
		}
		s.unlinkLocked(e)
		e.sole = true
		s.linkLocked(e, true)
	}
	return out, nil
}

var _ tier.Unshadower = (*Store)(nil)

func (s *Store) Stats() tier.Stats {
	defer s.unlinkDoomed() // after the unlock below: pins that expired
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepNowLocked()
	st := s.mu.stats
	st.UsedBytes = s.mu.used
	st.CapacityBytes = s.cfg.CapacityBytes
	st.Items = int64(len(s.mu.m))
	st.PinnedItems, st.PinnedBytes = int64(s.mu.pins.Len()), s.mu.pinnedBytes
	return st
}

// Corrupt returns how many damaged files Get found (and deleted).
func (s *Store) Corrupt() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.corrupt
}

// Dir returns the directory holding this identity's files.
func (s *Store) Dir() string { return s.dir }

// Close releases the directory lock. Files stay for the next Open.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	return s.lock.Close() // closing the descriptor drops the flock
}
