package disk

import (
	"os"
	"slices"
)

// Unlinking outside the lock.
//
// An eviction, Delete, unpin or expiry decides under s.mu which files go (a block file, a pin
// record), but an unlink is I/O (on ext4 it frees the file's extents), and every Get, Put and
// Contains waits on s.mu. So the locked helpers only doom a path (doomLocked: appended to
// s.mu.doomed), and the public method that ran them unlinks the doomed paths after it lets
// the lock go (unlinkDoomed, deferred before the unlock or called after it).
//
// The hazard is a rename into a doomed path: a key evicted and put again at once would have
// its new file unlinked by the old one's late unlink. So every rename into place first
// settles its path under the lock (settleLocked): a doomed unlink not yet started is done
// there (rare, and one file), and one in flight is waited for. A reader that found an entry
// under the lock and reads its file after it was unlinked sees a miss, as it always has with a
// concurrent eviction. A crash between doom and unlink leaves the file: at Open it is an
// ordinary block (or pin record), within the budget as every file is.

// doomLocked marks path to be unlinked once the lock is released.
// REQUIRES: s.mu held.
func (s *Store) doomLocked(path string) { s.mu.doomed = append(s.mu.doomed, path) }

// unlinkDoomed unlinks the paths doomed so far, outside the lock (which it takes only to
// hand them over and to say they are gone).
// REQUIRES: s.mu not held.
func (s *Store) unlinkDoomed() {
	s.mu.Lock()
	paths := s.mu.doomed
	s.mu.doomed = nil
	for _, p := range paths {
		s.mu.unlinking[p]++
	}
	s.mu.Unlock()
	if len(paths) == 0 {
		return
	}
	for _, p := range paths {
		os.Remove(p)
	}
	s.mu.Lock()
	for _, p := range paths {
		if s.mu.unlinking[p]--; s.mu.unlinking[p] <= 0 {
			delete(s.mu.unlinking, p)
		}
	}
	s.mu.Unlock()
	s.unlinked.Broadcast()
}

// settleLocked makes sure no unlink of path is pending or in flight, so that a rename into
// it is never undone: it waits (releasing the lock meanwhile) for the unlinks in flight, then
// does a pending one itself. Callers read the state they act on after it.
// REQUIRES: s.mu held.
func (s *Store) settleLocked(path string) {
	for s.mu.unlinking[path] > 0 {
		s.unlinked.Wait()
	}
	if !slices.Contains(s.mu.doomed, path) {
		return
	}
	os.Remove(path) // doomed, and about to be replaced: its unlink goes first
	s.mu.doomed = slices.DeleteFunc(s.mu.doomed, func(p string) bool { return p == path })
}
