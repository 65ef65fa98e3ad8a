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

// metricsAuthorized reports whether r may read /metrics: anyone when no metrics key is set
// (scrapes usually come from inside), else "Authorization: Bearer METRICS-KEY".
func (s *Server) metricsAuthorized(r *http.Request) bool {
	if len(s.metricsKeys) == 0 {
		return true
	}
	key, ok := bearer(r)
	return ok && s.metricsKeys.match(key)
}

func unauthorized(w http.ResponseWriter) { writeError(w, errUnauthorized) }

// errUnauthorized is the answer to a missing or wrong API key.
var errUnauthorized = api.Unauthorized("missing or invalid API key; send \"Authorization: Bearer <key>\" or \"x-api-key: <key>\"")

// RequireAPIKey wraps h, a route served beside the API (the replica's block events), with the
// API's key check: without a valid key the answer is a 401 in the API's error shape.
func (s *Server) RequireAPIKey(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, err := s.authenticate(r)
		if err != nil {
			writeError(w, err)
			return
		}
		if t != nil && s.cfg.Tenants != nil {
			// The events name every tenant's block hashes, and a namespace is a known name:
			// a tenant could test guesses of another's prompts against them.
			writeError(w, &api.Error{Status: http.StatusForbidden, Type: permissionError, Code: "backend_key_required",
				Message: "with --tenants the block events are the router's: send --backend-key, not a tenant's key"})
			return
		}
		h.ServeHTTP(w, r)
	})
}
