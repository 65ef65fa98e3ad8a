package prefix

import "testing"

// BenchmarkDiverge2K is the miss evidence the engine takes at admission: a 2K-token prompt
// that shares its first half with a cached 2K-token chain and then leaves it, with the
// cached window copied (1024 tokens). Compare with BenchmarkBlockHashes2K, the hashing every
// admission does anyway.
func BenchmarkDiverge2K(b *testing.B) {
	c, _ := New(Config{NumBlocks: 4096, BlockSize: 16})
	root := Root([]byte("bench"), "")
	cached := benchTokens(1)
	hs := BlockHashes(root, cached, 16)
	blocks, _ := c.Allocate(len(hs))
	parent := root
	for i, h := range hs {
		c.Commit(h, parent, cached[i*16:(i+1)*16], blocks[i])
		parent = h
	}
	c.Release(blocks)
	c.Events()
	prompt := append(append([]int32(nil), cached[:1024+5]...), benchTokens(2)[:1024-5]...)
	ph := BlockHashes(root, prompt, 16)
	b.ReportAllocs()
	for b.Loop() {
		d := c.Diverge(root, ph, prompt, 64, 1024)
		if d.Kind != Diverged || d.Offset != 1024+5 {
			b.Fatalf("%+v", d)
		}
	}
}
