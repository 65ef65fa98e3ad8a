package server

import (
	"net/http"

	"stockpot/internal/api"
	"stockpot/internal/pipeline"
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
	var ids []int32
	var err error
	switch ep := r.URL.Query().Get("endpoint"); ep {
	case pipeline.PathCompletions:
		var req *api.CompletionRequest
		if _, req, err = readRequest(s, r, api.ParseCompletionRequest, func(q *api.CompletionRequest) string { return q.Model }); err != nil {
			break
		}
		ids = req.PromptTokens
		if !req.PromptIsTokens {
			var fits bool
			if ids, fits = s.pipe.EncodeLimit(req.PromptText, true, true, s.cfg.ContextLength); !fits {
				err = api.Invalid("prompt", "prompt has more than %d tokens, the model's context length", s.cfg.ContextLength)
			}
		}
	case pipeline.PathChat:
		var req *api.ChatRequest
		if _, req, err = readRequest(s, r, api.ParseChatRequest, func(q *api.ChatRequest) string { return q.Model }); err == nil {
			_, ids, err = s.pipe.ChatPrompt(req)
		}
	case pipeline.PathResponses:
		var rr *api.ResponsesRequest
		if _, rr, err = readRequest(s, r, api.ParseResponsesRequest, func(q *api.ResponsesRequest) string { return q.Model }); err != nil {
			break
		}
		var prior []api.ResponsesItem
		if id := rr.PreviousResponseID; id != "" {
			prior, _ = s.responses.Get(responseKey(r, id))
		}
		var chat *api.ChatRequest
		if chat, err = rr.ChatRequest(prior); err == nil {
			_, ids, err = s.pipe.ChatPrompt(chat)
		}
	case pipeline.PathMessages:
		parse := func(b []byte) (*api.MessagesRequest, error) { return api.ParseMessagesRequest(b, false) }
		var req *api.MessagesRequest
		if _, req, err = readRequest(s, r, parse, func(q *api.MessagesRequest) string { return q.Model }); err == nil {
			_, ids, err = s.pipe.ChatPrompt(req.Chat)
		}
	default:
		err = api.Invalid("endpoint", "endpoint %s: want one of %s, %s, %s, %s", api.Quote(ep),
			pipeline.PathCompletions, pipeline.PathChat, pipeline.PathResponses, pipeline.PathMessages)
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
