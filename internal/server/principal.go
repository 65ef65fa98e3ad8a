package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"stockpot/internal/engine"
	"stockpot/internal/runner"
	"stockpot/internal/tenant"
)

// PrincipalFunc names the principal (internal/runner's, the TTFT floor's) of a request that
// passed the API's auth. It runs once per
// API request, after auth, and only when some principal can have a floor (Config.TTFTFloor or
// Config.Principal set). The default, keyPrincipal, is the SHA-256 of the presented key with
// Config.TTFTFloor; a tenants layer swaps in one that reads its tenant from r's context (a
// finer ID than the tenant, the key, still tells a tenant's keys apart), with the tenant's
// floor.
type PrincipalFunc func(r *http.Request) runner.Principal

// keyPrincipal: the presented key's SHA-256 (hex), the server's floor. Without API keys the
// key is whatever the client sends; the floor still holds (a new principal knows nothing, so
// it is padded), clients just get their own hits unpadded only when they keep one key.
//
// With tenants the principal is the tenant (its namespace) and, when the key came straight
// from the client, the key: behind the router, whose own key is on every forwarded request,
// the floor tells tenants apart, not the keys inside one tenant.
func (s *Server) keyPrincipal(r *http.Request) runner.Principal {
	sum := keyIdentity(r)
	return runner.Principal{ID: hex.EncodeToString(sum[:]), TTFTFloor: s.cfg.TTFTFloor}
}

// keyIdentity is the SHA-256 of who presented r's key, as keyPrincipal says: the tenant's
// namespace and the client's key (none behind the router).
func keyIdentity(r *http.Request) [sha256.Size]byte {
	key := presentedKey(r, false)
	if t := tenant.FromContext(r.Context()); t != nil {
		if r.Header.Get(tenant.Header) != "" {
			key = "" // the router's key, not the client's
		}
		key = "tenant\x00" + t.Namespace + "\x00" + key
	}
	return sha256.Sum256([]byte(key))
}

// keyTag starts every salt under Config.KeyIsolation; its NUL bytes and its name keep it
// apart from the tenant and public tags (internal/tenant).
const keyTag = "\x00stockpot/key\x00"

// isolatedSalt is salt under Config.KeyIsolation for the key identity id: keyTag || id ||
// salt. Every generation's salt then starts with a fixed-length prefix that only the key
// decides, so no salt a client sends with one key equals a salt of another key: keys share
// no block (but public prefixes, which the engine finds by its public root, not the salt).
func isolatedSalt(id [sha256.Size]byte, salt string) string {
	return keyTag + string(id[:]) + salt
}

type isolationKey struct{}

// isolateKey puts spec's request in its key's own cache namespace (Config.KeyIsolation),
// after its tenant's salt was derived. A request that came without withPrincipal's identity
// (none: every API request passes it) takes the empty key's.
func (s *Server) isolateKey(ctx context.Context, req *engine.Request) {
	if !s.cfg.KeyIsolation {
		return
	}
	id, _ := ctx.Value(isolationKey{}).([sha256.Size]byte)
	req.CacheSalt = isolatedSalt(id, req.CacheSalt)
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

// withPrincipal returns r with its principal (the TTFT floor's, runner.WithPrincipal) and,
// under Config.KeyIsolation, its key identity on the context, for generate.
func (s *Server) withPrincipal(r *http.Request) *http.Request {
	ctx := r.Context()
	if s.cfg.KeyIsolation {
		ctx = context.WithValue(ctx, isolationKey{}, keyIdentity(r))
	}
	if f := s.principalFunc(); f != nil {
		ctx = runner.WithPrincipal(ctx, f(r))
	}
	if ctx == r.Context() {
		return r
	}
	return r.WithContext(ctx)
}

// CalibrateFloor seeds the TTFT floor's miss estimator before serving
// (runner.Runner.CalibrateFloor); it does nothing when no request can have a floor.
func (s *Server) CalibrateFloor(ctx context.Context) error {
	if s.principalFunc() == nil {
		return nil
	}
	return s.run.CalibrateFloor(ctx)
}
