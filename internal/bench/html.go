package bench

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"regexp"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	colorCold   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colorWarm   = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	colorServer = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	colorClient = color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff}
)

// svgProlog matches the XML declaration and doctype vgsvg writes, which do not belong inside
// an HTML document.
var svgProlog = regexp.MustCompile(`(?s)<\?xml.*?\?>|<!DOCTYPE[^>]*>`)

// renderSVG draws p as an inline <svg> element, 6 × 3.5 inches.
func renderSVG(p *plot.Plot) (template.HTML, error) { return renderSVGSize(p, 6*vg.Inch, 3.5*vg.Inch) }

// renderSVGSize draws p as an inline <svg> element of the given size.
func renderSVGSize(p *plot.Plot, w, h vg.Length) (template.HTML, error) {
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", err
	}
	return template.HTML(bytes.TrimSpace(svgProlog.ReplaceAll(b.Bytes(), nil))), nil
}

func cdf(xs []float64) plotter.XYs {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	pts := make(plotter.XYs, len(s))
	for i, x := range s {
		pts[i] = plotter.XY{X: x, Y: float64(i+1) / float64(len(s))}
	}
	return pts
}

func addLine(p *plot.Plot, name string, pts plotter.XYs, c color.Color) error {
	if len(pts) == 0 {
		return nil
	}
	l, s, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	l.Color, s.Color = c, c
	s.Radius = vg.Points(2)
	p.Add(l, s)
	p.Legend.Add(name, l, s)
	return nil
}

func (r *Report) ttftPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "TTFT CDF: cold (first turn) vs warm (later turns)"
	p.X.Label.Text = "TTFT (ms)"
	p.Y.Label.Text = "fraction of requests"
	p.Y.Min, p.Y.Max = 0, 1
	var cold, warm []float64
	for _, q := range r.PerRequest {
		if q.TTFTMs == nil {
			continue
		}
		if q.Turn == 0 {
			cold = append(cold, *q.TTFTMs)
		} else {
			warm = append(warm, *q.TTFTMs)
		}
	}
	if err := addLine(p, fmt.Sprintf("cold (n=%d)", len(cold)), cdf(cold), colorCold); err != nil {
		return nil, err
	}
	if err := addLine(p, fmt.Sprintf("warm (n=%d)", len(warm)), cdf(warm), colorWarm); err != nil {
		return nil, err
	}
	p.Legend.Top = false
	p.Legend.Left = false
	return p, nil
}

func (r *Report) hitRatePlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Prefix-cache hit rate over time (per window)"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "hit rate"
	p.Y.Min, p.Y.Max = 0, 1
	var srv, cli plotter.XYs
	for _, t := range r.HitRateOverTime {
		if t.Server != nil {
			srv = append(srv, plotter.XY{X: t.AtS, Y: *t.Server})
		}
		if t.Client != nil {
			cli = append(cli, plotter.XY{X: t.AtS, Y: *t.Client})
		}
	}
	if err := addLine(p, "server (/metrics deltas)", srv, colorServer); err != nil {
		return nil, err
	}
	if err := addLine(p, "client (usage cached_tokens)", cli, colorClient); err != nil {
		return nil, err
	}
	if len(srv) == 0 && len(cli) == 0 {
		p.Title.Text += ": not reported by the target"
	}
	p.Legend.Top = false
	return p, nil
}

// barPlot draws one bar per present value; missing values get no bar and say so in the label.
func barPlot(title, ylabel string, names []string, vals []*float64, c color.Color) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	v := make(plotter.Values, len(vals))
	labels := make([]string, len(names))
	for i, x := range vals {
		labels[i] = names[i]
		if x == nil {
			labels[i] += " (not reported)"
			continue
		}
		v[i] = *x
	}
	bars, err := plotter.NewBarChart(v, vg.Points(28))
	if err != nil {
		return nil, err
	}
	bars.Color = c
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(labels...)
	p.Y.Min = 0
	return p, nil
}

func (r *Report) tierPlot() (*plot.Plot, error) {
	title := "Prompt tokens by tier (server /metrics deltas)"
	vals := make([]*float64, len(tierNames))
	switch {
	case r.PerTier != nil:
		for i, t := range tierNames {
			vals[i] = ptr(r.PerTier[t])
		}
	case r.PerTierClient != nil:
		title = "Prompt tokens by tier (client usage.cache; server did not report)"
		for i, t := range tierNames {
			vals[i] = ptr(float64(r.PerTierClient[t]))
		}
	default:
		title = "Prompt tokens by tier: not reported by the target"
	}
	return barPlot(title, "tokens", tierNames, vals, colorServer)
}

func (r *Report) predictionPlot() (*plot.Plot, error) {
	names := []string{"predicted", "server", "client"}
	vals := []*float64{r.PredictedHitRate, r.ServerHitRate, r.ClientCachedRatio}
	if r.NaiveHitRate != nil {
		names = append([]string{"naive (T-1)/(T+1)"}, names...)
		vals = append([]*float64{r.NaiveHitRate}, vals...)
	}
	p, err := barPlot("Predicted vs measured hit rate", "hit rate", names, vals, colorCold)
	if err != nil {
		return nil, err
	}
	p.Y.Max = 1
	return p, nil
}

type htmlFigure struct {
	ID  string
	SVG template.HTML
}

type htmlRow struct{ Key, Value string }

var reportTemplate = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>stockpot bench: {{.Title}}</title>
<link rel="icon" href="data:,">
<style>
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 70em; }
table { border-collapse: collapse; margin-bottom: 2em; }
td { padding: 0.2em 1em 0.2em 0; border-bottom: 1px solid #ddd; vertical-align: top; }
td:first-child { color: #555; }
th { text-align: left; padding: 0.2em 1em 0.2em 0; border-bottom: 2px solid #bbb; }
h2 { font-size: 1.1em; margin-top: 1.5em; }
figure { margin: 0 0 2em 0; }
figure svg { max-width: 100%; height: auto; }
</style>
</head>
<body>
<h1>stockpot bench: {{.Title}}</h1>
<table id="summary">
{{range .Rows}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>
{{end}}</table>
{{range .Figures}}<figure id="{{.ID}}" class="plot">
{{.SVG}}
</figure>
{{end}}{{range .Tables}}<h2>{{.Title}}</h2>
<table id="{{.ID}}" class="data">
<tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}{{if .Prices}}<p>Prices are list prices as of the dates shown, editable with <code>--prices FILE</code> (JSON or YAML).
"With breakpoints" prices cache reads at the read price, cache writes at the 5-minute or 1-hour
write price and the rest as uncached input; "without" prices every prompt token as uncached input.
Missing measurements read "not reported", never 0.</p>{{else}}<p>Missing measurements read "not reported", never 0.</p>{{end}}
</body>
</html>
`))

// HTML renders the self-contained report page: the summary table and four inline SVG plots.
// It loads nothing from the network: no scripts, stylesheets or fonts outside the page.
// A longctx report has its own rows, tables and two plots (TTFT and cache bytes against
// prompt length) in place of the four.
func (r *Report) HTML() ([]byte, error) {
	rows := append(r.summaryRows(), htmlRow{"prediction basis", r.PredictionBasis}, htmlRow{"cost basis", r.CostBasis})
	type plotMaker struct {
		id   string
		make func() (*plot.Plot, error)
	}
	plots := []plotMaker{
		{"ttft-cdf", r.ttftPlot},
		{"hit-rate-over-time", r.hitRatePlot},
		{"tier-usage", r.tierPlot},
		{"predicted-vs-measured", r.predictionPlot},
	}
	var tables []htmlTable
	if r.LongCtx != nil {
		rows, tables = r.longCtxRows(), r.longCtxTables()
		plots = []plotMaker{{"longctx-ttft-vs-length", r.longTTFTPlot}, {"longctx-bytes-vs-length", r.longBytesPlot}}
	}
	if a := r.Accept; a != nil {
		rows = append(rows, htmlRow{"acceptance gate", verdict(a.Pass)},
			htmlRow{"  TPOT ms p50 cold / warm / partial", fmt.Sprintf("%s / %s / %s", p50(a.TPOTCold), p50(a.TPOTWarm), p50(a.TPOTPartial))},
			htmlRow{"  basis", a.Basis})
		for _, n := range a.Notes {
			rows = append(rows, htmlRow{"  note", n})
		}
		tables = append(tables, r.acceptTable())
	}
	w, h := 6*vg.Inch, 3.5*vg.Inch
	if r.LongCtx != nil {
		w, h = 8*vg.Inch, 4.5*vg.Inch // two plots, each with up to five lines and a legend
	}
	var figs []htmlFigure
	for _, pl := range plots {
		p, err := pl.make()
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", pl.id, err)
		}
		svg, err := renderSVGSize(p, w, h)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", pl.id, err)
		}
		figs = append(figs, htmlFigure{pl.id, svg})
	}
	var out bytes.Buffer
	err := reportTemplate.Execute(&out, struct {
		Title   string
		Rows    []htmlRow
		Figures []htmlFigure
		Tables  []htmlTable
		Prices  bool
	}{fmt.Sprintf("%s against %s", r.workloadTitle(), r.Target), rows, figs, tables, r.LongCtx == nil})
	return out.Bytes(), err
}

// workloadTitle is the workload's name with its mode when that is not plain text.
func (r *Report) workloadTitle() string {
	if r.Mode == "tools" {
		return fmt.Sprintf("%s with %d tools", r.Workload, r.Tools)
	}
	return r.Workload
}
