package disk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/crc32c"
)

// A pin record is the file "<root hex>-<hash hex>.pin" next to its block file:
//
//	"SPPN" u16 version u16 0, root [32], hash [32], i64 TTL in nanoseconds,
//	u32 CRC-32C of all the bytes before it
//
// It holds the TTL only: the pin's last use is the block file's modification time (set on
// every Put and Get, see tickLocked), so the expiry, mtime + TTL, is refreshed by the write
// a hit already makes and a record is written only when a pin is set or changed. Written by
// temp file + rename, as block files are.
const (
	pinMagic   = "SPPN"
	pinVersion = 1
	pinSize    = 4 + 2 + 2 + 32 + 32 + 8 + 4 // 84
	pinSuffix  = ".pin"
)

// pinName is "<root hex>-<hash hex>.pin".
func pinName(k tier.Key) string {
	n := fileName(k)
	return n[:len(n)-len(fileSuffix)] + pinSuffix
}

func parsePinName(name string) (tier.Key, bool) { return parseKeyName(name, pinSuffix) }

// encodePin returns k's pin record for ttl.
func encodePin(k tier.Key, ttl time.Duration) []byte {
	b := make([]byte, 0, pinSize)
	b = append(b, pinMagic...)
	b = binary.LittleEndian.AppendUint16(b, pinVersion)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = append(b, k.Root[:]...)
	b = append(b, k.Hash[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(ttl))
	return binary.LittleEndian.AppendUint32(b, crc32c.Checksum(b))
}

// parsePin checks a pin record read from disk (outside bytes: a torn or damaged record is an
// error, never a panic; fuzzed) and returns its TTL (> 0).
func parsePin(b []byte, k tier.Key) (time.Duration, error) {
	if len(b) != pinSize {
		return 0, fmt.Errorf("disk: pin record of %d bytes, want %d", len(b), pinSize)
	}
	if crc32c.Checksum(b[:pinSize-4]) != binary.LittleEndian.Uint32(b[pinSize-4:]) {
		return 0, errors.New("disk: pin record checksum mismatch")
	}
	if string(b[:4]) != pinMagic || binary.LittleEndian.Uint16(b[4:]) != pinVersion {
		return 0, errors.New("disk: pin record: bad magic or version")
	}
	if prefix.Hash(b[8:40]) != k.Root || prefix.Hash(b[40:72]) != k.Hash {
		return 0, errors.New("disk: pin record of another key")
	}
	ttl := time.Duration(binary.LittleEndian.Uint64(b[72:]))
	if ttl <= 0 {
		return 0, fmt.Errorf("disk: pin record TTL %d", ttl)
	}
	return ttl, nil
}

// readPin reads and checks k's pin record at path.
func readPin(path string, k tier.Key) (time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return parsePin(b, k)
}

// writePinTemp writes k's pin record to a new temp file and returns its path; on error
// nothing is left.
func (s *Store) writePinTemp(k tier.Key, ttl time.Duration) (string, error) {
	return s.writeTempFile(encodePin(k, ttl))
}

// Pin implements tier.Pinner: the keys held are pinned for ttl from now (ttl <= 0: unpinned,
// as the most recent of their class), and their pin records written (removed). A non-nil
// error with a non-nil result says some records could not be written: those pins hold, but
// not across a restart.
func (s *Store) Pin(ctx context.Context, keys []tier.Key, ttl time.Duration) ([]bool, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	type todo struct {
		e     *entry
		stamp time.Time
		tmp   string
	}
	var work []todo
	s.mu.Lock()
	s.sweepNowLocked()
	out := tier.Each(s.mu.m, keys, func(e *entry) {
		switch {
		case ttl > 0:
			if s.pinnedLocked(e) {
				if old, _ := s.mu.pins.TTL(&e.node); old == ttl {
					stamp := s.tickLocked()
					s.mu.pins.Touch(&e.node, stamp)
					work = append(work, todo{e: e, stamp: stamp, tmp: "-"}) // the record stands
					return
				}
			}
			stamp := s.tickLocked()
			s.pinLocked(e, ttl, stamp.Add(ttl))
			work = append(work, todo{e: e, stamp: stamp})
		case s.pinnedLocked(e):
			s.unpinLocked(e, true, true)
		}
	})
	s.mu.Unlock()
	defer s.unlinkDoomed() // the records of unpins and of pins that expired
	var errs []error
	for i := range work {
		w := &work[i]
		path := filepath.Join(s.dir, fileName(w.e.key))
		os.Chtimes(path, w.stamp, w.stamp) // the pin's last use, for a restart; best effort
		if w.tmp == "-" {
			w.tmp = ""
			continue
		}
		tmp, err := s.writePinTemp(w.e.key, ttl)
		if err != nil {
			errs = append(errs, fmt.Errorf("disk: pin %s: record: %w", w.e.key, noSpace(err)))
		}
		w.tmp = tmp
	}
	s.mu.Lock()
	for _, w := range work {
		if w.tmp == "" {
			continue
		}
		// Rename under the lock, only if the key is still pinned with this TTL (by this Pin,
		// or a Put that kept it): a record exists only for a pinned entry (a Delete, eviction
		// or unpin meanwhile removed it, or would have).
		s.settleLocked(filepath.Join(s.dir, pinName(w.e.key))) // no unlink may follow the rename
		if !s.pinnedWithLocked(s.mu.m[w.e.key], ttl) || s.mu.closed {
			s.doomLocked(w.tmp)
			continue
		}
		if err := s.cfg.FS.Rename(w.tmp, filepath.Join(s.dir, pinName(w.e.key))); err != nil {
			s.doomLocked(w.tmp)
			errs = append(errs, fmt.Errorf("disk: pin %s: record: %w", w.e.key, noSpace(err)))
		}
	}
	if s.cfg.Sync && len(work) > 0 {
		syncDir(s.dir)
	}
	s.mu.Unlock()
	return out, errors.Join(errs...)
}

// Pins implements tier.Pinner.
func (s *Store) Pins() []tier.PinInfo {
	defer s.unlinkDoomed() // after the unlock below: the records of pins that expired
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepNowLocked()
	return s.mu.pins.Infos(entryKey)
}

// Sweep ends the pins expired now (their records removed) and returns how many. Every
// operation sweeps first; calling it brings Stats and the pin records up to date on an idle
// store.
func (s *Store) Sweep() int {
	defer s.unlinkDoomed() // after the unlock below
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepNowLocked()
}

// entryKey is the key of e, for lru.Pins.Infos.
func entryKey(e *entry) tier.Key { return e.key }
