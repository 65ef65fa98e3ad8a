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
// the same pipeline for the pins this process knows, right after for ones it finds): so a
// read by any replica refreshes a pin. An unpinned
// block is only read, and Put writes it with Config.TTL as before (a write-back of a block
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
// Stats: hits and misses are this process's. Redis is shared and evicts on
// its own, so UsedBytes, Items and CapacityBytes are not tracked (0).
package redis
