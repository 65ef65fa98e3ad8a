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
// K/V bytes in the arena's block layout, optional per-layer auxiliary state
// (recurrent-model snapshots) with a "state complete" flag, and a CRC-32C of
// everything before it. Encode writes it; Decode reads outside bytes
// strictly (any malformed input is an error, never a panic; it is fuzzed) and
// Verify checks a decoded record against what the caller expects.
//
// Why CRC-32C: Go's hash/crc32 uses the SSE4.2/ARMv8 instruction, so it runs
// at many GB/s and does not show up next to the copy it guards; it catches
// every torn write and burst error up to 32 bits. It is not a defence against
// an adversary, and needs not be: the key (root, hash) is SHA-256 and Verify
// checks the tokens as well.
//
// Every failure of Decode or Verify maps to one discard reason (Reason):
// checksum (malformed or torn bytes), identity (another model, tenant,
// prefix, tokens or shape), incomplete_state.
//
// # Store
//
// Store is small and batched: Get, Put, Delete, Contains, Stats over Keys
// (root, block hash), so identities and tenants are namespaced by the key
// itself. Values are encoded records, opaque to the store: a store never
// trusts them and the reader verifies every value it gets. tiertest.Run is the
// conformance suite every store passes; memstore is the in-memory reference.
//
// Ownership: Put takes ownership of each Item.Value (the caller never writes
// to it again); values returned by Get are read-only to the caller. Both rules
// let the host tier hand the same bytes around without copying.
package tier
