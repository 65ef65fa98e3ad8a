package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Counter names read from the target. Stockpot's names come first; vLLM's v1 names (also in
// tokens) are understood so the same report works against it.
const (
	metricQueries      = "stockpot_prefix_cache_queries_total"
	metricHits         = "stockpot_prefix_cache_hits_total"
	metricPromptTokens = "stockpot_prompt_tokens_total"
	metricHitClasses   = "stockpot_engine_requests_total" // by label hit: cold, partial, warm
	vllmQueries        = "vllm:prefix_cache_queries_total"
	vllmHits           = "vllm:prefix_cache_hits_total"
)

// tierNames are the prompt-token sources, in report order.
var tierNames = []string{"computed", "device", "host", "disk", "remote"}

// counterSnapshot is one scrape of the prefix-cache counters. Present says whether the target
// exposes them at all.
type counterSnapshot struct {
	Present bool
	Queries float64
	Hits    float64            // summed over tiers
	Tiers   map[string]float64 // prompt tokens by source (Stockpot only); nil when absent
	// HitClasses is the engine's requests by hit class (cold, partial, warm; Stockpot only);
	// nil when absent.
	HitClasses map[string]float64
}

// parseCounters reads the Prometheus text format and picks out the prefix-cache counters.
func parseCounters(r io.Reader) (counterSnapshot, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return counterSnapshot{}, fmt.Errorf("parse metrics: %w", err)
	}
	sum := func(name string) (float64, bool) {
		f, ok := fams[name]
		if !ok {
			return 0, false
		}
		t := 0.0
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				t += m.GetCounter().GetValue()
			case m.Untyped != nil:
				t += m.GetUntyped().GetValue()
			case m.Gauge != nil:
				t += m.GetGauge().GetValue()
			}
		}
		return t, true
	}
	var s counterSnapshot
	q, okQ := sum(metricQueries)
	h, okH := sum(metricHits)
	if !okQ || !okH {
		q, okQ = sum(vllmQueries)
		h, okH = sum(vllmHits)
	}
	if okQ && okH {
		s.Present, s.Queries, s.Hits = true, q, h
	}
	s.Tiers = byLabel(fams, metricPromptTokens, "source")
	s.HitClasses = byLabel(fams, metricHitClasses, "hit")
	return s, nil
}

// byLabel sums one counter family by the value of one label; nil when the family is absent.
func byLabel(fams map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	f, ok := fams[name]
	if !ok {
		return nil
	}
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label {
				out[l.GetValue()] += m.GetCounter().GetValue() + m.GetUntyped().GetValue()
			}
		}
	}
	return out
}

// parseSeries reads the Prometheus text format into a series: counters, gauges and untyped
// samples keyed `name{a="x",b="y"}` (labels sorted by name, as the text format writes them).
func parseSeries(r io.Reader) (series, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	out := series{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Untyped != nil:
				v = m.GetUntyped().GetValue()
			default:
				continue
			}
			labels := m.GetLabel()
			sort.Slice(labels, func(i, j int) bool { return labels[i].GetName() < labels[j].GetName() })
			key := name
			if len(labels) > 0 {
				parts := make([]string, len(labels))
				for i, l := range labels {
					parts[i] = fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
				}
				key += "{" + strings.Join(parts, ",") + "}"
			}
			out[key] += v
		}
	}
	return out, nil
}

// scrape fetches target/metrics. A target without /metrics (404, or not Prometheus text)
// gives a snapshot with Present false and no error: "not reported" is a result, not a failure.
func scrape(ctx context.Context, c *http.Client, target, apiKey string) (counterSnapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(target, "/")+"/metrics", nil)
	if err != nil {
		return counterSnapshot{}, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := c.Do(req)
	if err != nil {
		return counterSnapshot{}, fmt.Errorf("scrape %s/metrics: %w", target, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return counterSnapshot{}, nil
	}
	s, err := parseCounters(resp.Body)
	if err != nil {
		return counterSnapshot{}, nil
	}
	return s, nil
}

// counterDelta is after − before. Present only when both scrapes had the counters.
func counterDelta(before, after counterSnapshot) counterSnapshot {
	d := counterSnapshot{Present: before.Present && after.Present}
	if !d.Present {
		return d
	}
	d.Queries = after.Queries - before.Queries
	d.Hits = after.Hits - before.Hits
	d.Tiers = mapDelta(before.Tiers, after.Tiers)
	d.HitClasses = mapDelta(before.HitClasses, after.HitClasses)
	return d
}

// mapDelta is after − before by key; nil unless both are present.
func mapDelta(before, after map[string]float64) map[string]float64 {
	if before == nil || after == nil {
		return nil
	}
	out := map[string]float64{}
	for k, v := range after {
		out[k] = v - before[k]
	}
	return out
}

// scrapeServers scrapes the servers the numbers come from: cfg.MetricsURLs summed when set,
// else cfg.Target. The sum is Present only when every server has the counters (one replica
// without them would make the fleet's rate a guess).
func scrapeServers(ctx context.Context, c *http.Client, cfg Config) (counterSnapshot, error) {
	if len(cfg.MetricsURLs) == 0 {
		return scrape(ctx, c, cfg.Target, cfg.metricsKey())
	}
	sum := counterSnapshot{Present: true}
	for _, u := range cfg.MetricsURLs {
		s, err := scrape(ctx, c, u, cfg.metricsKey())
		if err != nil {
			return counterSnapshot{}, err
		}
		sum.Present = sum.Present && s.Present
		sum.Queries += s.Queries
		sum.Hits += s.Hits
		sum.Tiers = addInto(sum.Tiers, s.Tiers)
		sum.HitClasses = addInto(sum.HitClasses, s.HitClasses)
	}
	if !sum.Present {
		return counterSnapshot{}, nil
	}
	return sum, nil
}

// metricsKey is the key sent to /metrics: the admin key when given (a server with an admin
// key keeps /metrics for it), else the API key.
func (cfg Config) metricsKey() string {
	if cfg.AdminKey != "" {
		return cfg.AdminKey
	}
	return cfg.APIKey
}

// addInto adds src into dst by key, allocating dst when src is the first present.
func addInto(dst, src map[string]float64) map[string]float64 {
	if src == nil {
		return dst
	}
	if dst == nil {
		dst = map[string]float64{}
	}
	for k, v := range src {
		dst[k] += v
	}
	return dst
}
