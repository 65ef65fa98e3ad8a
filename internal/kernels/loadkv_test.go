package kernels

import (
	"math/rand/v2"
	"testing"
)

func TestLoadKVRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f16 := range []bool{false, true} {
		kv := PagedKV{BlockSize: 4, Layers: 2, KVHeads: 2, HeadDim: 8, Table: []int32{1, 0}}
		if f16 {
			kv.F16 = make([]uint16, 2*kv.BlockElems())
		} else {
			kv.F32 = make([]float32, 2*kv.BlockElems())
		}
		row := kv.KVHeads * kv.HeadDim
		k, v := make([]float32, row), make([]float32, row)
		for i := range k {
			k[i], v[i] = rng.Float32()-0.5, rng.Float32()-0.5
		}
		StoreKV(&kv, 1, 6, k, v)
		hk, hv := make([]float32, row), make([]float32, row)
		if !LoadKV(&kv, 1, 6, hk, hv) {
			t.Fatal("LoadKV refused an f32/f16 arena")
		}
		for i := range k {
			wk, wv := k[i], v[i]
			if f16 {
				wk, wv = f16ToF32(f32ToF16(wk)), f16ToF32(f32ToF16(wv))
			}
			if hk[i] != wk || hv[i] != wv {
				t.Fatalf("f16 %v element %d: have %v %v want %v %v", f16, i, hk[i], hv[i], wk, wv)
			}
		}
	}
	q8 := PagedKV{Q8: []byte{0}, BlockSize: 4, Layers: 1, KVHeads: 1, HeadDim: 32, Table: []int32{0}}
	if LoadKV(&q8, 0, 0, make([]float32, 32), make([]float32, 32)) {
		t.Error("LoadKV read a Q8_0 arena")
	}
}
