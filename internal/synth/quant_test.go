package synth

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

// TestWeightTypes builds presets in every weight type and checks that each
// matrix has the type tensorType picks and dequantizes close to the F32
// build of the same seed (same weights, by the per-tensor seeding).
func TestWeightTypes(t *testing.T) {
	// Relative RMS error bounds per storage type: loose, they catch a wrong
	// layout or scale, not rounding details (package quant tests those).
	tol := map[gguf.Type]float64{
		gguf.TypeF32: 0, gguf.TypeF16: 1e-3, gguf.TypeBF16: 1e-2, gguf.TypeQ8_0: 0.01,
		gguf.TypeQ6_K: 0.05, gguf.TypeQ5_K: 0.07, gguf.TypeQ4_K: 0.12, gguf.TypeQ5_0: 0.08, gguf.TypeQ4_0: 0.15,
	}
	for _, name := range []string{"tiny-kquant", "tiny-qwen2"} {
		ref, err := gguf.Parse(encodeFile(t, name, Options{Seed: 3}))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := Lookup(name)
		var opts []Options
		for _, ft := range []gguf.Type{gguf.TypeF16, gguf.TypeBF16, gguf.TypeQ8_0, gguf.TypeQ4_0, gguf.TypeQ5_0, gguf.TypeQ4_K, gguf.TypeQ5_K, gguf.TypeQ6_K} {
			opts = append(opts, Options{Seed: 3, Type: ft})
		}
		opts = append(opts, Options{Seed: 3, Type: gguf.TypeQ4_K, Small: true}, Options{Seed: 3, Type: gguf.TypeQ5_K, Small: true})
		for _, o := range opts {
			ft := o.Type
			if name == "tiny-qwen2" && (ft == gguf.TypeQ5_K || o.Small) {
				// 64-wide rows that these mixes make Q5_K: llama-quantize
				// would fall back to Q5_1.
				if _, err := Build(name, o); err == nil || !strings.Contains(err.Error(), "Q5_1") {
					t.Errorf("%s %s: have %v, want the Q5_1 fallback error", name, o.FileTypeName(), err)
				}
				continue
			}
			f, err := gguf.Parse(encodeFile(t, name, o))
			if err != nil {
				t.Fatalf("%s %s: %v", name, ft, err)
			}
			if got, _ := f.Uint("general.file_type"); uint32(got) != o.fileType() {
				t.Errorf("%s %s: file_type %d, want %d", name, o.FileTypeName(), got, o.fileType())
			}
			seen := map[gguf.Type]bool{}
			for _, ti := range f.Tensors() {
				layer := -1
				if strings.HasPrefix(ti.Name, "blk.") {
					layer = int(ti.Name[4] - '0')
				}
				want := gguf.TypeF32
				if len(ti.Dims) == 2 {
					if want, err = tensorType(ti.Name, int(ti.Dims[0]), o, layer, p.Layers, p.Tied); err != nil {
						t.Fatal(err)
					}
				}
				if ti.Type != want {
					t.Errorf("%s %s: %s is %s, want %s", name, ft, ti.Name, ti.Type, want)
					continue
				}
				seen[ti.Type] = true
				got := dequant(t, f, ti)
				rti, _ := ref.Tensor(ti.Name)
				exact := dequant(t, ref, rti)
				if e := relRMS(got, exact); e > tol[ti.Type] {
					t.Errorf("%s %s: %s (%s) relative RMS error %.4g > %.4g", name, ft, ti.Name, ti.Type, e, tol[ti.Type])
				}
			}
			if name == "tiny-kquant" && !seen[ft] {
				t.Errorf("tiny-kquant %s: no tensor stored as %s (types %v)", ft, ft, seen)
			}
		}
	}
}

func dequant(t *testing.T, f *gguf.File, ti gguf.TensorInfo) []float32 {
	t.Helper()
	data, err := f.TensorData(ti.Name)
	if err != nil {
		t.Fatal(err)
	}
	n := int(ti.Elements())
	out := make([]float32, n)
	switch ti.Type {
	case gguf.TypeF32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
	case gguf.TypeF16, gguf.TypeBF16:
		conv := quant.F16ToF32
		if ti.Type == gguf.TypeBF16 {
			conv = quant.BF16ToF32
		}
		for i := range out {
			out[i] = conv(binary.LittleEndian.Uint16(data[2*i:]))
		}
	default:
		row := int(ti.Dims[0])
		rb := ti.Type.RowBytes(row)
		for r := 0; r < n/row; r++ {
			if err := quant.DequantizeRow(ti.Type, data[r*rb:(r+1)*rb], out[r*row:(r+1)*row]); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

func relRMS(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i] - want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}
