// Package apikey owns how a request's key is checked: the set of keys a server or router
// accepts, where a request may present its key, and how a file of keys is read.
//
// Why a package of its own: serve, route and the tenants file each held keys, and each
// compared them its own way; the router compared raw strings, so a wrong key's response time
// told how long the right one was. A security rule lives in one place with one test suite:
// internal/server, internal/router and internal/tenant all compare keys through Set, read
// presented keys with FromRequest and Bearer, and cmd/stockpot reads every key file
// (--api-key-file, --admin-key-file, --backend-key-file, ...) with ReadFile.
//
// # Set
//
// A Set holds SHA-256 digests, never the keys. Match hashes the presented key once and
// compares its digest with every digest of the set with crypto/subtle, whatever matched and
// wherever: every comparison is of 32 bytes against 32 bytes, so the time taken depends only
// on the number of keys held, never on which key matched, how close a wrong key came, nor how
// long either is. Index also says which entry matched, selected with constant-time operations
// (the tenants file maps an entry to its tenant). The empty key is never in a Set built from
// keys (NewSet skips it), so a request presenting none never matches.
//
// # Presented keys
//
// A key comes as "Authorization: Bearer KEY" (OpenAI clients, and the router's backend key),
// "x-api-key: KEY" (Anthropic clients) or, on the dashboard's paths, "?key=KEY" (browsers'
// EventSource sends no headers). Header values are trimmed of spaces; the query's is not.
// serve and route differ on one point, kept as they were: a request whose Authorization
// header is of another scheme ("Basic ...") falls back to x-api-key on serve, and presents
// no key to the router (Rule.AuthorizationDecides).
//
// # Key files
//
// A key file holds one key a line; each line is trimmed of spaces and blank lines are
// skipped. There are no comments: a line starting with '#' is a key.
package apikey
