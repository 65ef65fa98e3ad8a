package dashboard

import (
	"bytes"
	_ "embed"
	"math"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The vendored chart library (uPlot 1.6.32, MIT: assets/uPlot.LICENSE) and the page.
var (
	//go:embed assets/uPlot.iife.min.js
	uplotJS []byte
	//go:embed assets/uPlot.min.css
	uplotCSS []byte
	//go:embed assets/uPlot.LICENSE
	uplotLicense []byte
	//go:embed assets/page.html
	pageHTML []byte
	//go:embed assets/page.js
	pageJS []byte
	//go:embed assets/page.css
	pageCSS []byte
)

// Role picks the page's panels.
type Role string

// The two dashboards.
const (
	RoleServe Role = "serve"
	RoleRoute Role = "route"
)

// Page returns the self-contained dashboard page for role: the library, its licence, the
// styles and the script are inlined, so the page needs no other request but its event stream
// (at events, relative to the page).
func Page(role Role) []byte {
	r := strings.NewReplacer(
		"{{ROLE}}", string(role),
		"{{UPLOT_CSS}}", string(uplotCSS),
		"{{PAGE_CSS}}", string(pageCSS),
		"{{UPLOT_LICENSE}}", strings.ReplaceAll(string(uplotLicense), "*/", "* /"),
		"{{UPLOT_JS}}", string(uplotJS),
		"{{PAGE_JS}}", string(pageJS),
	)
	return []byte(r.Replace(string(pageHTML)))
}

// Flatten turns the stockpot_* families of a gather into name{label="value",...} → value:
// counters and gauges by value, histograms and summaries as their _sum and _count. A NaN
// (the hit-rate gauge with no queries) becomes nil, JSON's null. Labels are in name order,
// as Prometheus writes them.
func Flatten(g prometheus.Gatherer) (map[string]any, error) {
	mfs, err := g.Gather()
	out := map[string]any{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "stockpot_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := seriesKey(name, m.GetLabel())
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = number(m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				out[key] = number(m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				out[key] = number(m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				out[seriesKey(name+"_sum", m.GetLabel())] = number(m.GetHistogram().GetSampleSum())
				out[seriesKey(name+"_count", m.GetLabel())] = float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_SUMMARY:
				out[seriesKey(name+"_sum", m.GetLabel())] = number(m.GetSummary().GetSampleSum())
				out[seriesKey(name+"_count", m.GetLabel())] = float64(m.GetSummary().GetSampleCount())
			}
		}
	}
	return out, err
}

func number(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}

func seriesKey(name string, labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return name
	}
	ls := append([]*dto.LabelPair(nil), labels...)
	sort.Slice(ls, func(i, j int) bool { return ls[i].GetName() < ls[j].GetName() })
	var b bytes.Buffer
	b.WriteString(name)
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteString(`="`)
		b.WriteString(l.GetValue())
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}
