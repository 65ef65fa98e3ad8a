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
	s.isolateKey(ctx, &spec.Req)                                // principal.go: --cache-isolation key
	if pulled := s.cfg.Handoff.Pull(ctx, spec); pulled != nil { // a decode's blocks (handoff.go)
		defer s.cfg.Handoff.Drop(context.WithoutCancel(ctx), pulled)
	}
	res, err := s.run.Generate(ctx, spec, started, onDelta)
	s.tenantMetrics.observe(t, res, err)
	return res, err
}

// readRequest reads a request's body and parses it (parse, an api.Parse*); the model it
// names (model) must be this server's.
func readRequest[T any](s *Server, r *http.Request, parse func([]byte) (T, error), model func(T) string) ([]byte, T, error) {
	var zero T
	body, err := s.readBody(r)
	if err != nil {
		return nil, zero, err
	}
	req, err := parse(body)
	if err == nil {
		err = s.checkModel(model(req))
	}
	if err != nil {
		return nil, zero, err
	}
	return body, req, nil
}

// readGeneration is readRequest for a request that would use the engine: refused while the
// server drains.
func readGeneration[T any](s *Server, r *http.Request, parse func([]byte) (T, error), model func(T) string) ([]byte, T, error) {
	body, req, err := readRequest(s, r, parse, model)
	if err == nil && s.draining.Load() {
		err = api.Unavailable("the server is draining; retry on another replica")
	}
	return body, req, err
}

// accepted records a generation request built from body: the prompt_cache_key count, and
// the body for GET /v1/requests/recent (recent.go).
func (s *Server) accepted(r *http.Request, body []byte, p *api.GenerationParams) {
	if p.PromptCacheKey != "" {
		s.metrics.keyed.Inc()
	}
	s.recordRequest(r, body)
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
