package disk

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
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
}

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

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type entry struct {
	key        tier.Key
	size       int64  // file size
	prev, next *entry // LRU list; protected by Store.mu
}

// Store is the disk tier. Safe for concurrent use.
type Store struct {
	cfg  Config
	dir  string // DIR/<digest hex>
	lock *os.File

	// write writes a temp file's bytes; tests replace it to inject faults
	// (disk full).
	write func(f *os.File, bufs ...[]byte) error

	mu struct {
		sync.Mutex
		closed  bool
		m       map[tier.Key]*entry
		lru     entry // sentinel: next = most recent
		used    int64
		stats   tier.Stats
		corrupt uint64
	}
}

var _ tier.Store = (*Store)(nil)

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
	s := &Store{cfg: cfg, lock: lock, dir: filepath.Join(cfg.Dir, hex.EncodeToString(cfg.IdentityDigest[:])), write: writeAll}
	s.mu.m = make(map[tier.Key]*entry)
	s.mu.lru.next, s.mu.lru.prev = &s.mu.lru, &s.mu.lru
	if err := s.collectForeign(); err != nil {
		lock.Close()
		return nil, err
	}
	if err := s.rebuild(); err != nil {
		lock.Close()
		return nil, err
	}
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

func parseName(name string) (tier.Key, bool) {
	var k tier.Key
	if len(name) != 129+len(fileSuffix) || name[64] != '-' || !strings.HasSuffix(name, fileSuffix) {
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
// in modification-time order.
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
	for _, e := range ents {
		path := filepath.Join(s.dir, e.Name())
		key, ok := parseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			// Partial temp files of a crash, and anything we did not write.
			if e.Type().IsRegular() || strings.HasPrefix(e.Name(), tempPrefix) {
				os.Remove(path)
			}
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		if info.Size() < headerSize+trailerSize {
			os.Remove(path)
			continue
		}
		files = append(files, found{key, info.Size(), info.ModTime()})
	}
	slices.SortFunc(files, func(a, b found) int { return a.mtime.Compare(b.mtime) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range files {
		e := &entry{key: f.key, size: f.size}
		s.mu.m[f.key] = e
		s.pushFrontLocked(e)
		s.mu.used += f.size
	}
	for s.mu.used > s.cfg.CapacityBytes {
		s.evictLocked()
	}
	return nil
}

// REQUIRES: s.mu held.
func (s *Store) unlinkLocked(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

// REQUIRES: s.mu held; e unlinked.
func (s *Store) pushFrontLocked(e *entry) {
	e.prev, e.next = &s.mu.lru, s.mu.lru.next
	e.prev.next, e.next.prev = e, e
}

// removeLocked drops e from the index and unlinks its file.
// REQUIRES: s.mu held; e indexed.
func (s *Store) removeLocked(e *entry) {
	s.unlinkLocked(e)
	delete(s.mu.m, e.key)
	s.mu.used -= e.size
	os.Remove(filepath.Join(s.dir, fileName(e.key)))
}

// REQUIRES: s.mu held; the index is not empty.
func (s *Store) evictLocked() {
	s.removeLocked(s.mu.lru.prev)
	s.mu.stats.Evictions++
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
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([][]byte, len(keys))
	now := time.Now()
	for i, k := range keys {
		if i > 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.mu.Lock()
		e, ok := s.mu.m[k]
		if ok {
			s.unlinkLocked(e)
			s.pushFrontLocked(e)
		}
		s.mu.Unlock()
		if !ok {
			s.count(false)
			continue
		}
		path := filepath.Join(s.dir, fileName(k))
		b, err := os.ReadFile(path)
		if err != nil {
			// Removed by a concurrent Delete or eviction: a miss.
			s.count(false)
			continue
		}
		v, err := s.parse(b, k)
		if err != nil {
			s.mu.Lock()
			s.mu.corrupt++
			if s.mu.m[k] == e { // not replaced meanwhile by a Put
				s.removeLocked(e)
			}
			s.mu.Unlock()
			s.count(false)
			out[i] = Corrupted
			continue
		}
		os.Chtimes(path, now, now) // persist recency for the next Open; best effort
		out[i] = v
		s.count(true)
	}
	return out, nil
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
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(body):]) {
		return nil, errors.New("disk: checksum mismatch")
	}
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

func writeAll(f *os.File, bufs ...[]byte) error {
	for _, b := range bufs {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return nil
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
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := s.put(it); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Store) put(it tier.Item) error {
	size := int64(headerSize + len(it.Value) + trailerSize)
	if size > s.cfg.CapacityBytes {
		return tier.TooLarge(it.Key, size, s.cfg.CapacityBytes)
	}
	f, err := os.CreateTemp(s.dir, tempPrefix+"*")
	if err != nil {
		return fmt.Errorf("disk: put %s: %w", it.Key, err)
	}
	tmp := f.Name()
	h := s.header(it.Key, len(it.Value))
	crc := crc32.Update(crc32.Checksum(h, castagnoli), castagnoli, it.Value)
	err = s.write(f, h, it.Value, binary.LittleEndian.AppendUint32(nil, crc))
	if err == nil && s.cfg.Sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("disk: put %s (%d bytes): %w", it.Key, size, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		os.Remove(tmp)
		return tier.ErrClosed
	}
	if old, ok := s.mu.m[it.Key]; ok {
		s.unlinkLocked(old)
		delete(s.mu.m, it.Key)
		s.mu.used -= old.size // the rename below replaces its file
	}
	for s.mu.used+size > s.cfg.CapacityBytes {
		s.evictLocked()
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, fileName(it.Key))); err != nil {
		os.Remove(tmp)
		os.Remove(filepath.Join(s.dir, fileName(it.Key))) // the old value, now unindexed
		return fmt.Errorf("disk: put %s: %w", it.Key, err)
	}
	if s.cfg.Sync {
		syncDir(s.dir)
	}
	e := &entry{key: it.Key, size: size}
	s.mu.m[it.Key] = e
	s.pushFrontLocked(e)
	s.mu.used += size
	return nil
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
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		if e, ok := s.mu.m[k]; ok {
			s.removeLocked(e)
		}
	}
	return nil
}

// Contains answers from the index; it does not touch the files or the LRU
// order.
func (s *Store) Contains(ctx context.Context, keys []tier.Key) ([]bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		_, out[i] = s.mu.m[k]
	}
	return out, nil
}

func (s *Store) Stats() tier.Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.mu.stats
	st.UsedBytes = s.mu.used
	st.CapacityBytes = s.cfg.CapacityBytes
	st.Items = int64(len(s.mu.m))
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
