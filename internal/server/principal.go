package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	"stockpot/internal/tenant"
)

// Principal is who sent a request, as the TTFT floor (ttft_floor.go) sees it. ID tells
// principals apart: a principal never needs protecting from what it sent itself. TTFTFloor
// is its floor; 0 turns the floor off for it.
type Principal struct {
	ID        string
	TTFTFloor time.Duration
}

// PrincipalFunc names the principal of a request that passed the API's auth. It runs once per
// API request, after auth, and only when some principal can have a floor (Config.TTFTFloor or
// Config.Principal set). The default, keyPrincipal, is the SHA-256 of the presented key with
// Config.TTFTFloor; a tenants layer swaps in one that reads its tenant from r's context (a
// finer ID than the tenant, the key, still tells a tenant's keys apart), with the tenant's
// floor.
type PrincipalFunc func(r *http.Request) Principal

// keyPrincipal: the presented key's SHA-256 (hex), the server's floor. Without API keys the
// key is whatever the client sends; the floor still holds (a new principal knows nothing, so
// it is padded), clients just get their own hits unpadded only when they keep one key.
//
// With tenants the principal is the tenant (its namespace) and, when the key came straight
// from the client, the key: behind the router, whose own key is on every forwarded request,
// the floor tells tenants apart, not the keys inside one tenant.
func (s *Server) keyPrincipal(r *http.Request) Principal {
	key := presentedKey(r, false)
	if t := tenant.FromContext(r.Context()); t != nil {
		if r.Header.Get(tenant.Header) != "" {
			key = "" // the router's key, not the client's
		}
		key = "tenant\x00" + t.Namespace + "\x00" + key
	}
	sum := sha256.Sum256([]byte(key))
	return Principal{ID: hex.EncodeToString(sum[:]), TTFTFloor: s.cfg.TTFTFloor}
}

// principalFunc is the configured PrincipalFunc, or nil when no request can have a floor.
func (s *Server) principalFunc() PrincipalFunc {
	switch {
	case s.cfg.Principal != nil:
		return s.cfg.Principal
	case s.cfg.TTFTFloor > 0:
		return s.keyPrincipal
	}
	return nil
}

type principalKey struct{}

// withPrincipal returns r with its principal on the context, for generate.
func (s *Server) withPrincipal(r *http.Request) *http.Request {
	f := s.principalFunc()
	if f == nil {
		return r
	}
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, f(r)))
}

// principalOf returns the principal withPrincipal put on ctx.
func principalOf(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
