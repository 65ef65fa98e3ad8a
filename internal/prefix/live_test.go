package prefix

import "testing"

// TestLiveDeepestFirst: Live reports every indexed block once, each after all of its
// descendants, so that a shutdown write-back into a smaller tier keeps chain heads.
func TestLiveDeepestFirst(t *testing.T) {
	const bs = 4
	c, err := New(Config{NumBlocks: 16, BlockSize: bs})
	if err != nil {
		t.Fatal(err)
	}
	root := Root([]byte("m"), "")
	commitAll := func(tokens []int32) {
		hashes := BlockHashes(root, tokens, bs)
		blocks, err := c.Allocate(len(hashes))
		if err != nil {
			t.Fatal(err)
		}
		parent := root
		for i, h := range hashes {
			got, _ := c.Commit(h, parent, tokens[i*bs:(i+1)*bs], blocks[i])
			if got != blocks[i] {
				c.Ref(got)
				c.Release([]BlockID{blocks[i]})
				blocks[i] = got
			}
			parent = h
		}
		c.Release(blocks)
	}
	// Two chains sharing their first block: 3 + 1 distinct blocks after it.
	commitAll([]int32{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4})
	commitAll([]int32{1, 1, 1, 1, 5, 5, 5, 5})
	seen := map[Hash]bool{}
	n := 0
	c.Live(func(ev Event) {
		n++
		if ev.Kind != Stored || seen[ev.Hash] {
			t.Fatalf("event %+v (seen %v)", ev, seen[ev.Hash])
		}
		if seen[ev.Parent] {
			t.Errorf("block at depth %d came after its parent", ev.Depth)
		}
		seen[ev.Hash] = true
	})
	if n != 5 {
		t.Errorf("Live reported %d blocks, want 5", n)
	}
}
