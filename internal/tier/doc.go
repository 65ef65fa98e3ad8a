// Package tier owns the offload tiers of the K/V cache below the device pool:
// the block record format written to them and the Store interface every tier
// (host RAM, disk, Redis) implements.
//
// # Record
//
// A Record is one K/V block as it travels down the tiers and back: the
// identity digest of the model (identity.Descriptor.Digest, before the
// tenant salt), the chain root (prefix.Root: identity + salt), the block's
// hash and its parent's, its token ids, its shape (a kvcache.Layout), the raw
// K/V bytes in the arena's block layout, optional auxiliary state (a hybrid
// model's recurrent-state checkpoint at the block's end, covered by the same
// checksum and, through the identity, by the state's format) with a "state
// complete" flag, and a CRC-32C of everything before it. Encode writes it; Decode reads outside bytes
// strictly (any malformed input is an error, never a panic; it is fuzzed) and
// Verify checks a decoded record against what the caller expects.
//
// Why CRC-32C: it has instructions on both amd64 and arm64, so it runs at tens of GB/s, and
// it catches every torn write and burst error up to 32 bits. It is not a defence against an
// adversary, and needs not be: the key (root, hash) is SHA-256 and Verify checks the tokens
// as well. Every tier computes it through package crc32c, bit-identical to hash/crc32: with
// AVX-512's VPCLMULQDQ it folds 256 bytes a round (about twice hash/crc32's three CRC32
// streams, which took half of a host restore's time), elsewhere it is hash/crc32.
//
// DecodeVerifyInto is DecodeVerify that lands the K/V in the caller's buffer (a reserved
// pool block) in the same pass as the checksum (crc32c.UpdateCopy), so a restore crosses
// memory once; it fails exactly as DecodeVerify does (fuzzed against it).
//
// Every failure of Decode or Verify maps to one discard reason (Reason):
// checksum (malformed or torn bytes), identity (another model, tenant,
// prefix, tokens or shape), incomplete_state, forged (see Authentication).
//
// # Authentication
//
// The checks above stop damage and mix-ups, not a writer: whoever can write to the disk
// directory or the Redis can store another prompt's block under a victim's key with the
// hash, parent, tokens and CRC rewritten to match, and it would be restored as a hit. With a
// Keyring (--tier-key-file) every record a writer encodes is signed (EncodeSigned: flag bit
// 1, then key id, a random 96-bit nonce and a 16-byte GMAC tag over every byte before the
// tag, then the CRC as always), and a reader given Want.Keys refuses (ErrForged, reason
// forged) a record that is unsigned, signed by a key it does not hold, or whose tag does not
// match; the MAC is checked before the identity, so a forgery counts as forged whatever it
// claims. The first key signs and every key verifies, so a key is rotated by putting a new
// one in front: records signed by the old one keep restoring until it is removed. The key id
// (KeyID) is derived from the secret, so it is the same in every process and file order.
//
// Why GMAC (AES-256-GCM with no plaintext, the AES key derived from the secret by HKDF): with
// AES-NI and carry-less multiplication it runs at many GB/s, several times HMAC-SHA256 even
// with SHA-NI (BenchmarkVerifyMAC measures both against a copy of the same bytes), so a
// restore stays within a small factor of memcpy. Its one hazard, a nonce used twice under one
// key, is kept out of reach by random nonces (odds under 2^-32 at 2^32 records a key). The
// host tier's records never leave the process and are read without the MAC check.
//
// # Store
//
// Store is small and batched: Get, Put, Delete, Contains, Stats over Keys
// (root, block hash), so identities and tenants are namespaced by the key
// itself. Values are encoded records, opaque to the store: a store never
// trusts them and the reader verifies every value it gets. tiertest.Run is the
// conformance suite every store passes; memstore is the in-memory reference.
//
// # Sole copies
//
// Tiers are inclusive: a block evicted from the device is written to every tier, host first,
// so the disk holds copies of what host RAM holds, for the restart (RAM is lost; a kill -9
// also loses the device pool). Under plain LRU on both, a pass over more distinct prompts
// than host and disk hold together makes each new write-back evict, on the disk, the blocks
// nothing else holds, among them everything that survived a restart, before a lookup reaches
// them: nothing is reused (issue 17). So a write-back that a faster tier also received is
// Shadowed, and a store with a budget keeps two classes: shadowed items and sole copies. A
// shadowed item may displace only other shadowed items; a sole copy (a write with no tier
// above, a block the host tier evicted, the flush at shutdown, every item found at a restart)
// displaces shadowed items first, then the least recently used sole copy. When the host tier
// (a Spiller) evicts an item, the writer tells the disk (an Unshadower) that its copy is now
// the only one, or writes it there if the disk has none. The disk thus keeps recent
// write-backs for durability while it has room, and never trades the only copy of a block
// for a second copy of another.
//
// Ownership: Put takes ownership of each Item.Value (the caller never writes
// to it again); values returned by Get are read-only to the caller. Both rules
// let the host tier hand the same bytes around without copying. A store that
// reads values into buffers of its own may take them back once the caller is
// done (Recycler, optional).
package tier
