package runner

import (
	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/miss"
	"stockpot/internal/pipeline"
)

// Miss explanations: the engine fixes the evidence at admission (engine.Usage.Miss); here,
// on the request's goroutine, the text half names the cause (miss.Explain), counted for every
// request in stockpot_prefix_miss_total{cause} and returned as usage.cache.miss when the
// request set cache_report.

func newMissCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stockpot_prefix_miss_total",
		Help: "Requests that reused fewer prompt blocks than they could, by why the prompt left the longest cached chain.",
	}, []string{"cause"})
	for _, cause := range miss.Causes {
		c.WithLabelValues(string(cause)) // every series exists from the start, at 0
	}
	return c, reg.Register(c)
}

// explainMiss names the cause of u's miss (u.Miss, nil when the prompt reused all it could):
// u.Miss.Cause becomes Explain's answer, and the whole report is kept with the evidence when
// the request asked for it.
func (r *Runner) explainMiss(spec *pipeline.Spec, u *engine.Usage) {
	if u.Miss == nil {
		return
	}
	rep := miss.Explain(*u.Miss, spec.Req.Prompt, spec.Segments, r.tok)
	u.Miss.Cause = rep.Cause
	if spec.CacheReport {
		u.Miss.Report = &rep
	}
}

// CountMiss counts a finished request's miss (the server calls it for the requests whose
// answer reached the client, as the usage counters count them).
func (r *Runner) CountMiss(u engine.Usage) {
	if u.Miss != nil && u.Miss.Cause != "" {
		r.misses.WithLabelValues(string(u.Miss.Cause)).Inc()
	}
}
