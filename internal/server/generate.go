package server

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"stockpot/internal/api"
	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
	"stockpot/internal/runner"
	"stockpot/internal/tenant"
)

// generate runs spec (built by s.pipe) on the runner, in the request's tenant's cache
// namespace and, under --cache-isolation key, its key's; the tenant's series count it.
func (s *Server) generate(ctx context.Context, spec *pipeline.Spec, started func() error,
	onDelta func(text string, toks []runner.Token) error) (*runner.Result, error) {
	t := tenant.FromContext(ctx)
	tenantRequest(t, &spec.Req)
	s.isolateKey(ctx, &spec.Req) // principal.go: --cache-isolation key
	res, err := s.run.Generate(ctx, spec, started, onDelta)
	s.tenantMetrics.observe(t, res, err)
	return res, err
}

// specReady counts what the metrics count of a built generation request.
func (s *Server) specReady(p *api.GenerationParams) {
	if p.PromptCacheKey != "" {
		s.metrics.keyed.Inc()
	}
}

// finishRequest records the outcome of a generation request in the metrics.
func (s *Server) finishRequest(res *runner.Result, err error, start time.Time) {
	switch {
	case err == nil:
		s.metrics.observe(res.Usage, s.cfg.Now().Sub(start))
		s.run.CountMiss(res.Usage)
		s.metrics.request(http.StatusOK)
		s.dash.record(http.StatusOK, &res.Usage, s.cfg.BlockSize, s.cfg.Now())
	case errors.Is(err, runner.ErrClientGone):
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

// generateAll runs spec to the end for a non-streamed answer and returns the whole text. On an
// error it has already answered the client (unless the client is gone).
func (s *Server) generateAll(w http.ResponseWriter, r *http.Request, spec *pipeline.Spec) (string, *runner.Result, error) {
	var text strings.Builder
	res, err := s.generate(r.Context(), spec, nil, func(t string, _ []runner.Token) error {
		text.WriteString(t)
		return nil
	})
	if err != nil && !errors.Is(err, runner.ErrClientGone) {
		writeError(w, err)
	}
	return text.String(), res, err
}

// The chat field names planChat's errors use, as Responses and Messages spell them.
var (
	responsesParams = []paramRename{{"response_format.json_schema.schema", "text.format.schema"}, {"response_format", "text.format"}, {".function.parameters", ".parameters"}}
	messagesParams  = []paramRename{{".function.parameters", ".input_schema"}}
)

type paramRename struct{ from, to string }

// renameParams returns err with the chat field names of its param and message renamed (the
// first rename that applies to each); an error that is not an *api.Error is returned as is.
func renameParams(err error, renames []paramRename) error {
	e, ok := err.(*api.Error)
	if !ok {
		return err
	}
	c := *e
	for _, r := range renames {
		if strings.Contains(c.Param, r.from) || strings.Contains(c.Message, r.from) {
			c.Param = strings.Replace(c.Param, r.from, r.to, 1)
			c.Message = strings.ReplaceAll(c.Message, r.from, r.to)
			break
		}
	}
	return &c
}
