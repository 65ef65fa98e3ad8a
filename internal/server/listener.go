package server

import (
	"net/http"

	"stockpot/internal/api"
	"stockpot/internal/connlimit"
)

// The connection listener (how many connections at once, per client, the waits for a head,
// the health reserve) is internal/connlimit's; Serve builds it from Config and this file
// wires the rest.

// healthGate serves a health-only connection's GET /health and /ready and answers anything
// else on it 503 in the API's error shape, closing it: the reserve is for probes, so that
// they are answered while clients hold every other connection.
func healthGate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !connlimit.HealthOnly(r.Context()) || r.Method == http.MethodGet && (r.URL.Path == "/health" || r.URL.Path == "/ready") {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		e := api.Unavailable("this server holds all the connections it takes (--max-connections); this one, from the reserve kept for /health, serves only GET /health and /ready; retry")
		e.Code = "connection_limit"
		writeError(w, e)
	})
}

// connectionsFrom is the connections Serve's listener holds, and those of ip.
func (s *Server) connectionsFrom(ip string) (open, fromIP int) {
	if l := s.listener.Load(); l != nil {
		return l.Usage(ip)
	}
	return 0, 0
}
