package server

import (
	"fmt"
	"net/http"

	"stockpot/internal/api"
)

func (s *Server) modelCard() api.ModelCard {
	st := s.gen.Stats()
	c := api.ModelCard{
		ID: s.cfg.ModelName, Object: "model", Created: s.started.Unix(), OwnedBy: "stockpot",
		MaxModelLen: s.cfg.ContextLength,
		Stockpot: api.ModelExtras{
			Fingerprint: s.cfg.Fingerprint, ContextLength: s.cfg.ContextLength, BlockSize: s.cfg.BlockSize,
			MinReusableTokens: st.MinReusableTokens, StateBytes: st.StateBytes,
		},
	}
	if st.MinReusableTokens > 0 && s.cfg.ContextLength > 0 && st.MinReusableTokens >= s.cfg.ContextLength {
		c.Stockpot.Warning = fmt.Sprintf("prefixes are reusable in units of %d tokens and the context is %d: no prompt can hit the cache", st.MinReusableTokens, s.cfg.ContextLength)
	}
	return c
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.ModelList{Object: "list", Data: []api.ModelCard{s.modelCard()}})
}

// modelHandler serves GET /v1/models/{name}.
func (s *Server) modelHandler(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if name != s.cfg.ModelName {
			writeError(w, api.ModelNotFound(name, s.cfg.ModelName))
			return
		}
		writeJSON(w, http.StatusOK, s.modelCard())
	}
}

// checkModel accepts an empty model or the served name.
func (s *Server) checkModel(model string) error {
	if model != "" && model != s.cfg.ModelName {
		return api.ModelNotFound(model, s.cfg.ModelName)
	}
	return nil
}

// handleTokenize serves POST /tokenize (vLLM's): a prompt or a chat, tokenized.
//
// Auth: it takes the API's right (endpointRight), like /v1/completions, and no other: it
// reveals nothing of other tenants (only the vocabulary, which the model card's clients
// hold anyway) and costs no more than a completion's prompt, which the same key may send.
// So with --admin-key alone it is open exactly as the completions are; an operator who
// wants it closed sets --api-key, which closes both. What bounds it is cost, as for every
// prompt: the body is at most --max-body-bytes, tokenizing is linear in it (every
// pre-tokenizer streams, merges take O(n log n) time and a fixed number of bytes per
// character: internal/tokenizer's EncodeBytesPerByte), and encodeLimit stops at the context
// length, refusing a text the byte bound says cannot fit before tokenizing any of it.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	_, req, err := readRequest(s, r, api.ParseTokenizeRequest, func(q *api.TokenizeRequest) string { return q.Model })
	if err != nil {
		writeError(w, err)
		return
	}
	var ids []int32
	if req.Prompt != nil {
		// Capped at the context length: nothing longer could be sent as a prompt, and a
		// 15 MiB text is not worth tokenizing to say so.
		var fits bool
		if ids, fits = s.pipe.EncodeLimit(*req.Prompt, req.WantSpecial(), true, s.cfg.ContextLength); !fits {
			writeError(w, api.Invalid("prompt", "prompt has more than %d tokens, the model's context length; /tokenize counts at most that many", s.cfg.ContextLength))
			return
		}
	} else {
		_, ids, err = s.pipe.ChatPrompt(req.Chat())
		if err != nil {
			writeError(w, err)
			return
		}
	}
	if ids == nil {
		ids = []int32{}
	}
	writeJSON(w, http.StatusOK, api.TokenizeResponse{Tokens: ids, Count: len(ids), MaxModelLen: s.cfg.ContextLength})
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	_, req, err := readRequest(s, r, api.ParseDetokenizeRequest, func(q *api.DetokenizeRequest) string { return q.Model })
	if err != nil {
		writeError(w, err)
		return
	}
	if err := s.pipe.CheckVocab("tokens", req.Tokens); err != nil {
		writeError(w, err)
		return
	}
	text, err := s.tok.DecodeChecked(req.Tokens)
	if err != nil {
		writeError(w, api.Invalid("tokens", "cannot detokenize: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, api.DetokenizeResponse{Prompt: text})
}

// handleHealth answers load balancers, and tells a router the replica's role in
// prefill/decode disaggregation ("both", "prefill" or "decode").
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	role := s.cfg.Handoff.RoleName()
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining", "role": role})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "role": role})
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if s.gatherer == nil {
		writeError(w, api.Internal("metrics are registered on a Registerer that cannot be gathered; serve it elsewhere"))
		return
	}
	s.metricsHandler.ServeHTTP(w, r)
}
