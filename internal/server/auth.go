package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"stockpot/internal/api"
)

// keySet is a set of secrets compared in constant time. Keys are kept as SHA-256 digests, so
// the comparison takes the same time whatever the length of the key sent and of the keys
// held, and says nothing about which key came close.
type keySet [][sha256.Size]byte

func newKeySet(keys ...string) keySet {
	var ks keySet
	for _, k := range keys {
		if k != "" {
			ks = append(ks, sha256.Sum256([]byte(k)))
		}
	}
	return ks
}

// match reports whether key is in the set. Every key is compared.
func (ks keySet) match(key string) bool {
	d := sha256.Sum256([]byte(key))
	m := 0
	for i := range ks {
		m |= subtle.ConstantTimeCompare(d[:], ks[i][:])
	}
	return m == 1
}

// bearer returns the token of "Authorization: Bearer TOKEN" (the scheme in any case).
func bearer(r *http.Request) (string, bool) {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(key), true
}

// authorized reports whether r carries one of the API keys (a tenant's, with --tenants), as
// "Authorization: Bearer KEY" (OpenAI clients, and the router's --backend-key) or "x-api-key:
// KEY" (Anthropic clients), or the router's signed identity header (tenants.go). With no
// API keys configured everything is authorized.
func (s *Server) authorized(r *http.Request) bool {
	_, err := s.authenticate(r)
	return err == nil
}

func unauthorized(w http.ResponseWriter) { writeError(w, errUnauthorized) }

// errUnauthorized is the answer to a missing or wrong API key.
var errUnauthorized = api.Unauthorized("missing or invalid API key; send \"Authorization: Bearer <key>\" or \"x-api-key: <key>\"")
