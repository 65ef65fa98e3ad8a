package bench

import (
	"bytes"
	"fmt"

	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// pdColors are the topologies' colors, in pdTopologies order.
var pdColors = map[string]color.Color{"pd": colorServer, "both": colorCold, "pair": colorWarm}

func f1(v float64) string {
	if math.IsNaN(v) {
		return "not reported"
	}
	return fmt.Sprintf("%.1f", v)
}

func f0(v float64) string {
	if math.IsNaN(v) {
		return "not reported"
	}
	return fmt.Sprintf("%.0f", v)
}

func pdRatio(a, b float64) string {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return "not reported"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func ptrOr(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// loadHead and loadRows are the mixed load's table: one row per topology.
var loadHead = []string{"topology", "TTFT p50 ms", "TTFT p99 ms", "long TTFT p50 ms", "ITL mean ms", "ITL p50 ms", "ITL p99 ms", "stream ITL p99 ms",
	"goodput", "streams in SLO", "long in SLO", "output tok/s", "requests (errors)"}

func (r *PDReport) loadRows() [][]string {
	var rows [][]string
	for _, t := range r.Topologies {
		rows = append(rows, []string{t.Name, f0(pct(t.TTFT, 0.5)), f0(pct(t.TTFT, 0.99)), f0(pct(t.TTFTLong, 0.5)),
			f1(mean(t.ITL)), f1(pct(t.ITL, 0.5)), f1(pct(t.ITL, 0.99)), f1(pct(t.ITLStreams, 0.99)), fracStr(t.Goodput),
			fracStr(t.GoodputStreams), fracStr(t.GoodputLong), f0(t.OutputTokensPerS), fmt.Sprintf("%d (%d)", t.Requests, t.Errors)})
	}
	return rows
}

var handoffHead = []string{"prompt tokens", "TTFT ms", "prefill ms", "pull ms", "decode first token ms", "pull share of TTFT",
	"pulled MiB", "pull GB/s", "memcpy GB/s", "pull / memcpy", "Redis restore ms", "pull speed / Redis restore", "Redis tokens"}

func (r *PDReport) handoffRows() [][]string {
	var rows [][]string
	for _, h := range r.Handoff {
		if h.Err != "" && h.TTFTMs == 0 {
			rows = append(rows, []string{fmt.Sprint(h.PromptTokens), "error: " + h.Err})
			continue
		}
		pull := ptrOr(h.PullMs)
		share := "not reported"
		if !math.IsNaN(pull) && h.TTFTMs > 0 {
			share = fmt.Sprintf("%.1f%%", 100*pull/h.TTFTMs)
		}
		mib := "not reported"
		if h.PulledBytes != nil {
			mib = fmt.Sprintf("%.1f", *h.PulledBytes/(1<<20))
		}
		st, restore := "not reported", math.NaN()
		if h.StoreTokens != nil {
			st = fmt.Sprint(*h.StoreTokens)
		}
		if h.StoreTokens != nil && *h.StoreTokens > 0 { // nothing from Redis: no restore to compare
			restore = ptrOr(h.StoreRestoreMs)
		}
		rows = append(rows, []string{fmt.Sprint(h.PromptTokens), f0(h.TTFTMs), f0(h.PrefillMs), f1(pull), f1(h.DecodeFirstMs), share, mib,
			f1(ptrOr(h.PullGBps)), f1(ptrOr(h.MemcpyGBps)), pdRatio(ptrOr(h.PullGBps), ptrOr(h.MemcpyGBps)),
			f1(restore), pdRatio(restore, pull), st})
	}
	return rows
}

func writeMarkdown(w io.Writer, head []string, rows [][]string) error {
	var b strings.Builder
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
	for range head {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteTable prints the machine, the load and both tables as markdown.
func (r *PDReport) WriteTable(w io.Writer) error {
	m, l := r.Machine, r.Load
	fmt.Fprintf(w, "CPU: %s, %d cores, pinned %v, load average %.2f before, %.2f after\n", m.CPU, m.Cores, m.Pinned, m.LoadBefore, m.LoadAfter)
	fmt.Fprintf(w, "Load: %s, %d streams of %d+%d tokens, %d long prompts of %d tokens (+%d) at %.2f/s Poisson; SLO TTFT ≤ %.0f ms, ITL p99 ≤ %.0f ms\n\n",
		l.Model, l.Streams, l.StreamPromptTokens, l.StreamTokens, l.LongRequests, l.LongPromptTokens, l.LongMaxTokens, l.LongRate, l.TTFTSLOMs, l.ITLSLOMs)
	if len(r.Topologies) > 0 {
		if err := writeMarkdown(w, loadHead, r.loadRows()); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	if len(r.Handoff) > 0 {
		fmt.Fprintf(w, "Handoff (%s):\n\n", r.Handoff[0].Model)
		if err := writeMarkdown(w, handoffHead, r.handoffRows()); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// itlPlot is the CDF of the steady streams' inter-token latencies, one line per topology, on
// a log axis: separation shows as a line that stays left.
func (r *PDReport) itlPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Steady streams: inter-token latency CDF"
	p.X.Label.Text = "ITL (ms, log)"
	p.Y.Label.Text = "share of tokens"
	for _, t := range r.Topologies {
		var xs []float64
		for _, pt := range t.ITLSeries {
			xs = append(xs, max(pt[1], 0.01))
		}
		pts := cdf(xs)
		if len(pts) > 400 { // thin the points; the line keeps the shape
			step := len(pts) / 400
			var thin plotter.XYs
			for i := 0; i < len(pts); i += step {
				thin = append(thin, pts[i])
			}
			pts = append(thin, pts[len(pts)-1])
		}
		if err := addCDFLine(p, t.Name, pts, pdColors[t.Name]); err != nil {
			return nil, err
		}
	}
	p.Legend.Top, p.Legend.Left = false, false
	logX(p)
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}

// logX puts p's X axis on a log scale once its lines are added, when their data is positive
// (with none the axis stays linear: a log axis of no data has no ticks).
func logX(p *plot.Plot) {
	if p.X.Min <= 0 || p.X.Max <= p.X.Min {
		return
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
}

// addCDFLine is a line without point marks.
func addCDFLine(p *plot.Plot, name string, pts plotter.XYs, c color.Color) error {
	if len(pts) == 0 {
		return nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return err
	}
	l.Color, l.Width = c, vg.Points(2)
	p.Add(l)
	p.Legend.Add(name, l)
	return nil
}

// pdTTFTPlot is the CDF of every request's TTFT, one line per topology, on a log axis: the
// streams' short prompts are the lower part, the long prompts the upper.
func (r *PDReport) pdTTFTPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "TTFT CDF, streams and long prompts"
	p.X.Label.Text = "TTFT (ms, log)"
	p.Y.Label.Text = "share of requests"
	for _, t := range r.Topologies {
		var xs []float64
		for _, v := range t.TTFTAll {
			xs = append(xs, max(v, 0.01))
		}
		if err := addCDFLine(p, t.Name, cdf(xs), pdColors[t.Name]); err != nil {
			return nil, err
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	logX(p)
	p.Y.Min, p.Y.Max = 0, 1
	return p, nil
}

// kTokens writes n as 2K, 32K, 128K when it is near a multiple of 1024, else as n.
func kTokens(n int) string {
	if n >= 1024 {
		return fmt.Sprintf("%.0fK", float64(n)/1024)
	}
	return fmt.Sprint(n)
}

func mean(p *Percentiles) float64 {
	if p == nil {
		return math.NaN()
	}
	return p.Mean
}

func nanZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// handoffPlot is each length's TTFT split into prefill, pull and the decode's first token, as
// shares of the TTFT (stacked bars).
func (r *PDReport) handoffPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Handed-off TTFT split"
	p.Y.Label.Text = "% of TTFT"
	var pre, pull, dec plotter.Values
	var names []string
	for _, h := range r.Handoff {
		if h.TTFTMs <= 0 {
			continue
		}
		names = append(names, fmt.Sprintf("%s tokens: %.1f s", kTokens(h.PromptTokens), h.TTFTMs/1000))
		pl := nanZero(ptrOr(h.PullMs))
		pre, pull, dec = append(pre, 100*h.PrefillMs/h.TTFTMs), append(pull, 100*pl/h.TTFTMs), append(dec, 100*max(h.DecodeFirstMs, 0)/h.TTFTMs)
	}
	if len(names) == 0 {
		return p, nil
	}
	w := vg.Points(40)
	bp, err := plotter.NewBarChart(pre, w)
	if err != nil {
		return nil, err
	}
	bt, err := plotter.NewBarChart(pull, w)
	if err != nil {
		return nil, err
	}
	bd, err := plotter.NewBarChart(dec, w)
	if err != nil {
		return nil, err
	}
	bp.Color, bt.Color, bd.Color = colorCold, colorClient, colorWarm
	bp.LineStyle.Width, bt.LineStyle.Width, bd.LineStyle.Width = 0, 0, 0
	bt.StackOn(bp)
	bd.StackOn(bt)
	p.Add(bp, bt, bd)
	p.Legend.Add("prefill", bp)
	p.Legend.Add("pull (transfer)", bt)
	p.Legend.Add("decode to first token", bd)
	p.Legend.Top = true
	p.NominalX(names...)
	p.Y.Min, p.Y.Max = 0, 135 // room above the bars for the legend
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 25, Label: "25"}, {Value: 50, Label: "50"},
		{Value: 75, Label: "75"}, {Value: 100, Label: "100"}})
	return p, nil
}

func (r *PDReport) plots() ([]*plot.Plot, error) {
	var out []*plot.Plot
	for _, mk := range []func() (*plot.Plot, error){r.itlPlot, r.pdTTFTPlot, r.handoffPlot} {
		p, err := mk()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// PNG renders the three plots side by side (15 × 4.5 inches at 110 dpi).
func (r *PDReport) PNG() ([]byte, error) {
	ps, err := r.plots()
	if err != nil {
		return nil, err
	}
	const w, h = 15 * vg.Inch, 4.5 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(ps), PadX: vg.Inch / 4, PadY: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8,
		PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8}
	row := [][]*plot.Plot{ps}
	canvases := plot.Align(row, tiles, dc)
	for i, p := range ps {
		p.Draw(canvases[0][i])
	}
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// HTML is a self-contained page: the machine and load, both tables and the plots as inline SVG.
func (r *PDReport) HTML() ([]byte, error) {
	ps, err := r.plots()
	if err != nil {
		return nil, err
	}
	ids := []string{"pd-itl-cdf", "pd-ttft", "pd-handoff-split"}
	var figs []htmlFigure
	for i, p := range ps {
		svg, err := renderSVGSize(p, 7*vg.Inch, 4*vg.Inch)
		if err != nil {
			return nil, err
		}
		figs = append(figs, htmlFigure{ids[i], svg})
	}
	m, l := r.Machine, r.Load
	rows := []htmlRow{
		{"CPU", fmt.Sprintf("%s, %d cores, pinned %v", m.CPU, m.Cores, m.Pinned)},
		{"load average", fmt.Sprintf("%.2f before, %.2f after", m.LoadBefore, m.LoadAfter)},
		{"mixed load", fmt.Sprintf("%s: %d streams of %d+%d tokens; %d long prompts of %d tokens (+%d) at %.2f/s Poisson", l.Model,
			l.Streams, l.StreamPromptTokens, l.StreamTokens, l.LongRequests, l.LongPromptTokens, l.LongMaxTokens, l.LongRate)},
		{"SLO", fmt.Sprintf("TTFT ≤ %.0f ms and the request's ITL p99 ≤ %.0f ms", l.TTFTSLOMs, l.ITLSLOMs)},
	}
	for _, t := range r.Topologies {
		rows = append(rows, htmlRow{t.Name, t.Description})
	}
	for _, n := range r.Notes {
		rows = append(rows, htmlRow{"note", n})
	}
	tables := []htmlTable{}
	if len(r.Topologies) > 0 {
		tables = append(tables, htmlTable{ID: "pd-load", Title: "Mixed load", Head: loadHead, Rows: r.loadRows()})
	}
	if len(r.Handoff) > 0 {
		tables = append(tables, htmlTable{ID: "pd-handoff", Title: "Handoff (" + r.Handoff[0].Model + ")", Head: handoffHead, Rows: r.handoffRows()})
	}
	var out bytes.Buffer
	err = reportTemplate.Execute(&out, struct {
		Title   string
		Rows    []htmlRow
		Figures []htmlFigure
		Tables  []htmlTable
		Prices  bool
	}{"prefill/decode disaggregation", rows, figs, tables, false})
	return out.Bytes(), err
}
