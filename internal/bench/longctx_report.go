package bench

import (
	"fmt"
	"image/color"
	"io"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The longctx report: the same summary rows as every workload's head, then its own tables
// (terminal and HTML share them) and two plots, TTFT and cache bytes against prompt length.

// longSources are the step sources in column order, with the column titles.
var longSources = []struct{ key, title string }{
	{"cold", "cold"}, {"device", "pool"}, {"host", "host"}, {"disk", "disk"}, {"remote", "remote"},
}

var (
	colorHost   = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colorDisk   = color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}
	colorRemote = color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff}
	sourceColor = map[string]color.Color{"cold": colorCold, "device": colorWarm, "host": colorHost, "disk": colorDisk, "remote": colorRemote}
)

// htmlTable is one titled table of the report (terminal and HTML).
type htmlTable struct {
	ID    string
	Title string
	Head  []string
	Rows  [][]string
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func mibPtr(p *float64) string {
	if p == nil {
		return "not reported"
	}
	return mib(*p)
}

func mibInt(p *int64) string {
	if p == nil {
		return "not reported"
	}
	return mib(float64(*p))
}

func ratioStr(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", *p)
}

// step returns l's step from source, nil when it has none.
func (l *LongCtxLength) step(source string) *LongCtxStep {
	for i := range l.Steps {
		if l.Steps[i].Source == source {
			return &l.Steps[i]
		}
	}
	return nil
}

// longCtxRows are the summary rows of a longctx report.
func (r *Report) longCtxRows() []htmlRow {
	lc := r.LongCtx
	var rows []htmlRow
	row := func(k, v string) { rows = append(rows, htmlRow{k, v}) }
	var lens []string
	for _, l := range lc.Lengths {
		lens = append(lens, fmt.Sprint(l.Target))
	}
	row("workload", fmt.Sprintf("longctx: prompts of %s tokens, each cold, then warm from the pool and from each lower tier (%s)",
		strings.Join(lens, ", "), strings.Join(append([]string{"device"}, lc.Tiers...), ", ")))
	row("model", fmt.Sprintf("%s (context %d, block %d, state checkpoint every %d blocks)", lc.Model, lc.ContextLength, lc.BlockSize, lc.CheckpointBlocks))
	row("requests / errors", fmt.Sprintf("%d / %d in %.1fs", r.Requests, r.Errors, r.DurationS))
	bpt := "not reported"
	if lc.KVBytesPerToken != nil {
		bpt = fmt.Sprintf("%.0f B K/V (the pool's block / block size; the MLA latent for kimi models)", *lc.KVBytesPerToken)
		if lc.CheckpointBytesPerToken != nil {
			bpt += fmt.Sprintf(" + %.0f B of state checkpoints (%d B every %d tokens) = %.0f B", *lc.CheckpointBytesPerToken,
				lc.StateBytes, lc.BlockSize*lc.CheckpointBlocks, *lc.CacheBytesPerToken)
		}
	}
	row("cache bytes per token", bpt)
	if lc.Staging != "" {
		row("lower tiers staged by", lc.Staging)
	}
	for _, n := range lc.Notes {
		row("note", n)
	}
	return rows
}

// longCtxTables are the longctx report's tables.
func (r *Report) longCtxTables() []htmlTable {
	lc := r.LongCtx
	ttft := htmlTable{ID: "longctx-ttft", Title: "TTFT by source, ms (server's usage.timings.ttft_ms; restore_ms in brackets)", Head: []string{"prompt tokens"}}
	for _, s := range longSources {
		ttft.Head = append(ttft.Head, s.title)
	}
	for _, l := range lc.Lengths {
		cells := []string{fmt.Sprint(l.PromptTokens)}
		if l.Skipped != "" {
			cells[0] = fmt.Sprintf("%d (target)", l.Target)
			cells = append(cells, "skipped: "+l.Skipped)
			for range longSources[1:] {
				cells = append(cells, "")
			}
			ttft.Rows = append(ttft.Rows, cells)
			continue
		}
		for _, s := range longSources {
			st := l.step(s.key)
			switch {
			case st == nil:
				cells = append(cells, "—")
			case st.Error != "":
				cells = append(cells, "error")
			case s.key == "cold" || s.key == "device":
				cells = append(cells, fmtMs(st.TTFTMs))
			default:
				cells = append(cells, fmt.Sprintf("%s (%s)", fmtMs(st.TTFTMs), fmtMs(st.RestoreMs)))
			}
		}
		ttft.Rows = append(ttft.Rows, cells)
	}

	dec := htmlTable{ID: "longctx-decisions", Title: "Where the cached tokens came from, and the cost model's restore-or-recompute decisions",
		Head: []string{"prompt", "request", "cached / prompt tokens", "from (usage)", "server hit rate", "decision", "verdict"}}
	for _, l := range lc.Lengths {
		for _, st := range l.Steps {
			if st.Error != "" {
				dec.Rows = append(dec.Rows, []string{fmt.Sprint(l.PromptTokens), st.Source, "", "", "", "error: " + st.Error, ""})
				continue
			}
			dec.Rows = append(dec.Rows, []string{fmt.Sprint(l.PromptTokens), st.Source,
				fmt.Sprintf("%s / %d", fmtIntPtr(st.CachedTokens), st.PromptTokens), st.From, fmtRate(st.ServerHitRate), st.Decision, st.Verdict})
		}
	}

	mem := htmlTable{ID: "longctx-memory", Title: "Memory per length: measured (after the pool request) against linear predictions",
		Head: []string{"prompt tokens", "full blocks", "pool K/V measured", "K/V predicted", "checkpoints held / predicted", "checkpoint bytes", "cache bytes/token", "process RSS", "lower tiers (after staging)"}}
	for _, l := range lc.Lengths {
		m := l.Memory
		if m == nil {
			continue
		}
		held := "not reported"
		if m.Checkpoints != nil {
			held = fmt.Sprintf("%.0f / %d", *m.Checkpoints, m.PredictedCheckpoints)
		}
		per := "not reported"
		if m.CacheBytesPerToken != nil {
			per = fmt.Sprintf("%.0f B", *m.CacheBytesPerToken)
		}
		var tiers []string
		for _, t := range lc.Tiers {
			if b, ok := m.TierBytes[t]; ok {
				tiers = append(tiers, fmt.Sprintf("%s %s (%d blocks)", t, mib(float64(b)), l.TierBlocks[t]))
			} else if m.TierBytes != nil {
				tiers = append(tiers, t+" not reported (a shared store)")
			}
		}
		mem.Rows = append(mem.Rows, []string{fmt.Sprint(l.PromptTokens), fmt.Sprint(m.FullBlocks), mibPtr(m.PoolKVBytes),
			mibInt(m.PredictedKVBytes), held, mibPtr(m.CheckpointBytes), per, mibPtr(m.RSSBytes), strings.Join(tiers, ", ")})
	}

	tables := []htmlTable{ttft, dec, mem}
	if lc.StateBytes > 0 {
		ck := htmlTable{ID: "longctx-checkpoints", Title: fmt.Sprintf("Checkpoint memory per --state-checkpoint-blocks N (⌊⌊P/B⌋/N⌋ × %d B; * the server's N, measured above)", lc.StateBytes),
			Head: []string{"N", "reuse unit (tokens)"}}
		var measured []*LongCtxLength
		for i := range lc.Lengths {
			if m := lc.Lengths[i].Memory; m != nil && len(m.ByCheckpointBlocks) > 0 {
				measured = append(measured, &lc.Lengths[i])
				ck.Head = append(ck.Head, fmt.Sprintf("%d tokens", lc.Lengths[i].PromptTokens))
			}
		}
		if len(measured) > 0 {
			for i, row := range measured[0].Memory.ByCheckpointBlocks {
				n := fmt.Sprint(row.N)
				if row.Server {
					n += " *"
				}
				cells := []string{n, fmt.Sprint(row.N * lc.BlockSize)}
				for _, l := range measured {
					c := l.Memory.ByCheckpointBlocks[i]
					cells = append(cells, fmt.Sprintf("%s (%.0f B/token)", mib(float64(c.Bytes)), c.BytesPerToken))
				}
				ck.Rows = append(ck.Rows, cells)
			}
			tables = append(tables, ck)
		}
	}
	if len(lc.Growth) > 0 {
		g := htmlTable{ID: "longctx-growth", Title: "Growth from one length to the next (linear: the memory ratios follow the length ratio)",
			Head: []string{"from → to tokens", "length ×", "cold TTFT ×", "pool K/V ×", "checkpoint bytes ×", "RSS ×"}}
		for _, x := range lc.Growth {
			g.Rows = append(g.Rows, []string{fmt.Sprintf("%d → %d", x.From, x.To), fmt.Sprintf("%.2f×", x.LengthRatio),
				ratioStr(x.ColdTTFT), ratioStr(x.PoolKV), ratioStr(x.Checkpoints), ratioStr(x.RSS)})
		}
		tables = append(tables, g)
	}
	return tables
}

// writeLongCtxTable prints the longctx report on a terminal.
func (r *Report) writeLongCtxTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range r.longCtxRows() {
		fmt.Fprintf(tw, "%s\t%s\n", row.Key, row.Value)
	}
	for _, t := range r.longCtxTables() {
		fmt.Fprintf(tw, "\n%s\n", t.Title)
		fmt.Fprintln(tw, strings.Join(t.Head, "\t"))
		for _, row := range t.Rows {
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	return tw.Flush()
}

// longTTFTPlot is TTFT against prompt length, one line per source, on a log scale (a cold
// prefill is orders of magnitude above a restore).
func (r *Report) longTTFTPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "TTFT vs prompt length (server usage.timings.ttft_ms)"
	p.X.Label.Text = "prompt tokens"
	p.Y.Label.Text = "TTFT (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	drawn := false
	for _, s := range longSources {
		var pts plotter.XYs
		for _, l := range r.LongCtx.Lengths {
			if st := l.step(s.key); st != nil && st.TTFTMs != nil && *st.TTFTMs > 0 {
				pts = append(pts, plotter.XY{X: float64(l.PromptTokens), Y: *st.TTFTMs})
			}
		}
		if err := addLine(p, s.title, pts, sourceColor[s.key]); err != nil {
			return nil, err
		}
		drawn = drawn || len(pts) > 0
	}
	if !drawn {
		p.Title.Text += ": nothing measured"
		p.Y.Scale, p.Y.Tick.Marker = plot.LinearScale{}, plot.DefaultTicks{}
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(12) // clear of the y axis
	p.X.Min, p.X.Max = 0, r.longMaxTokens()*1.08
	return p, nil
}

// longBytesPlot is the cache's bytes against prompt length: the pool's K/V and the
// checkpoints, measured (points) and predicted (dashed). The process RSS, which adds the
// weights and the runtime to them, is in the memory table, not here: on this scale it would
// flatten the lines that matter.
func (r *Report) longBytesPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Cache bytes vs prompt length (linear axes)"
	p.X.Label.Text = "prompt tokens"
	p.Y.Label.Text = "MiB"
	var kv, kvPred, ck, ckPred plotter.XYs
	for _, l := range r.LongCtx.Lengths {
		m := l.Memory
		if m == nil {
			continue
		}
		x := float64(l.PromptTokens)
		if m.PredictedKVBytes != nil {
			kvPred = append(kvPred, plotter.XY{X: x, Y: float64(*m.PredictedKVBytes) / (1 << 20)})
		}
		if m.PoolKVBytes != nil {
			kv = append(kv, plotter.XY{X: x, Y: *m.PoolKVBytes / (1 << 20)})
		}
		if r.LongCtx.StateBytes > 0 {
			ckPred = append(ckPred, plotter.XY{X: x, Y: float64(m.PredictedCheckpointBytes) / (1 << 20)})
			if m.CheckpointBytes != nil {
				ck = append(ck, plotter.XY{X: x, Y: *m.CheckpointBytes / (1 << 20)})
			}
		}
	}
	for _, s := range []struct {
		name   string
		pts    plotter.XYs
		c      color.Color
		dashed bool
	}{
		{"K/V latent (pool, measured)", kv, colorCold, false},
		{"K/V predicted: ⌊P/B⌋ blocks", kvPred, colorCold, true},
		{"state checkpoints (measured)", ck, colorHost, false},
		{"checkpoints predicted: ⌊⌊P/B⌋/N⌋", ckPred, colorHost, true},
	} {
		if len(s.pts) == 0 {
			continue
		}
		pts := append(plotter.XYs{{X: 0, Y: 0}}, s.pts...) // from the origin: linear is a line through it
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color, sc.Color = s.c, s.c
		sc.Radius = vg.Points(2)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			sc.Radius = 0
		}
		p.Add(l, sc)
		p.Legend.Add(s.name, l, sc)
	}
	p.X.Min, p.Y.Min = 0, 0
	p.X.Max = r.longMaxTokens() * 1.08 // room for the last tick's label
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(12)
	return p, nil
}

// longMaxTokens is the longest measured prompt, for the plots' x range.
func (r *Report) longMaxTokens() float64 {
	m := 1.0
	for _, l := range r.LongCtx.Lengths {
		m = max(m, float64(l.PromptTokens))
	}
	return m
}
