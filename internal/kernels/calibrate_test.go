package kernels

import (
	"math"
	"testing"
	"time"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

func TestChoosePrefetch(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
	cands := []int{0, 2048, 8192, 32768}
	for _, c := range []struct {
		name string
		best []time.Duration
		want int
	}{
		{"default fastest", ms(5, 4.5, 4.0, 4.2), 8192},
		{"another within the margin keeps the default", ms(5, 3.95, 4.0, 4.2), 8192},
		{"another clearly faster", ms(5, 3.0, 4.0, 4.2), 2048},
		{"no lead is best", ms(2.0, 4.5, 4.0, 4.2), 0},
		{"nothing measured", ms(0, 0, 0, 0), 8192},
		{"default not measured", ms(5, 4, 0, 4.2), 2048},
	} {
		if got := choosePrefetch(cands, c.best, 8192, 0.03); got != c.want {
			t.Errorf("%s: chose %d, want %d", c.name, got, c.want)
		}
	}
}

// TestCalibratePrefetch runs the calibration on real quantized products: it measures the
// knob this CPU's kernels read (nothing where none does), chooses one of the candidates,
// leaves it set, keeps the products' values bitwise, and skips float weights.
func TestCalibratePrefetch(t *testing.T) {
	defer quant.SetPrefetch(quant.CurrentPrefetch())
	p := NewPool(2)
	defer p.Close()
	var ws []*Weight
	for i, ty := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeF32} {
		rows, cols := 256+i, 1024
		w := &Weight{Type: ty, Rows: rows, Cols: cols, Data: make([]byte, rows*ty.RowBytes(cols))}
		row := make([]float32, cols)
		for r := range rows {
			for c := range row {
				row[c] = float32(math.Sin(float64(r*cols+c))) * 0.1
			}
			if ty == gguf.TypeF32 {
				for c, v := range row {
					putF32(w.Data[(r*cols+c)*4:], v)
				}
				continue
			}
			if err := quant.QuantizeRow(ty, row, w.Data[r*ty.RowBytes(cols):(r+1)*ty.RowBytes(cols)]); err != nil {
				t.Fatal(err)
			}
		}
		ws = append(ws, w)
	}
	x := make([]float32, 1024)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	before := make([][]float32, len(ws))
	for i, w := range ws {
		before[i] = make([]float32, w.Rows)
		MatMul(p, before[i], x, 1, w)
	}
	c := CalibratePrefetch(p, ws)
	t.Log(c)
	if c.Chosen != quant.CurrentPrefetch() {
		t.Fatalf("calibration chose %+v but left %+v set", c.Chosen, quant.CurrentPrefetch())
	}
	want := map[string]bool{}
	for _, w := range ws {
		if k := quant.PrefetchKnob(w.Type); k != quant.KnobNone {
			want[k] = true
		}
	}
	if len(c.Knobs) != len(want) {
		t.Fatalf("measured %d knobs, the products read %v", len(c.Knobs), want)
	}
	for _, k := range c.Knobs {
		if !want[k.Knob] || k.Products == 0 || len(k.GBs) != len(k.Candidates) {
			t.Fatalf("knob %+v", k)
		}
		ok := false
		for i, d := range k.Candidates {
			ok = ok || d == k.Chosen
			if !(k.GBs[i] > 0) {
				t.Fatalf("%s candidate %d: %v GB/s", k.Knob, d, k.GBs[i])
			}
		}
		if !ok {
			t.Fatalf("%s chose %d, not a candidate", k.Knob, k.Chosen)
		}
	}
	for i, w := range ws {
		after := make([]float32, w.Rows)
		MatMul(p, after, x, 1, w)
		for j := range after {
			if math.Float32bits(after[j]) != math.Float32bits(before[i][j]) {
				t.Fatalf("%s row %d: %v after calibration, %v before", w.Type, j, after[j], before[i][j])
			}
		}
	}
}

func putF32(b []byte, v float32) {
	u := math.Float32bits(v)
	b[0], b[1], b[2], b[3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
}
