// Package disk is the disk tier: a tier.Store over one directory
// (--disk-cache DIR) with a byte budget (--disk-cache-size) and LRU eviction.
//
// # One file per block, written by temp file + rename
//
// Each value lives in its own file, written to a ".tmp-*" name and renamed
// into place. Why not append-only segments with an index?
//
//   - A rename is atomic: a reader, or a restart after kill -9, sees the old
//     file, the new one, or none, never half of one. Segments need their own
//     torn-tail detection and an index that agrees with them after a crash.
//   - Eviction is an unlink that returns the space at once. Segments free
//     space only by compaction, which rewrites live blocks (write
//     amplification) and needs a budget margin while it runs.
//   - Blocks are large (tens of KiB to MiB for real models), so one file per
//     block costs little next to the data, and a read is one open + read.
//
// The price is a directory of many files and a start-up listing of them; the
// listing reads names and sizes only (no file is opened), so a start over
// 100k blocks takes a fraction of a second.
//
// # Identity
//
// The store is opened with the identity digest it serves (the model-level
// identity.Descriptor digest, before the tenant salt: every tenant of one
// model shares the store, and keys carry the salted root). Files live in
// DIR/<digest hex>/, and every file's header repeats the digest and its key.
// At Open, directories of other digests (another model, tokenizer, K/V
// dtype or block size used this DIR before) are removed: their records can
// never be served here, and are collected. A lock file (DIR/LOCK, flock)
// keeps two processes from sharing one DIR; each replica needs its own.
//
// # File format and crash safety
//
//	"SPDF" u16 version u16 0, digest [32], root [32], hash [32], u64 value length,
//	value, u32 CRC-32C of all the bytes before it
//
// Partial ".tmp-*" files (a crash mid-write) are removed at Open and never
// indexed; so are empty or truncated record files and files of names this store
// never writes, while symlinks and other non-regular entries are left alone and
// never followed (the listing's lstat types). Each is counted by reason
// (StartupDrops, stockpot_kv_disk_startup_dropped_total{reason}: startup.go). A file whose length, header, key or checksum is wrong (a torn
// write that reached the final name through a crash of the file system, or
// bit rot) is never served: Get counts it (Corrupt), deletes it and reports
// a miss. With Config.Sync, data and the directory are fsynced before a
// rename, for power-loss durability; without it (the default) a process
// crash loses nothing that was renamed, and a power cut is caught by the
// checksums.
//
// # Budget and eviction
//
// UsedBytes is the sum of file sizes. Files are in two LRU lists (package tier, "Sole
// copies"): shadowed write-backs, which the host tier also holds, and sole copies, which
// nothing above holds (the host tier evicted them, they came with no tier above, or they were
// found at Open: after a restart, every file is a sole copy). A Put evicts least recently
// used shadowed files first, and sole copies only for a sole item; a shadowed item that would
// need a sole copy's room is declined before anything is written (Stats.Declined). So after
// a kill -9 and a pass over more prompts than the tiers hold, the new write-backs do not push
// out what survived the crash before a lookup reaches it.
//
// Recency is kept in memory, and persisted as each file's modification time (set on every
// hit), which orders the LRU list rebuilt at Open. A batch from Get is touched last key
// first, so a chain's head stays more recent than its tail, and eviction takes chains from
// the tail: what survives is a usable prefix.
//
// Files leave outside the lock: an eviction (or Delete, unpin, expiry) dooms their paths under
// it, and the call that did so unlinks them once it has let the lock go, so a Get or Put never
// waits on another's unlinks. A rename into a doomed path settles it first (unlink.go).
//
// # Pins
//
// The store is a tier.Pinner. A pinned entry leaves both LRU lists for a heap by expiry
// (lru.Pins): pinned entries are ahead of both classes, so no Put evicts one; a Put that
// could make room only by evicting a pin is declined (Stats.Declined). Within the unpinned
// entries the sole-copy rule above is unchanged. A Get refreshes a pin (expiry = this use +
// TTL); every operation first sweeps the expired pins, which become the least recent entries
// of their class (Unshadow of a pinned entry changes only that class).
//
// Persistence: a pin record "<root>-<hash>.pin" (magic, version, key, TTL, CRC-32C; 84
// bytes; written by temp file + rename) holds the TTL, and the block file's modification
// time, which every Put and Get already sets, is the pin's last use. So a hit costs no
// extra write, and at Open a block with a valid record is pinned until mtime + TTL, its
// remaining time; a record whose pin has expired, a torn or foreign record (a checksum or
// key mismatch: fuzzed, FuzzParsePin), or one without its block is removed and the block, if
// any, is a plain sole copy. A record exists only while its entry is pinned: it is renamed
// into place after the block's rename and under the lock that checks the pin still holds,
// and removed at unpin, expiry, Delete and eviction. A crash in between loses a pin, never a
// block. Should pins alone exceed a budget made smaller since the last run, Open evicts the
// pins that would expire first: the budget is a hard limit. Config.Now is the clock of both
// the recency stamps and the pins, for tests.
//
// # Reads
//
// Get reads a batch's files on up to 8 goroutines (a device needs several reads in flight;
// a Get of one key reads on the caller's goroutine).
// A file wholly in the page cache is read buffered; one it lacks is read with O_DIRECT into
// an aligned buffer, skipping the page cache's copy and readahead (cachestat tells which;
// where it is missing reads stay buffered, and where the file system refuses O_DIRECT the
// store stops trying). The read buffers can be handed back once their values are used
// (tier.Recycler), and later reads reuse them. See read.go.
//
// GetChecked (tier.CheckedGetter) is Get for a reader that verifies every value anyway (a
// value is a tier record, with its own CRC-32C): the reader's check runs in place of the
// file checksum's pass over the value, so a cold block's bytes are read from memory once.
// The file is still judged as Get judges it: the header is checked field by field, and the
// trailer against CRC-32C(header) combined with the fixed CRC of any intact record (crc.go:
// a message followed by its own CRC-32C always has the same CRC), without reading the value
// again; a value the check refuses is checksummed as Get would.
//
// # Full file system
//
// A file system smaller than the budget (or shared) fails a write with ENOSPC. The Put then
// evicts from this store's own LRU (by the rule above) as many bytes as the item needs and
// retries once; if that fails too, the error wraps tier.ErrNoSpace and nothing is left
// behind: the temp file is removed, the index is unchanged. Writes go through Config.FS,
// the seam tests use to make a disk full.
package disk
