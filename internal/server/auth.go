package server

import (
	"net/http"

	"stockpot/internal/api"
	"stockpot/internal/apikey"
)

// bearer returns the token of "Authorization: Bearer TOKEN" (the scheme in any case).
func bearer(r *http.Request) (string, bool) { return apikey.Bearer(r) }

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
