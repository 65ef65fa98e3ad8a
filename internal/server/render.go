package server

import (
	"net/http"

	"stockpot/internal/api"
)

// renderPath serves POST /tokenize/render?endpoint=PATH: the prompt tokens a request body of
// any dialect renders to, exactly as the endpoint PATH (/v1/completions,
// /v1/chat/completions, /v1/responses or /v1/messages) would render it: chat template,
// tools, chat_template_kwargs, instructions, system blocks, BOS. A router has no tokenizer;
// it asks a replica here to place a request by its prefix (internal/router).
//
// The answer is /tokenize's shape ({"tokens","count","max_model_len"}). A Responses body's
// previous_response_id is followed when this replica stores that response (for the caller's
// tenant), and otherwise left out: the tokens are then the new input's alone.
//
// Auth and cost are /tokenize's (handleTokenize): the API's right; the body is at most
// --max-body-bytes, rendering is linear in it, and tokenizing stops at the context length
// (a longer prompt is a 400, as it would be on the endpoint itself). A body the endpoint
// would refuse is refused here with the same error; the endpoint parameter must name one
// of the four paths (400 otherwise).
const renderPath = "/tokenize/render"

func (s *Server) handleTokenizeRender(w http.ResponseWriter, r *http.Request) {
	ep := r.URL.Query().Get("endpoint")
	body, err := s.readBody(r)
	var ids []int32
	if err == nil {
		prior := func(id string) []api.ResponsesItem {
			items, _ := s.responses.Get(responseKey(r, id)) // the caller's tenant's only
			return items
		}
		ids, err = s.pipe.RenderBody(ep, body, s.checkModel, prior)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if ids == nil {
		ids = []int32{}
	}
	writeJSON(w, http.StatusOK, api.TokenizeResponse{Tokens: ids, Count: len(ids), MaxModelLen: s.cfg.ContextLength})
}
