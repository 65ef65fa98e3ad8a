package engine

import (
	"testing"

	"stockpot/internal/model"
	"stockpot/internal/prefix"
)

// TestCheckpointsBudget: the checkpoint index keeps at most its budget, dropping the oldest
// first (counted), keeps the first checkpoint of a hash, drops with the block, and recycles
// retired states only at the next step.
func TestCheckpointsBudget(t *testing.T) {
	c := &checkpoints{byHash: map[prefix.Hash]*model.State{}, max: 2}
	h := func(i byte) prefix.Hash { return prefix.Hash{i} }
	a, b, d, e := &model.State{Pos: 1}, &model.State{Pos: 2}, &model.State{Pos: 3}, &model.State{Pos: 4}
	c.put(h(1), a)
	c.put(h(2), b)
	c.put(h(2), e) // a second for the same block: retired, the first kept
	if c.get(h(2)) != b || len(c.retired) != 1 {
		t.Fatalf("second put: kept %v, retired %d", c.get(h(2)), len(c.retired))
	}
	c.put(h(3), d) // over the budget: h(1), the oldest, goes
	if c.has(h(1)) || !c.has(h(2)) || !c.has(h(3)) || c.dropped != 1 {
		t.Fatalf("after the budget: has 1 %v 2 %v 3 %v, dropped %d", c.has(h(1)), c.has(h(2)), c.has(h(3)), c.dropped)
	}
	c.drop(h(2)) // its block left the pool
	if c.has(h(2)) || len(c.byHash) != 1 {
		t.Fatalf("drop: %d held", len(c.byHash))
	}
	if len(c.free) != 0 {
		t.Fatal("retired states reusable before the next step")
	}
	c.recycle()
	if len(c.free) != 3 || len(c.retired) != 0 {
		t.Fatalf("recycle: %d free, %d retired", len(c.free), len(c.retired))
	}
	// Many puts and drops keep the insertion list bounded.
	for i := 0; i < 10000; i++ {
		k := prefix.Hash{byte(i), byte(i >> 8), 7}
		c.put(k, &model.State{})
		c.drop(k)
	}
	if len(c.fifo) > 2*len(c.byHash)+65 {
		t.Errorf("insertion list of %d for %d held", len(c.fifo), len(c.byHash))
	}
	c.dropAll()
	if len(c.byHash) != 0 {
		t.Errorf("dropAll left %d", len(c.byHash))
	}
	if got := checkpointBudget(100, 3); got != 34 {
		t.Errorf("budget of 100 blocks every 3: %d, want 34", got)
	}
	// K/V gets blockBytes of every blockBytes+stateBytes (one checkpoint a block), and with a
	// checkpoint every 4 blocks 4·blockBytes of 4·blockBytes+stateBytes.
	if got := kvShare(50176<<4, 16384, 33792, 1); got != 16384<<4 {
		t.Errorf("kvShare every block: %d, want %d", got, 16384<<4)
	}
	if got := kvShare(99328<<4, 16384, 33792, 4); got != 65536<<4 {
		t.Errorf("kvShare every 4 blocks: %d, want %d", got, 65536<<4)
	}
}
