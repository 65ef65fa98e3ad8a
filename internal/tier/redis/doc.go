// Package redis is the remote tier: a tier.Store on Redis (or Valkey, or a
// Redis Cluster) through github.com/redis/go-redis/v9, shared by replicas.
//
// # Keys
//
//	<prefix>:<identity digest hex>:<root hex>:<block hash hex>
//
// The identity digest (identity.Descriptor, before the salt) namespaces
// models: two models on one Redis share no key, and a model's keys can be
// listed or dropped with one SCAN pattern. The root carries the tenant salt.
// Keys have no hash tag: on a cluster, a prefix's blocks spread over every
// node instead of piling one tenant onto one slot. Writes are pipelined SETs
// with a TTL (Config.TTL), so a Redis without an eviction policy still
// forgets blocks nobody reads.
//
// # TTLs
//
// A read refreshes what it finds (unless Config.NoReadRefresh): in the read's own round trip
// (the MGET and a script, one pipeline; one per slot on a cluster) an unpinned block's TTL
// is pushed out to Config.TTL again, so a block expires TTL after its last read, not its
// write. The script reads each block's pin record first: a pinned block gets its pin's
// refresh (see Pins) and never the default, so a read can neither shorten a pin nor stretch
// a short one to the default; a read never shortens any TTL, never gives a TTL to a key that
// has none, and creates nothing for a miss. A refresh is best effort: one the server refuses
// (a read-only replica answers READONLY) fails no read, so the tier still reads from a
// replica, or from a primary mid-failover, with the TTLs left as they are.
//
// Why one key per block and not a value per group of blocks: a key is named by the block's
// own hash, which is all a writer (one evicted block, its parent's hash) and a reader (the
// prompt's chain) share; a group's key would need its first block's hash, which a write-back
// (leaf first, one block at a time) does not know, and a value holding several blocks would
// be rewritten (or appended to, by several replicas at once) as its chain grows, and would
// expire, pin and drop as one. And it would buy little: a batch is already one round trip
// (an MGET; the writes one pipeline), and BenchmarkRestore measures Redis's memory per
// cached token and restore throughput with a key per block and with 8 blocks a key. What
// Redis adds over the records' bytes is mostly the allocator's size classes, not the keys: a
// record a little over a class boundary (512 KiB of K/V and its header) takes the next class
// (640 KiB), +27% with a key per block; grouped by 8 it was +41% there and +24% against +18%
// at 192 KiB. Only at 8 KiB blocks did 8 a key help: 1 to 3 points of memory, and an MGET
// of 8 times fewer keys about 18% faster (on 2 shared cores); at 192 and 512 KiB it was no
// faster beyond noise. Blocks of real models are the large case, so a key per block stays,
// and grouping has no flag. The read's refresh script costs most where blocks are small:
// about a quarter of the throughput at 8 KiB (256 blocks a read), within noise at 192 KiB.
//
// # Redis Cluster
//
// A redis+cluster:// URL (or a *redis.ClusterClient given to New) is a cluster. A batch is
// grouped by hash slot (keySlot, Redis's CRC16) and each slot's keys go in one command:
// a read is one MGET per slot of its blocks and their pin records (a pin record shares its
// block's slot), a Delete one DEL per slot, a pin script one call per slot. The commands of
// a batch go in one pipeline that go-redis splits per master, following MOVED and ASK while
// slots move. Each master has its own circuit breaker (perNode): a master that fails, or
// whose breaker is open, leaves its keys unanswered (misses for Get, not held for Contains,
// an ErrUnavailable per item for Put and Delete) while the other masters answer; the batch
// fails as a whole only when no master answered. The store's own breaker then sees the
// failure. Keys (SCAN) runs on each master. A cluster should run with
// cluster-require-full-coverage no, or one dead master stops every other one from serving.
// BreakerStats counts opens, recoveries, failed calls and skipped keys; the Store is a
// prometheus.Collector of them (stockpot_kv_remote_breaker_*).
//
// # Pins
//
// The store is a tier.Pinner. Redis evicts by its own policy, so a pin here is a TTL: the
// pin record "{<block key>}:pin" holds the pin's TTL in ms and expires with it, and the
// block key's TTL is at least the pin's (max of what it has left and the retention). The
// hash tag of the record is the whole block key, so on a cluster both live in one slot. A
// Get reads each block and its record together (one MGET for the batch on a single server,
// one per slot on a cluster) and, for a pinned block, a Lua script refreshes both TTLs (in
// the same pipeline: for every block read under the default read refresh, see TTLs; with
// NoReadRefresh, for the pins this process knows, and right after for ones it finds): so a
// read by any replica refreshes a pin. An unpinned
// block is read (and its TTL refreshed; see TTLs), and Put writes it with Config.TTL as before (a write-back of a block
// this process knows pinned keeps its pin). Pin sets or removes records (an unpin brings
// the block's TTL back to at most Config.TTL). When a record expires the block is an
// unpinned one again until its own TTL ends. Delete removes both. A TTL is only as good as
// the server's memory policy: with maxmemory and an allkeys policy Redis may still evict a
// pinned block; volatile-ttl prefers the shortest TTLs, which pins are not.
//
// Pins lists this process's view: the pins it made and those its Gets found, expiring by
// Config.Now at the last use seen here + TTL (at most 65536 kept; its own first). Pins of
// other replicas it never read are not listed (that would be a SCAN of a shared keyspace):
// exact for one replica, a lower bound for many. Stats.PinnedItems counts the view.
//
// # Never on the critical path of correctness
//
// Values are opaque bytes; the reader verifies every record it gets (tier
// package). Every call runs under Config.CallTimeout, go-redis retries are
// off, and a circuit breaker skips Redis after Config.BreakerFailures
// consecutive failures for Config.BreakerCooldown: calls then fail at once
// with tier.ErrUnavailable, and the engine goes on from its local tiers.
// After the cool-down one probe call goes through; its success closes the
// breaker, its failure opens it again. A caller's own cancellation does not
// count as a failure.
//
// A full Redis (maxmemory with noeviction) refuses writes with an OOM reply while it
// still answers: each refused item of a Put is one tier.ErrNoSpace (the writer counts it
// no_space) and the call counts as answered for the breaker (on a cluster, for that master's
// breaker), so the reads of what it holds go on.
//
// The breaker's counters are in BreakerStats (and on /metrics; see Redis Cluster above).
//
// # Stats
//
// Hits and misses are this process's. Redis is shared and evicts and expires on its own, so
// what it holds is measured from Redis, not counted from this replica's writes: Items and
// UsedBytes are the block keys under the store's prefix (this model, every tenant, every
// replica's writes) counted by SCAN and their values' bytes by a pipelined STRLEN per page
// (the records' bytes, as host and disk count theirs; Redis's per-key overhead is not in
// them), and CapacityBytes is the server's maxmemory (0: none; summed over a cluster's
// masters). Stats never waits for it: it returns the last measurement and starts the next
// one in the background once Config.UsageEvery (10 s) has passed since the last began, one
// at a time, none while the breaker is open (usage.go). A SCAN page of 1000 keys and its
// STRLENs are two round trips: a million blocks take about 2000 of them, a few seconds,
// every UsageEvery at most.
package redis
