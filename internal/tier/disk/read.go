package disk

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"stockpot/internal/tier"
	"stockpot/internal/tier/crc32c"
)

// readers bounds the files one Get reads at once. A request's blocks are independent files:
// reading them one after another leaves the device idle during each file's checks and
// syscalls, and a virtio or NVMe device needs several reads in flight to reach its
// bandwidth. 8 saturated the virtio disk this was measured on (one read at a time: 1 GB/s
// with O_DIRECT); more only adds goroutines.
const readers = 8

// directAlign is the alignment O_DIRECT needs of the buffer, the file offset and the length
// (the logical block size, at most the 4 KiB page on the file systems we run on).
const directAlign = 4096

// readAll reads and checks the files of the found keys into out, on up to readers
// goroutines. A damaged file is deleted, counted and returned as Corrupted; a file gone since
// the index was read is a miss. It stops starting reads once ctx ends and then fails with
// ctx's error, unless every key was read. With check (GetChecked), check(i, v) stands in for
// the checksum pass over each value and checked[i] says it stood (readOne).
func (s *Store) readAll(ctx context.Context, keys []tier.Key, found []*entry, stamps []time.Time, out [][]byte, checked []bool, check func(int, []byte) error) error {
	idx := make([]int, 0, len(keys))
	for i, e := range found {
		if e == nil {
			s.count(false)
		} else {
			idx = append(idx, i)
		}
	}
	one := func(i int) {
		var c func([]byte) error
		if check != nil {
			c = func(v []byte) error { return check(i, v) }
		}
		out[i], checked[i] = s.readOne(keys[i], found[i], stamps[i], c)
	}
	if len(idx) == 1 {
		// One file: read it on the caller's goroutine. A reader that asks for one key at a
		// time (offload reads the disk tier so, verifying each block as it arrives) has its
		// own goroutines in flight; a handoff here would only add a wake-up per block, which
		// costs most on a loaded machine.
		one(idx[0])
		return nil
	}
	var next, done atomic.Int64
	var wg sync.WaitGroup
	for range min(readers, len(idx)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := int(next.Add(1) - 1); j < len(idx); j = int(next.Add(1) - 1) {
				if j > 0 && ctx.Err() != nil {
					return
				}
				one(idx[j])
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if int(done.Load()) < len(idx) {
		return ctx.Err()
	}
	return nil
}

// readOne reads and checks key k's file (entry e, touched at stamp). With check, the value is
// checked by check (the reader's verification) instead of the file checksum's pass over it,
// and the trailer is checked against the header's checksum combined with what a verified
// value's checksum must be (crc.go); checked reports that check's nil stands. A failed check
// falls back to the file checksum, so the file is judged damaged or not exactly as Get would.
func (s *Store) readOne(k tier.Key, e *entry, stamp time.Time, check func([]byte) error) (v []byte, checked bool) {
	path := filepath.Join(s.dir, fileName(k))
	b, err := s.readFile(path)
	if err != nil {
		// Removed by a concurrent Delete or eviction: a miss.
		s.count(false)
		return nil, false
	}
	if check == nil {
		v, err = s.parse(b, k)
	} else if v, err = s.parseFrame(b, k); err == nil {
		if check(v) == nil {
			checked = true
			if crcCombine(crc32c.Checksum(b[:headerSize]), recordResidue, len(v)) != binary.LittleEndian.Uint32(b[len(b)-trailerSize:]) {
				checked, err = false, errors.New("disk: checksum mismatch")
			}
		} else {
			v, err = s.parse(b, k) // the value is no intact record: is the file intact?
		}
	}
	if err != nil {
		s.mu.Lock()
		s.mu.corrupt++
		if s.mu.m[k] == e { // not replaced meanwhile by a Put
			s.removeLocked(e)
		}
		s.mu.Unlock()
		s.unlinkDoomed()
		s.count(false)
		return Corrupted, false
	}
	os.Chtimes(path, stamp, stamp) // persist recency for the next Open; best effort
	s.count(true)
	return v, checked
}

// readFile returns the whole file at path. A file wholly in the page cache is read buffered
// (a copy from memory, the fastest there is); one the page cache lacks, in full or in part,
// is read with O_DIRECT into an aligned buffer, straight from the device, without the page
// cache's extra copy and its readahead (a restored block is read once, then lives in the
// pool). cachestat(2) (Linux 6.5) tells which, without side effects: a read with RWF_NOWAIT
// would start readahead of the missing pages, and the device would read them twice. Where
// cachestat is missing reads stay buffered, and where the file system refuses O_DIRECT
// (some FUSE and network file systems, tmpfs before Linux 6.6: EINVAL) the store stops
// trying it.
func (s *Store) readFile(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	size := int(st.Size)
	full := (size + directAlign - 1) &^ (directAlign - 1)
	buf := s.buffer(full)
	n := 0
	if !s.noDirect.Load() && !cached(fd, size) {
		n = s.readDirect(fd, buf[:full], 0, size)
	}
	for n < size { // buffered
		m, err := unix.Pread(fd, buf[n:size], int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return nil, errors.New("disk: file shrank while read")
		}
		n += m
	}
	return buf[:size:size], nil
}

// noCachestat: the kernel has no cachestat(2) (ENOSYS); cached then always says yes.
var noCachestat atomic.Bool

// cached reports whether every page of fd's first size bytes is in the page cache (or that
// it cannot tell).
func cached(fd, size int) bool {
	if noCachestat.Load() {
		return true
	}
	var cs unix.Cachestat_t
	if err := unix.Cachestat(uint(fd), &unix.CachestatRange{Off: 0, Len: uint64(size)}, &cs, 0); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			noCachestat.Store(true)
		}
		return true
	}
	return cs.Cache >= uint64((size+pageSize-1)/pageSize)
}

// pageSize is the page cache's unit, for cached's count.
var pageSize = os.Getpagesize()

// readDirect reads [n, size) of fd with O_DIRECT from the aligned offset at or below n into
// buf (aligned, len a multiple of directAlign), and returns how far it got. It turns the
// store's O_DIRECT off (noDirect) when the file system refuses it; the caller reads the rest
// buffered.
func (s *Store) readDirect(fd int, buf []byte, n, size int) int {
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err == nil {
		err = setFlags(fd, fl|unix.O_DIRECT)
	}
	if err != nil {
		s.noDirect.Store(true)
		return n
	}
	off := n &^ (directAlign - 1)
	for off < size {
		m, err := unix.Pread(fd, buf[off:], int64(off))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || m == 0 {
			if errors.Is(err, unix.EINVAL) {
				s.noDirect.Store(true) // accepted by fcntl, refused by the read
			}
			setFlags(fd, fl)
			return max(n, off)
		}
		off += m
	}
	s.directReads.Add(1)
	return size
}

// setFlags sets fd's file status flags (F_SETFL). A variable so that tests can make a file
// system refuse O_DIRECT (Linux 6.6 and later accept it on tmpfs, the usual example).
var setFlags = func(fd, flags int) error {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags)
	return err
}

var _ tier.Recycler = (*Store)(nil)

// buffer returns an aligned read buffer of n bytes, a recycled one when it has one that size
// (every file of a store has the same size: one block's record). Its contents are garbage.
func (s *Store) buffer(n int) []byte {
	if p, ok := s.bufs.Get().(*[]byte); ok && len(*p) == n {
		return *p
	}
	return alignedBuffer(n)
}

// Recycle implements tier.Recycler: each value is a view of an aligned read buffer from
// headerSize bytes after its start (parse), so the buffer is found again from the value.
//
// REQUIRES: vals are values this Store's Get returned (nil and Corrupted are skipped); any
// other slice is a caller bug (panics when caught: a misaligned result).
func (s *Store) Recycle(vals [][]byte) {
	for _, v := range vals {
		if len(v) == 0 || unsafe.SliceData(v) == unsafe.SliceData(Corrupted) {
			continue
		}
		base := unsafe.Add(unsafe.Pointer(unsafe.SliceData(v)), -headerSize)
		if uintptr(base)&(directAlign-1) != 0 {
			panic("disk: Recycle of a value this store did not return")
		}
		full := (headerSize + len(v) + trailerSize + directAlign - 1) &^ (directAlign - 1)
		b := unsafe.Slice((*byte)(base), full)
		s.bufs.Put(&b)
	}
}

// alignedBuffer returns n bytes starting at a directAlign boundary.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	skip := int(-uintptr(unsafe.Pointer(&b[0])) & (directAlign - 1))
	return b[skip : skip+n : skip+n]
}
