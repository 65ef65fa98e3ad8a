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
// node instead of piling one tenant onto one slot. A batch is then one
// pipeline of GETs that go-redis splits per node; on a single server a batch
// read is one MGET. Writes are pipelined SETs with a TTL (Config.TTL), so a
// Redis without an eviction policy still forgets blocks nobody reads.
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
// Stats: hits and misses are this process's. Redis is shared and evicts on
// its own, so UsedBytes, Items and CapacityBytes are not tracked (0).
package redis
