package model

import (
	"testing"

	"stockpot/internal/kernels"
)

// TestMLALatentLayout: MLA layers pair up in the K/V slots (K half, V half), after the
// attention layers' slots; every (layer, position) row lands in its own place in f32, f16
// and q8_0 arenas, and reads back.
func TestMLALatentLayout(t *testing.T) {
	c := Config{Layers: 4, Heads: 4, Kinds: []LayerKind{LayerMLA, LayerDeltaNet, LayerMLA, LayerMLA},
		MLA: MLAConfig{KVLoraRank: 48, RopeDims: 16, KHeadDim: 32, VHeadDim: 16}}
	if c.KVLayers() != 2 {
		t.Fatalf("%d slots for 3 MLA layers, want 2", c.KVLayers())
	}
	for l, want := range map[int][2]int{0: {0, 0}, 2: {0, 1}, 3: {1, 0}} {
		if s, h := c.mlaSlot(l); s != want[0] || h != want[1] {
			t.Errorf("layer %d in slot %d half %d, want %v", l, s, h, want)
		}
	}
	if got := c.GQAKVBytesPerToken(2); got != 3*4*(32+16)*2 {
		t.Errorf("per-head K/V %d bytes per token", got)
	}
	if got := c.LatentBytesPerToken(2); got != 3*64*2 {
		t.Errorf("latent %d bytes per token", got)
	}
	D, bs, nBlocks := c.MLA.LatentDim(), 4, 3
	for _, dt := range []string{"f32", "f16", "q8_0"} {
		kv := &kernels.PagedKV{BlockSize: bs, Layers: 2, KVHeads: 1, HeadDim: D, Table: []int32{2, 0, 1}}
		n := nBlocks * kv.BlockElems()
		switch dt {
		case "f32":
			kv.F32 = make([]float32, n)
		case "f16":
			kv.F16 = make([]uint16, n)
		default:
			kv.Q8 = make([]byte, n/32*34)
		}
		row := func(slot, half, pos int) []float32 {
			r := make([]float32, D)
			for i := range r {
				r[i] = float32(slot*1000+half*100+pos) + float32(i%4)
			}
			return r
		}
		for slot := 0; slot < 2; slot++ {
			for half := 0; half < 2; half++ {
				for pos := 0; pos < bs*nBlocks; pos++ {
					storeLatent(kv, slot, half, pos, row(slot, half, pos))
				}
			}
		}
		got := make([]float32, D)
		for slot := 0; slot < 2; slot++ {
			for half := 0; half < 2; half++ {
				for pos := 0; pos < bs*nBlocks; pos++ {
					loadLatent(kv, slot, half, pos, got)
					want := row(slot, half, pos)
					tol := float32(0)
					if dt != "f32" {
						tol = 0.01 * (want[0] + 4) // f16: 11 bits; q8_0: 1/127 of the block's max
					}
					for i := range got {
						if d := got[i] - want[i]; d > tol || d < -tol {
							t.Fatalf("%s slot %d half %d pos %d [%d]: %v, want %v", dt, slot, half, pos, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestKimiLinear48BBytes: the K/V and state costs of Kimi-Linear-48B-A3B's shape (its
// config.json: 27 layers, MLA at layers 4, 8, …, 24 and 27, 32 heads, kv_lora_rank 512, rope
// 64, nope 128, v 128; KDA head dim 128, conv 4), as model info reports them.
func TestKimiLinear48BBytes(t *testing.T) {
	c := Config{Arch: ArchKimiLinear, Layers: 27, Heads: 32, KVHeads: 1, HeadDim: 576,
		MLA: MLAConfig{KVLoraRank: 512, RopeDims: 64, KHeadDim: 192, VHeadDim: 128},
		SSM: SSMConfig{ConvKernel: 4, StateSize: 128, KHeads: 32, VHeads: 32}}
	c.Kinds = make([]LayerKind, c.Layers)
	for l := range c.Kinds {
		c.Kinds[l] = LayerKDA
	}
	for _, l := range []int{4, 8, 12, 16, 20, 24, 27} {
		c.Kinds[l-1] = LayerMLA
	}
	for _, x := range []struct {
		name      string
		got, want int
	}{
		{"K/V slots", c.KVLayers(), 4},
		{"f16 K/V per token in the blocks", c.KVBytesPerToken(2), 4 * 2 * 576 * 2},
		{"f16 latent per token", c.LatentBytesPerToken(2), 7 * 576 * 2},
		{"f16 per-head K/V per token", c.GQAKVBytesPerToken(2), 7 * 32 * (192 + 128) * 2},
		{"state per sequence", c.StateBytes(), 4 * 20 * (3*3*4096 + 32*128*128)},
	} {
		if x.got != x.want {
			t.Errorf("%s: %d, want %d", x.name, x.got, x.want)
		}
	}
	t.Logf("f16 K/V per token: %d bytes in blocks (%d latent) vs %d per-head: %.1f× (%.1f× unpadded); state %d bytes per sequence",
		c.KVBytesPerToken(2), c.LatentBytesPerToken(2), c.GQAKVBytesPerToken(2),
		float64(c.GQAKVBytesPerToken(2))/float64(c.KVBytesPerToken(2)), float64(c.GQAKVBytesPerToken(2))/float64(c.LatentBytesPerToken(2)), c.StateBytes())
}
