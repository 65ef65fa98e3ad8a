package blendeval

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"regexp"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Named is a Report with the model it measured ("default (llama, 8 layers)").
type Named struct {
	Model string
	*Report
}

// Markdown is the quality table: one row per model, fraction and policy.
func Markdown(rs []Named) string {
	var b strings.Builder
	b.WriteString("| model | recompute | policy | blended tok | recomputed tok | K dev (first / mid / last layer) | V dev (last layer) | KL next token (nats) | mean KL, 32 steps | top-1 agreement, 32 steps | greedy tokens equal before the first difference | bitwise |\n")
	b.WriteString("|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|---|\n")
	for _, n := range rs {
		for _, r := range n.Results {
			L := len(r.KDev)
			fmt.Fprintf(&b, "| %s | %g | %s | %d | %d | %.2g / %.2g / %.2g | %.2g | %.3g | %.3g | %.0f%% | %d of %d | %v |\n",
				n.Model, r.Fraction, policyLabel(r.Policy), r.Blended, r.Recomputed, r.KDev[0], r.KDev[L/2], r.KDev[L-1], r.VDev[L-1],
				r.KL, r.MeanKL, 100*r.Top1, r.GreedyPrefix, len(r.Greedy), yesNo(r.Bitwise))
		}
	}
	return b.String()
}

// policyLabel is a policy's name as the papers write it.
func policyLabel(p string) string {
	switch p {
	case "epic":
		return "EPIC"
	case "cacheblend":
		return "CacheBlend"
	}
	return p
}

// dashes tells the policies apart in the plots: EPIC solid, CacheBlend dashed.
func dashes(p string) []vg.Length {
	if p == "cacheblend" {
		return []vg.Length{vg.Points(5), vg.Points(3)}
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
}

// layerPlot is one model's K deviation by layer, a line per fraction and policy (a color per
// fraction; EPIC solid, CacheBlend dashed).
func layerPlot(n Named) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = n.Model
	p.X.Label.Text = "layer"
	p.Y.Label.Text = "relative L2 deviation of K"
	// The lines rise from layer 0 and flatten: room above them, top left, holds the legend,
	// one entry per fraction (its color; the caption says which policy is dashed).
	color := map[float64]int{}
	maxDev := 0.0
	for _, r := range n.Results {
		if _, ok := color[r.Fraction]; !ok {
			color[r.Fraction] = len(color)
		}
		if r.Bitwise {
			continue // identically 0
		}
		pts := make(plotter.XYs, len(r.KDev))
		for l, d := range r.KDev {
			pts[l] = plotter.XY{X: float64(l), Y: d}
			maxDev = max(maxDev, d)
		}
		ln, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		c := palette[color[r.Fraction]%len(palette)]
		ln.Color, sc.Color, ln.Dashes = c, c, dashes(r.Policy)
		p.Add(ln, sc)
		if r.Policy != "cacheblend" || !slices.ContainsFunc(n.Results, func(e Result) bool { return e.Fraction == r.Fraction && e.Policy != r.Policy }) {
			p.Legend.Add(fmt.Sprintf("recompute %g", r.Fraction), ln, sc)
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min, p.Y.Max = 0, 1.6*max(maxDev, 1e-3)
	if len(n.Results) > 0 {
		L := float64(len(n.Results[0].KDev) - 1)
		p.X.Min, p.X.Max = 0, L+max(0.04*L, 0.08) // room for the last tick's label
	}
	return p, nil
}

// fractionPlots are every model's KL and top-1 agreement against the fraction, one plot
// each, a line per model and policy (a color per model; EPIC solid, CacheBlend dashed).
func fractionPlots(rs []Named) ([]*plot.Plot, error) {
	kl, top := plot.New(), plot.New()
	kl.Title.Text = "Next-token KL(full ‖ blended)"
	kl.Y.Label.Text = "nats"
	top.Title.Text = "Top-1 agreement over the next 32 tokens"
	top.Y.Label.Text = "share of 32 (teacher-forced)"
	maxKL := 0.0
	for i, n := range rs {
		var pols []string
		for _, r := range n.Results {
			if !slices.Contains(pols, r.Policy) {
				pols = append(pols, r.Policy)
			}
		}
		for _, pol := range pols {
			var a, b plotter.XYs
			for _, r := range n.Results {
				if r.Policy != pol {
					continue
				}
				a = append(a, plotter.XY{X: r.Fraction, Y: r.KL})
				b = append(b, plotter.XY{X: r.Fraction, Y: r.Top1})
				maxKL = max(maxKL, r.KL)
			}
			for j, pts := range []plotter.XYs{a, b} {
				ln, sc, err := plotter.NewLinePoints(pts)
				if err != nil {
					return nil, err
				}
				c := palette[i%len(palette)]
				ln.Color, sc.Color, ln.Dashes = c, c, dashes(pol)
				p := []*plot.Plot{kl, top}[j]
				p.Add(ln, sc)
				p.Legend.Add(n.Model+", "+policyLabel(pol), ln, sc)
			}
		}
	}
	for _, p := range []*plot.Plot{kl, top} {
		p.X.Label.Text = "recompute fraction"
		p.X.Min, p.X.Max = 0, 1.06 // room for the last tick's label
		p.Legend.Top = true
	}
	kl.Y.Min, kl.Y.Max = 0, 2.4*max(maxKL, 1e-3) // six legend lines above the highest point
	top.Y.Min, top.Y.Max = 0, 1.7
	// The legends sit top left, above the lines (a right-hand legend's text overruns its
	// symbols once the SVG is drawn in the browser's font).
	kl.Legend.Left, top.Legend.Left = true, true
	return []*plot.Plot{kl, top}, nil
}

var svgProlog = regexp.MustCompile(`(?s)<\?xml.*?\?>|<!DOCTYPE[^>]*>`)

func svg(p *plot.Plot, w, h vg.Length) (template.HTML, error) {
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", err
	}
	return template.HTML(bytes.TrimSpace(svgProlog.ReplaceAll(b.Bytes(), nil))), nil
}

var page = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Chunk blending: deviation from the full prefill</title>
<style>body{font:14px sans-serif;margin:16px;width:1180px} figure{display:inline-block;margin:4px} table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style>
</head><body>
<h2>Chunk blending, EPIC and CacheBlend: deviation from the full prefill</h2>
<p>{{.Note}}</p>
<p>Top: the relative L2 deviation of the chunks' keys from the full prefill's, by layer, one line per recompute fraction and policy (EPIC solid, CacheBlend dashed; fraction 1 is bitwise 0 and not drawn). Below: KL and top-1 agreement against the fraction, a color per model.</p>
{{range .Figures}}<figure class="plot">{{.}}</figure>{{end}}
<table><tr><th>model</th><th>recompute</th><th>policy</th><th>blended</th><th>recomputed</th><th>K dev first/mid/last</th><th>KL</th><th>mean KL</th><th>top-1</th><th>greedy prefix</th><th>bitwise</th></tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>{{end}}</table>
</body></html>
`))

// HTML is a self-contained page: the plots as inline SVG and the table. note says what was
// measured (prompt shape, machine).
func HTML(rs []Named, note string) ([]byte, error) {
	var figs []template.HTML
	for _, n := range rs {
		p, err := layerPlot(n)
		if err != nil {
			return nil, err
		}
		s, err := svg(p, 3.85*vg.Inch, 3.2*vg.Inch)
		if err != nil {
			return nil, err
		}
		figs = append(figs, s)
	}
	fps, err := fractionPlots(rs)
	if err != nil {
		return nil, err
	}
	for _, p := range fps {
		s, err := svg(p, 5.8*vg.Inch, 3.4*vg.Inch)
		if err != nil {
			return nil, err
		}
		figs = append(figs, s)
	}
	var rows [][]string
	for _, n := range rs {
		for _, r := range n.Results {
			L := len(r.KDev)
			rows = append(rows, []string{n.Model, fmt.Sprint(r.Fraction), policyLabel(r.Policy), fmt.Sprint(r.Blended), fmt.Sprint(r.Recomputed),
				fmt.Sprintf("%.2g / %.2g / %.2g", r.KDev[0], r.KDev[L/2], r.KDev[L-1]), fmt.Sprintf("%.3g", r.KL), fmt.Sprintf("%.3g", r.MeanKL),
				fmt.Sprintf("%.0f%%", 100*r.Top1), fmt.Sprintf("%d/%d", r.GreedyPrefix, len(r.Greedy)), yesNo(r.Bitwise)})
		}
	}
	var b bytes.Buffer
	err = page.Execute(&b, struct {
		Note    string
		Figures []template.HTML
		Rows    [][]string
	}{note, figs, rows})
	return b.Bytes(), err
}
