package server

import (
	"net"
	"net/http"
	"strconv"

	"stockpot/internal/api"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
)

// Prefill/decode disaggregation (internal/handoff says why and how; Config.Handoff is this
// replica's handoff.Node). A request carrying kv_transfer_params is one half of a handed-off
// generation: a prefill (do_remote_decode) is computed under a lease and answered with the
// params naming its blocks (registerTransfer); a decode (do_remote_prefill) pulls them before
// it runs (generate). Node.Check refuses params the role does not take.

// registerTransfer offers a prefill request's computed prompt to its decode and returns the
// kv_transfer_params of the answer (nil for any other request). r's Host names this replica.
func (s *Server) registerTransfer(r *http.Request, spec *pipeline.Spec, res *runner.Result) *api.KVTransferParams {
	if res == nil || len(res.Tokens) == 0 {
		return nil
	}
	host, port := advertised(r)
	return s.cfg.Handoff.Offer(spec, res.Tokens[0].ID, host, port, r.Header.Get("X-Request-Id"), s.cfg.Now())
}

// advertised is the host and port a decode reaches this replica at: the Host the request
// came to (the address the proxy or router used), else the listener's.
func advertised(r *http.Request) (string, int) {
	host, p, err := net.SplitHostPort(r.Host)
	if err != nil {
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			host, p, _ = net.SplitHostPort(a.String())
		}
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

// handleTransfer serves GET /v1/kv/transfer/{id} on a prefill replica.
func (s *Server) handleTransfer(w http.ResponseWriter, r *http.Request) {
	s.cfg.Handoff.ServeTransfer(w, r, writeError)
}
