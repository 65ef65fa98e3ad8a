package engine

import (
	"testing"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
)

// When two requests compute the same block (no dedup), the second commit hands back the block
// the first stored: the adapter switches to it and frees the duplicate instead of keeping it
// referenced until the request ends.
func TestCacheAdapterCommitSharesDuplicate(t *testing.T) {
	pc, err := prefix.New(prefix.Config{NumBlocks: 4, BlockSize: 2, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	a := cacheAdapter{pc}
	root := prefix.Root(nil, "")
	toks := []int32{7, 8}
	h := prefix.Chain(root, toks, nil)
	blocks, err := a.allocate(2)
	if err != nil {
		t.Fatal(err)
	}
	first, dup := blocks[0], blocks[1]
	if got := a.commit(h, root, toks, first, true, true); got != first {
		t.Fatalf("first commit holds block %d, want its own %d", got, first)
	}
	if got := a.commit(h, root, toks, dup, false, true); got != dup {
		t.Fatalf("commit without share holds block %d, want its own %d", got, dup)
	}
	if got := a.commit(h, root, toks, dup, true, true); got != first {
		t.Fatalf("duplicate commit holds block %d, want the shared %d", got, first)
	}
	if used, _, _ := a.stats(); used != 1 {
		t.Fatalf("%d blocks referenced after the switch, want 1 (the duplicate is freed)", used)
	}
	a.release([]kvcache.BlockID{first, first})
	if used, cached, _ := a.stats(); used != 0 || cached != 1 {
		t.Fatalf("after release: used %d cached %d, want 0 and 1", used, cached)
	}
	if err := pc.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
