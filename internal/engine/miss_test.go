package engine

import (
	"testing"
	"time"

	"stockpot/internal/miss"
	"stockpot/internal/prefix"
)

// TestMissEvidence: the core fixes each request's miss evidence at its first admission, from
// the prefix cache's view where the match ended.
func TestMissEvidence(t *testing.T) {
	pc, err := prefix.New(prefix.Config{NumBlocks: 32, BlockSize: 4, MinHitsToProtect: 1, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	core := newCore(CoreConfig{BlockSize: 4, ContextLength: 256, MaxBatchTokens: 64, MaxRunning: 8, PrefixCache: true, Dedup: true}, cacheAdapter{pc})
	now := time.Unix(0, 0)
	run := func(id uint64, prompt []int32, salt string) *Usage {
		core.Add(id, &Request{Prompt: prompt, MaxTokens: 1, IgnoreEOS: true, CacheSalt: salt}, prefix.Root(nil, salt), 1, now)
		for range 100 {
			plan := core.Schedule(now)
			logits := make([][]float32, len(plan.Items))
			for i, it := range plan.Items {
				if it.WantLogits {
					logits[i] = make([]float32, 1000)
					logits[i][999] = 1
				}
			}
			core.Advance(plan, logits, now)
			for _, dl := range core.Ready() {
				if dl.Seq == id && dl.Out.Done {
					return dl.Out.Usage
				}
			}
		}
		t.Fatalf("request %d did not finish", id)
		return nil
	}
	seq := func(lo, hi int32) []int32 {
		var out []int32
		for x := lo; x <= hi; x++ {
			out = append(out, x)
		}
		return out
	}
	if u := run(1, seq(1, 3), ""); u.Miss == nil || u.Miss.Cause != miss.BelowBlock {
		t.Errorf("3-token prompt: miss %+v, want below_block", u.Miss)
	}
	if u := run(2, seq(1, 13), ""); u.Miss == nil || u.Miss.Cause != miss.NewContent || u.Miss.Offset != 0 {
		t.Errorf("cold prompt: miss %+v, want new_content at 0", u.Miss)
	}
	if u := run(3, seq(1, 13), ""); u.Miss != nil {
		t.Errorf("repeated prompt: miss %+v, want none", u.Miss)
	}
	p := append(seq(1, 6), 50, 51, 52, 53, 54, 55, 56)
	u := run(4, p, "")
	if u.Miss == nil || u.Miss.Cause != "" || u.Miss.Offset != 6 || u.Miss.Block != 1 || u.Miss.Matched != 4 {
		t.Fatalf("diverging prompt: miss %+v, want a cached chain left at token 6 of block 1", u.Miss)
	}
	if got := u.Miss.Cached[:4]; got[0] != 5 || got[1] != 6 || got[2] != 7 {
		t.Errorf("cached window starts %v, want block 1 of the first prompt [5 6 7 8]", got)
	}
	if u := run(5, seq(1, 13), "tenant-b"); u.Miss == nil || u.Miss.Cause != miss.Salt {
		t.Errorf("other salt: miss %+v, want salt", u.Miss)
	}
}
