package server

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/miss"
	"stockpot/internal/tenant"
)

// genSpec is a validated generation request.
type genSpec struct {
	req   engine.Request
	stops []string
	start time.Time // request arrival, for the e2e histogram
	// controlText renders control tokens other than the end of generation as their text
	// (llama.cpp's special=true), for the tool-call parser: [TOOL_CALLS], <|python_tag|> and
	// Kimi's section markers are control tokens in their models' vocabularies.
	controlText bool
	// cacheReport: the client asked for usage.cache.miss; segments are the chat prompt's
	// parts, to name where a miss is (miss.go).
	cacheReport bool
	segments    []miss.Segment
}

// genToken is a generated token with where its text starts in the choice's text.
type genToken struct {
	engine.Token
	offset int // Unicode code points of decoded text before this token
}

// genResult is a finished generation.
type genResult struct {
	finish string       // "stop" or "length"
	usage  engine.Usage // CompletionTokens = len(tokens)
	tokens []genToken   // every token accounted to the client, up to the stop string
}

// errClientGone ends a generation whose client disconnected or stopped reading.
var errClientGone = errors.New("server: client went away")

// prepare validates what needs the model (vocabulary, context length) and builds the engine
// request. defaultMax is used when the client gave no max_tokens.
func (s *Server) prepare(p *api.GenerationParams, prompt []int32, maxTokens *int, defaultMax, logprobs int, start time.Time) (*genSpec, error) {
	if err := s.checkVocab("prompt", prompt); err != nil {
		return nil, err
	}
	n := len(prompt)
	switch {
	case n == 0:
		return nil, api.Invalid("prompt", "prompt is empty")
	case n >= s.cfg.ContextLength:
		return nil, api.Invalid("prompt", "prompt has %d tokens, but the model's context length is %d (the prompt must leave room for at least one generated token)", n, s.cfg.ContextLength)
	case n > s.cfg.MaxPromptTokens:
		return nil, api.Invalid("prompt", "prompt has %d tokens, over this server's limit of %d (--max-prompt-tokens)", n, s.cfg.MaxPromptTokens)
	}
	if err := s.checkVocab("stop_token_ids", p.StopTokenIDs); err != nil {
		return nil, err
	}
	mt := defaultMax
	if maxTokens != nil {
		mt = *maxTokens
		if mt > s.cfg.ContextLength {
			return nil, api.Invalid("max_tokens", "max_tokens is %d, over the model's context length of %d", mt, s.cfg.ContextLength)
		}
	}
	sp := engine.SamplingParams{Temperature: 1}
	if p.Temperature != nil {
		sp.Temperature = float32(*p.Temperature)
	}
	if p.TopP != nil && *p.TopP < 1 {
		sp.TopP = float32(*p.TopP)
	}
	if p.TopK != nil && *p.TopK > 0 {
		sp.TopK = *p.TopK
	}
	if p.Seed != nil {
		sp.Seed, sp.HasSeed = uint64(*p.Seed), true
	}
	if p.PromptCacheKey != "" {
		s.metrics.keyed.Inc()
	}
	return &genSpec{
		req: engine.Request{
			Prompt: prompt, MaxTokens: mt, Sampling: sp, StopTokens: p.StopTokenIDs,
			IgnoreEOS: p.IgnoreEOS, Logprobs: logprobs, CacheSalt: p.CacheSalt,
			Pins: retentionPins(p, n), PinStrict: p.PinStrict, // prompt_cache_retention
			MaxOffloadTokens: p.MaxOffloadTokens,
		},
		stops:       p.StopStrings,
		start:       start,
		cacheReport: p.CacheReport,
	}, nil
}

// chatPrompt renders the request's messages and tools with the chat template and tokenizes
// the result. An error the template raises is a 400 that quotes it.
func (s *Server) chatPrompt(req *api.ChatRequest) (string, []int32, error) {
	text, err := s.tok.ApplyChatTemplate(chatMessages(req.Messages), chatOptions(req))
	if err != nil {
		return "", nil, api.Invalid("messages", "cannot apply the chat template: %v", err)
	}
	// Nothing over the context length can be served or is worth counting (/tokenize).
	ids, fits := s.encodeLimit(text, false, true, s.cfg.ContextLength)
	if !fits {
		return "", nil, api.Invalid("messages", "the rendered chat has more than %d tokens, the model's context length", s.cfg.ContextLength)
	}
	if s.bos >= 0 && (len(ids) == 0 || ids[0] != s.bos) {
		ids = append([]int32{s.bos}, ids...)
	}
	return text, ids, nil
}

// engineError maps an engine error to the API: the engine's refusals of the request are the
// client's fault (400), shutting down is 503, anything else is the server's (500).
func engineError(err error) *api.Error {
	switch {
	case errors.Is(err, engine.ErrPromptTooLong):
		return api.Invalid("prompt", "%v", err)
	case errors.Is(err, engine.ErrInvalid):
		return api.Invalid("", "%v", err)
	case errors.Is(err, engine.ErrPinBudget):
		return api.Invalid("pin_strict", "%v (pin_strict: retry without it for a partial pin)", err)
	case errors.Is(err, engine.ErrShutdown):
		return api.Unavailable("the server is shutting down; retry on another replica")
	default:
		return api.Internal("engine error: %v", err)
	}
}

// generate runs spec on the engine. started is called once the engine accepted the request
// (streaming handlers send their headers there). onDelta gets the text that is safe to show
// and the tokens consumed since the last call; an error from it means the client is gone.
// On success the result's tokens and usage describe exactly what the client was sent.
//
// generate always drains the engine's channel before returning.
func (s *Server) generate(ctx context.Context, spec *genSpec, started func() error,
	onDelta func(text string, toks []genToken) error) (*genResult, error) {
	t := tenant.FromContext(ctx)
	tenantRequest(t, &spec.req)
	s.isolateKey(ctx, &spec.req) // principal.go: --cache-isolation key
	res, err := s.generateRun(ctx, spec, started, onDelta)
	s.tenantMetrics.observe(t, res, err)
	return res, err
}

// generateRun is generate once the request carries its tenant's salt.
func (s *Server) generateRun(ctx context.Context, spec *genSpec, started func() error,
	onDelta func(text string, toks []genToken) error) (*genResult, error) {
	client := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	plan := s.planFloor(client, spec) // ttft_floor.go; nil without a floor
	out, err := s.gen.Generate(ctx, &spec.req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, errClientGone
		}
		return nil, engineError(err)
	}
	var floor *floorRun
	if plan != nil {
		floor = &floorRun{plan: plan, start: plan.at}
		if plan.padded {
			out = s.deliverShifted(ctx, out, plan.at.Add(plan.target), floor)
		}
	}
	defer func() {
		for range out { // drain so the engine never blocks on us
		}
	}()
	if started != nil {
		if err := started(); err != nil {
			return nil, errClientGone
		}
	}
	var (
		sd       = s.tok.NewStreamDecoder()
		stop     = stopFilter{stops: spec.stops}
		res      genResult
		runes    int
		phase    = genRunning
		final    *engine.Output
		emitted  deltaText // one piece passes uncopied
		batchBuf []genToken
	)
	for o := range out {
		if floor != nil && floor.shownAt.IsZero() && (len(o.Tokens) > 0 || o.Done) {
			s.floorFirst(floor)
		}
		if o.Done {
			oc := o
			final = &oc
		}
		if phase != genRunning {
			continue // draining after we cancelled; errors here are our cancellation's echo
		}
		if o.Err != nil {
			clientLeft := ctx.Err() != nil // checked before our own cancel below
			cancel()
			if clientLeft {
				return nil, errClientGone
			}
			return nil, engineError(o.Err)
		}
		emitted.Reset()
		batch := batchBuf[:0]
		for _, t := range o.Tokens {
			gt := genToken{Token: t, offset: runes}
			res.tokens = append(res.tokens, gt)
			batch = append(batch, gt)
			if s.tok.IsEOG(t.ID) || slices.Contains(spec.req.StopTokens, t.ID) {
				continue // end-of-generation and stop tokens count, but add no text (as vLLM)
			}
			piece := sd.Add(t.ID)
			if spec.controlText && s.tok.IsControl(t.ID) {
				piece += string(s.tok.Piece(t.ID))
			}
			runes += utf8.RuneCountInString(piece)
			e, hit := stop.push(piece)
			emitted.WriteString(e)
			if hit {
				phase = genCut
				cancel()
				break
			}
		}
		if o.Done && phase == genRunning {
			e, hit := stop.push(sd.Flush())
			emitted.WriteString(e)
			if hit {
				phase = genCut
			} else {
				emitted.WriteString(stop.flush())
			}
		}
		if emitted.Len() > 0 || len(batch) > 0 {
			if err := onDelta(emitted.String(), batch); err != nil {
				phase = genGone
				cancel()
			}
		}
		batchBuf = batch
	}
	finish, err := genOutcome(phase, final, ctx.Err() != nil, client.Err() != nil)
	if err != nil {
		return nil, err
	}
	res.finish = finish
	res.usage = genUsage(final, len(spec.req.Prompt))
	res.usage.CompletionTokens = len(res.tokens)
	if floor != nil {
		s.floorDone(floor, spec, &res) // masks a padded request's usage
	}
	s.explainMiss(spec, &res.usage) // miss.go
	return &res, nil
}

// genPhase is where a generation stands. Once it leaves genRunning the engine has been
// cancelled and generate only drains the stream, keeping the final output.
type genPhase uint8

const (
	genRunning genPhase = iota // passing the engine's outputs to the client
	genCut                     // a stop string ended the output (finish "stop")
	genGone                    // the client stopped reading (onDelta failed)
)

// genOutcome decides how a drained generation ends: its finish reason, or the error to
// return. final is the engine's final output (nil when none came), cancelled says the
// generation's context ended (the client's, or our own cancel), clientDone the client's.
func genOutcome(phase genPhase, final *engine.Output, cancelled, clientDone bool) (string, error) {
	switch {
	case phase == genGone || clientDone:
		// The client went away, even if the engine got to the end before it noticed: what
		// was made reached nobody.
		return "", errClientGone
	case phase == genCut:
		return engine.FinishStop, nil // whether or not the engine's last message raced our cancel
	case final == nil && cancelled:
		return "", errClientGone
	case final == nil:
		return "", api.Internal("the engine ended the request without a final message")
	}
	switch final.FinishReason {
	case engine.FinishStop, engine.FinishLength:
		return final.FinishReason, nil
	case engine.FinishCancelled:
		if cancelled {
			return "", errClientGone
		}
		return "", api.Unavailable("the engine cancelled the request (shutting down?)")
	}
	return "", api.Internal("the engine finished with an unknown reason %q", final.FinishReason)
}

// genUsage is the usage a generation reports: the engine's, or, only after a cut whose
// cancellation raced the engine's last message, the prompt counted as computed.
func genUsage(final *engine.Output, prompt int) engine.Usage {
	if final != nil && final.Usage != nil {
		return *final.Usage
	}
	return engine.Usage{PromptTokens: prompt, ComputedTokens: prompt}
}

// finishRequest records the outcome of a generation request in the metrics.
func (s *Server) finishRequest(res *genResult, err error, start time.Time) {
	switch {
	case err == nil:
		s.metrics.observe(res.usage, s.cfg.Now().Sub(start))
		s.countMiss(res.usage)
		s.metrics.request(http.StatusOK)
		s.dash.record(http.StatusOK, &res.usage, s.cfg.BlockSize, s.cfg.Now())
	case errors.Is(err, errClientGone):
		s.metrics.request(499) // nginx's "client closed request"
		s.dash.record(499, nil, s.cfg.BlockSize, s.cfg.Now())
	default:
		s.metrics.request(api.AsError(err).Status)
		s.dash.record(api.AsError(err).Status, nil, s.cfg.BlockSize, s.cfg.Now())
	}
}

// usageOf converts engine usage to the wire shape.
func usageOf(u engine.Usage) *api.Usage {
	return &api.Usage{
		PromptTokens:        u.PromptTokens,
		CompletionTokens:    u.CompletionTokens,
		TotalTokens:         u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails: api.PromptTokensDetails{CachedTokens: u.CachedTokens()},
		Cache:               cacheUsage(u),
		Timings: api.Timings{
			QueueMs: api.Millis(u.QueueMs), RestoreMs: api.Millis(u.RestoreMs), PrefillMs: api.Millis(u.PrefillMs),
			TTFTMs: api.Millis(u.TTFTMs), DecodeMs: api.Millis(u.DecodeMs),
		},
	}
}

// tokenIDs returns the ids of toks.
func tokenIDs(toks []genToken) []int32 {
	ids := make([]int32, len(toks))
	for i, t := range toks {
		ids[i] = t.ID
	}
	return ids
}

// generateAll runs spec to the end for a non-streamed answer and returns the whole text. On an
// error it has already answered the client (unless the client is gone).
func (s *Server) generateAll(w http.ResponseWriter, r *http.Request, spec *genSpec) (string, *genResult, error) {
	var text strings.Builder
	res, err := s.generate(r.Context(), spec, nil, func(t string, _ []genToken) error {
		text.WriteString(t)
		return nil
	})
	if err != nil && !errors.Is(err, errClientGone) {
		writeError(w, err)
	}
	return text.String(), res, err
}
