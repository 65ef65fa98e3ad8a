package prefix

import (
	"fmt"
	"testing"
)

// The no-sharing workload: every request a fresh 2K-token prompt, so the
// cache's whole cost is overhead. Compare BenchmarkBlockHashes2K (the hashing
// any prefix cache needs) with BenchmarkMatchMiss2K (hashing + lookups).
const benchPrompt = 2048

func benchTokens(seed int) []int32 {
	t := make([]int32, benchPrompt)
	for i := range t {
		t[i] = int32((seed*7919 + i*31) % 150000)
	}
	return t
}

func BenchmarkBlockHashes2K(b *testing.B) {
	root := Root([]byte("bench"), "")
	toks := benchTokens(1)
	buf := make([]Hash, 0, benchPrompt/16)
	b.ReportAllocs()
	b.SetBytes(benchPrompt * 4)
	for b.Loop() {
		buf = AppendBlockHashes(buf[:0], root, toks, 16)
	}
}

func BenchmarkMatchMiss2K(b *testing.B) {
	c, _ := New(Config{NumBlocks: 4096, BlockSize: 16})
	root := Root([]byte("bench"), "")
	toks := benchTokens(1)
	hs := BlockHashes(root, toks, 16)
	b.ReportAllocs()
	for b.Loop() {
		m := c.MatchHashes(root, hs, toks)
		if len(m.Blocks) != 0 {
			b.Fatal("hit")
		}
	}
}

func BenchmarkMatchHit2K(b *testing.B) {
	c, _ := New(Config{NumBlocks: 4096, BlockSize: 16})
	root := Root([]byte("bench"), "")
	toks := benchTokens(1)
	hs := BlockHashes(root, toks, 16)
	blocks, _ := c.Allocate(len(hs))
	parent := root
	for i, h := range hs {
		c.Commit(h, parent, toks[i*16:(i+1)*16], blocks[i])
		parent = h
	}
	c.Release(blocks)
	c.Events()
	b.ReportAllocs()
	for b.Loop() {
		m := c.MatchHashes(root, hs, toks)
		if len(m.Blocks) != len(hs)-1 {
			b.Fatalf("hit %d", len(m.Blocks))
		}
		c.Release(m.Blocks)
	}
}

// BenchmarkCommit2K: allocate, commit and release the 128 blocks of a fresh
// 2K prompt (the steady state evicts the previous prompts' blocks), draining
// events each round as the engine does.
func BenchmarkCommit2K(b *testing.B) {
	c, _ := New(Config{NumBlocks: 1024, BlockSize: 16})
	root := Root([]byte("bench"), "")
	const rounds = 16
	var toks [rounds][]int32
	var hs [rounds][]Hash
	for i := range rounds {
		toks[i] = benchTokens(i)
		hs[i] = BlockHashes(root, toks[i], 16)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := i % rounds
		i++
		blocks, err := c.Allocate(len(hs[r]))
		if err != nil {
			b.Fatal(err)
		}
		parent := root
		for j, h := range hs[r] {
			c.Commit(h, parent, toks[r][j*16:(j+1)*16], blocks[j])
			parent = h
		}
		c.Release(blocks)
		c.Events()
	}
}

func BenchmarkFull2K(b *testing.B) {
	for _, name := range []string{"match+alloc+commit+release"} {
		b.Run(name, func(b *testing.B) {
			c, _ := New(Config{NumBlocks: 1024, BlockSize: 16})
			root := Root([]byte("bench"), "")
			b.ReportAllocs()
			n := 0
			toks := benchTokens(0)
			for b.Loop() {
				n++
				toks[0] = int32(n) // a new prompt every time: no sharing
				m := c.Match(root, toks)
				blocks, err := c.Allocate(len(m.Hashes) - len(m.Blocks))
				if err != nil {
					b.Fatal(fmt.Sprint(err))
				}
				parent := root
				for j, h := range m.Hashes {
					c.Commit(h, parent, toks[j*16:(j+1)*16], blocks[j])
					parent = h
				}
				c.Release(blocks)
				c.Events()
			}
		})
	}
}
