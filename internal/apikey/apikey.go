package apikey

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"os"
	"strings"
)

// Digest is the SHA-256 of a key, the form a Set holds.
type Digest = [sha256.Size]byte

// Set is a set of keys compared in constant time and without regard to length (doc.go).
// The zero Set is empty and matches nothing. A Set is not safe to Add to concurrently with
// Match; the servers build theirs before serving and never change them.
type Set struct {
	digests []Digest
}

// NewSet returns the set of keys, skipping empty ones.
func NewSet(keys ...string) Set {
	var s Set
	for _, k := range keys {
		if k != "" {
			s.AddDigest(sha256.Sum256([]byte(k)))
		}
	}
	return s
}

// AddDigest adds the key whose digest is d (the tenants file stores digests, not keys). Its
// entry is the set's Len before the call.
func (s *Set) AddDigest(d Digest) { s.digests = append(s.digests, d) }

// Len is the number of entries (a key added twice counts twice).
func (s Set) Len() int { return len(s.digests) }

// Match reports whether key is in the set. Every entry is compared (doc.go).
func (s Set) Match(key string) bool {
	_, ok := s.Index(key)
	return ok
}

// Index returns the entry that key matches (the last one, if it was added twice) and true,
// or 0 and false. Every entry is compared, and the entry is selected without a data-dependent
// branch.
func (s Set) Index(key string) (int, bool) {
	d := sha256.Sum256([]byte(key))
	found, idx := 0, 0
	for i := range s.digests {
		eq := subtle.ConstantTimeCompare(d[:], s.digests[i][:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
		found |= eq
	}
	return idx, found == 1
}

// Bearer returns the token of "Authorization: Bearer TOKEN" (the scheme in any case, the
// token trimmed of spaces) and true, or "" and false when r's Authorization header is
// missing or of another form.
func Bearer(r *http.Request) (string, bool) {
	return parseBearer(r.Header.Get("Authorization"))
}

func parseBearer(authorization string) (string, bool) {
	scheme, key, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(key), true
}

// Rule says where FromRequest looks for a key.
type Rule struct {
	// Query also takes ?key= when the headers present no key (the dashboard's paths:
	// browsers' EventSource sends no headers).
	Query bool
	// AuthorizationDecides: a request with an Authorization header presents what it says
	// (nothing, when it is not "Bearer KEY"), and x-api-key is read only without one (the
	// router). Without it, an Authorization header that is not a bearer token is passed over
	// for x-api-key (serve).
	AuthorizationDecides bool
}

// FromRequest returns the key r presents under rule: a bearer token, else x-api-key, else
// (rule.Query) ?key=. "" when it presents none.
func FromRequest(r *http.Request, rule Rule) string {
	var q string
	if rule.Query {
		q = r.URL.Query().Get("key")
	}
	return presented(r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"), q, rule)
}

// presented is FromRequest on the request's parts (query: the ?key= value, read only when
// rule.Query).
func presented(authorization, xAPIKey, query string, rule Rule) string {
	key, ok := parseBearer(authorization)
	if !ok && !(rule.AuthorizationDecides && authorization != "") {
		key = strings.TrimSpace(xAPIKey)
	}
	if key == "" && rule.Query {
		key = query
	}
	return key
}

// ReadFile returns the keys of a key file: its lines trimmed of spaces, blank ones skipped.
// None for path "".
func ReadFile(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			keys = append(keys, l)
		}
	}
	return keys, nil
}
