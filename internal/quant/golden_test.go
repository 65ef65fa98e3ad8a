package quant

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"testing"

	"stockpot/internal/gguf"
)

// goldenCase is one record of testdata/ggml_golden.bin (see ggml_golden.c).
type goldenCase struct {
	t        gguf.Type
	rows, k  int
	w, dq, a []float32
	wq, aq   []byte
	dot      []float32 // dot[i*rows+j] = weight row i · activation row j
}

func readGolden(t *testing.T) []goldenCase {
	data, err := os.ReadFile("testdata/ggml_golden.bin")
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(data)
	u32 := func() int {
		var v uint32
		if err := binary.Read(r, binary.LittleEndian, &v); err != nil {
			t.Fatal(err)
		}
		return int(v)
	}
	floats := func(n int) []float32 {
		v := make([]float32, n)
		if err := binary.Read(r, binary.LittleEndian, v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	raw := func(n int) []byte {
		v := make([]byte, n)
		if _, err := r.Read(v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	var cases []goldenCase
	for r.Len() > 0 {
		c := goldenCase{t: gguf.Type(u32()), rows: u32(), k: u32()}
		n := c.rows * c.k
		at := ActivationType(c.t)
		c.w = floats(n)
		c.wq = raw(c.rows * c.t.RowBytes(c.k))
		c.dq = floats(n)
		c.a = floats(n)
		c.aq = raw(c.rows * at.RowBytes(c.k))
		c.dot = floats(c.rows * c.rows)
		cases = append(cases, c)
	}
	if len(cases) != 6 {
		t.Fatalf("golden file holds %d cases, want 6", len(cases))
	}
	return cases
}

// TestGolden checks QuantizeRow, DequantizeRow, QuantizeActivations and
// MatMul against ggml's own output for the same inputs.
func TestGolden(t *testing.T) {
	for _, c := range readGolden(t) {
		wb, ab := c.t.RowBytes(c.k), ActivationType(c.t).RowBytes(c.k)
		wq := make([]byte, c.rows*wb)
		dq := make([]float32, c.rows*c.k)
		aq := make([]byte, c.rows*ab)
		for r := range c.rows {
			if err := QuantizeRow(c.t, c.w[r*c.k:(r+1)*c.k], wq[r*wb:(r+1)*wb]); err != nil {
				t.Fatal(err)
			}
			if err := DequantizeRow(c.t, c.wq[r*wb:(r+1)*wb], dq[r*c.k:(r+1)*c.k]); err != nil {
				t.Fatal(err)
			}
		}
		QuantizeActivations(ActivationType(c.t), c.a, aq)
		if i := firstDiff(wq, c.wq); i >= 0 {
			t.Errorf("%s QuantizeRow: byte %d (block %d): have %#x, want %#x", c.t, i, i/c.t.BlockBytes(), wq[i], c.wq[i])
		}
		for i := range dq {
			if math.Float32bits(dq[i]) != math.Float32bits(c.dq[i]) {
				t.Errorf("%s DequantizeRow: element %d: have %v, want %v", c.t, i, dq[i], c.dq[i])
				break
			}
		}
		if i := firstDiff(aq, c.aq); i >= 0 {
			t.Errorf("%s QuantizeActivations: byte %d: have %#x, want %#x", c.t, i, aq[i], c.aq[i])
		}
		// MatMul on ggml's own quantized bytes: dst[m][n] = w row n · x row m.
		impls := append(variants(), variant{"ref", nil})
		for _, impl := range impls {
			name, k := impl.name, refKernels[c.t]
			dst := make([]float32, c.rows*c.rows)
			if impl.set != nil {
				undo := impl.set()
				k = kernels[c.t]
				k(dst, c.rows, c.aq, c.rows, c.wq, c.k, 0, c.rows)
				undo()
			} else {
				k(dst, c.rows, c.aq, c.rows, c.wq, c.k, 0, c.rows)
			}
			for m := range c.rows {
				for n := range c.rows {
					have, want := dst[m*c.rows+n], c.dot[n*c.rows+m]
					if math.Float32bits(have) != math.Float32bits(want) {
						t.Errorf("%s %s MatMul (m=%d, n=%d): have %v, want %v (rel %.2g)", c.t, name, m, n, have, want, (have-want)/want)
					}
				}
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
