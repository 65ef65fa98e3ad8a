// Package kvevents carries a replica's prefix-cache block events to routers:
// which block hashes each replica holds, in which tier, in order.
//
// # Types
//
//   - Event: one change (stored, removed, cleared) with a per-process
//     sequence number, the tier it happened in and the block's chain hash
//     (package prefix: the router computes the same hashes from tokens).
//   - Publisher (replica side): numbers events, keeps a bounded ring of the
//     recent ones and the current block set per tier, and serves both over
//     HTTP: GET /v1/kv-events (NDJSON stream) and GET /v1/kv-events/snapshot.
//   - Subscriber (router side): follows one replica's stream into a Sink,
//     resyncing from the snapshot after a gap, a restart or a reconnect that
//     came too late for the ring.
//
// # Wire format
//
// GET /v1/kv-events?since=SEQ&epoch=HEX streams one JSON object per line:
//
//	{"type":"hello","epoch":"1f..","seq":120,"identity":"ab..","block_size":16,"reuse_blocks":4}
//	{"type":"event","seq":121,"kind":"stored","tier":"device","hash":"..","parent":"..","time":1712...}
//	{"type":"heartbeat","seq":121,"time":1712...}
//	{"type":"costs","seq":121,"costs":{"prefill_tps":950,"block_size":16,"block_bytes":98304,"read_bps":{"host":9.5e9,"remote":1.2e8}}}
//	{"type":"load","seq":121,"load":{"running":3,"waiting":1,"queued_prefill_tokens":2048,"kv_usage":0.42}}
//	{"type":"resync","epoch":"1f..","seq":121}
//
// reuse_blocks (in the hello and the snapshot; Snapshot.ReuseBlocks, Publisher.SetReuseBlocks)
// is the replica's reuse unit: it reuses a cached prefix only in whole runs of that many
// blocks from the root. A hybrid model resumes only at a recurrent-state checkpoint, one every
// --state-checkpoint-blocks blocks, so a router that counted every cached block would
// overrate it; a router rounds a match down to the unit. A replica that predates the field
// omits it: 0, read as 1 (every block). A negative one, or one past MaxReuseBlocks, is
// garbage.
//
// Events come for every tier ("device", "host", "disk", "remote"). A costs
// line (Costs; a Sink that is a CostSink gets it) carries the replica's
// current restore-cost figures: after the hello and at a heartbeat when
// they changed; it takes no sequence number of its own (seq is the latest,
// as in a heartbeat). read_bps lists only the tiers the replica has.
// A load line (Load; a Sink that is a LoadSink gets it) carries the
// replica's own load, whoever sent its requests: sequences running and
// waiting, prompt tokens queued for prefill, and the share of the KV pool
// held (0 to 1). It comes after the hello (and costs) and whenever a check
// every Config.LoadInterval finds it changed; like costs it takes no
// sequence number. Routers that predate it skip it (a Subscriber skips
// every line type it does not know), so a replica may send it to any router.
// The stream sends events with Seq > since. A resync line means the
// publisher cannot continue from since: the ring no longer holds since+1,
// since is ahead of the publisher, or epoch names another process. The
// client then fetches /v1/kv-events/snapshot ({"epoch","seq","identity",
// "block_size","reuse_blocks","blocks":[{"hash","tier"}],"costs":{..}}),
// replaces what it knew, and streams again from the snapshot's seq. Heartbeats carry the latest seq, so
// a client that lost the tail of the stream notices at the next heartbeat.
// Times are Unix nanoseconds; hashes and the epoch are lower-case hex.
//
// A line or snapshot that does not parse (bad JSON, an unknown tier or kind,
// a malformed hash, negative or non-finite costs, a negative load or a KV usage
// outside [0, 1], a reuse unit out of range, a line over 64 KiB) is garbage: the Subscriber empties its Sink (Reset with an
// empty snapshot), counts SubscriberStats.Garbage, and streams again only after
// a snapshot that parses. decodeLine and decodeSnapshot are fuzzed (FuzzDecodeLine).
//
// # Invariants
//
// Sequence numbers start at 1 in every epoch and increase by one per event
// with no holes; the epoch is random per process, so a restarted replica is
// never mistaken for the old one. A Snapshot with Seq S reflects exactly
// events 1..S. A Subscriber applies events to its Sink only in unbroken
// sequence after a Reset; any break triggers a new Reset. The client's side of
// this protocol is a pure state machine (protocol.go, stepped alone by
// testdata/protocol.txt); the Subscriber does the I/O around it.
//
// Publish is called on the engine's runner goroutine: it takes one short
// mutex, does no I/O, never waits on a reader, and allocates only when the
// block set map grows. Slow readers fall behind the ring and resync; they
// never hold the publisher up.
//
// A block's tier is a kvtier.Tier; its String is the "tier" wire value, so
// the stream's bytes do not depend on this package. The publisher keeps the
// tiers holding a block as a uint8 bit set: at most 8 tiers.
//
// # Imports
//
// kvevents imports only packages prefix (for the hash type) and kvtier, and
// the standard library: both the engine's side and the router's use it, so it
// must import neither.
package kvevents
