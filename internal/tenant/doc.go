// Package tenant owns who a request belongs to: the tenants file (--tenants), the hashed API
// keys that name a tenant, the cache namespace each tenant's prompts are hashed under, its
// quotas, and the signed identity header a router forwards to its replicas.
//
// Why a package of its own: the server (which authenticates clients and derives cache salts)
// and the router (which authenticates clients itself, routes by namespace and signs the
// identity it forwards) must agree byte for byte on keys, namespaces and the header. Both
// import this package; it imports nothing of Stockpot's but apikey, kvtier and bytesize,
// does no I/O (Load reads one file, the rest is pure) and starts no goroutine.
//
// # Keys
//
// The file stores only SHA-256 digests of bearer keys ("sha256:<64 hex digits>"), so a leaked
// file leaks no key. Authenticate hashes the presented key once and compares the digest with
// every stored digest in constant time, selecting the tenant with constant-time operations:
// the time taken says neither which tenant matched nor how close a wrong key came. The
// comparison is internal/apikey's Set, the one that serve's and the router's other keys use.
//
// # Namespaces and salts
//
// A tenant's namespace is derived on the server (the tenant's name unless the file sets one);
// a client never sends it. Salt(client) folds the namespace and the client's cache_salt into
// the one string the engine hashes into every chain root:
//
//	"\x00stockpot/tenant\x00" || u32le(len(namespace)) || namespace || client
//
// The length prefix makes the encoding injective, so no client salt of tenant B can produce
// tenant A's salt: a cache_salt only subdivides its own namespace. The public namespace
// (PublicSalt) has its own tag and is reachable by no tenant salt either. The legacy
// namespace "" (no tenants file, or --api-key's single tenant) keeps the client's salt as it
// is, so caches written before tenants existed stay valid; a server with a tenants file has no
// request in the legacy namespace.
//
// # Quotas
//
// Bucket is a token bucket (requests_per_second, burst) and Limiter holds one bucket and one
// running count (concurrent) per tenant. Both take the time as an argument; tests step them
// with datadriven scripts (testdata/quota.txt). cache_bytes is a per-tier byte budget: each
// tenant has an owner number (Owner: its position in the file plus one) that the engine tags
// its committed blocks with; the working pool's eviction (prefix/quota.go) and the host tier
// (hostmem/owners.go) take the blocks of an owner over its budget first. This package only
// carries the numbers.
//
// # The forwarded identity
//
// Behind a router with --tenants, the router terminates client authentication and forwards the
// tenant in the X-Stockpot-Tenant header, HMAC-SHA256-signed with the --backend-key it shares
// with its replicas over (name, namespace, public_reads, issue time, nonce, the body's SHA-256)
// and the request it rides on: its method and target (path and query), which the replica
// takes from the request itself (Binding). A replica trusts the header only when the
// signature verifies for the request it came with, the issue time is within MaxSkew of its
// clock, the nonce was not seen within that window (ReplayGuard), and the body it reads
// hashes to the signed digest (Claims.CheckBody, checked as the bounded body streams in): a
// captured header is good for one request, once, and for nothing else. The router drops any
// header of that name a client sent. The header starts with its version (v2); a v1 header is
// refused as ErrHeaderVersion.
package tenant
