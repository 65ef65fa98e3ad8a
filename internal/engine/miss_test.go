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

// TestMissConfinedToTenant: a tenant's miss report never names another tenant's cache: not
// "cached under another salt", and not the tokens of another tenant's private continuation of
// a public prefix.
func TestMissConfinedToTenant(t *testing.T) {
	pc, err := prefix.New(prefix.Config{NumBlocks: 32, BlockSize: 4, MinHitsToProtect: 1, DisableEvents: true})
	if err != nil {
		t.Fatal(err)
	}
	core := newCore(CoreConfig{BlockSize: 4, ContextLength: 256, MaxBatchTokens: 64, MaxRunning: 8, PrefixCache: true, Dedup: true}, cacheAdapter{pc})
	now := time.Unix(0, 0)
	id := uint64(0)
	run := func(prompt []int32, salt, tenant string) *Usage {
		id++
		req := &Request{Prompt: prompt, MaxTokens: 1, IgnoreEOS: true, CacheSalt: salt, Tenant: tenant, PublicReads: tenant != ""}
		core.Add(id, req, prefix.Root(nil, salt), 1, now)
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
	secret := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	run(secret, "a", "a")
	if u := run(secret, "b", "b"); u.Miss == nil || u.Miss.Cause != miss.NewContent {
		t.Errorf("b's guess of a's prompt: miss %+v, want new_content (not salt)", u.Miss)
	}
	if u := run(secret, "legacy", ""); u.Miss == nil || u.Miss.Cause != miss.Salt {
		t.Errorf("without tenants: miss %+v, want salt (the single tenant's own salts)", u.Miss)
	}
	// A public prefix (block 0), then a's private continuation; b's prompt diverges right after
	// the public block, with tokens close to a's.
	pub := prefix.Root(nil, "pub")
	if err := core.MarkPublic(pub, prefix.BlockHashes(pub, []int32{100, 101, 102, 103}, 4)); err != nil {
		t.Fatal(err)
	}
	run([]int32{100, 101, 102, 103, 200, 201, 202, 203, 9}, "pub", "(operator)")
	run([]int32{100, 101, 102, 103, 40, 41, 42, 43, 44, 45, 46, 47, 9}, "a", "a")
	u := run([]int32{100, 101, 102, 103, 40, 41, 42, 99, 9}, "b", "b")
	if u.DeviceTokens != 4 || u.Miss == nil || u.Miss.Cause != miss.NewContent || len(u.Miss.Cached) != 0 || u.Miss.Offset != 4 {
		t.Errorf("b after the public prefix: device %d, miss %+v; want 4 and new_content at 4 with nothing quoted", u.DeviceTokens, u.Miss)
	}
	// a's own divergence deeper in its private chain is reported whole.
	u = run([]int32{100, 101, 102, 103, 40, 41, 42, 43, 44, 45, 77, 78, 9}, "a", "a")
	if u.Miss == nil || u.Miss.Cause == miss.NewContent || u.Miss.Offset != 10 || len(u.Miss.Cached) == 0 {
		t.Errorf("a's own divergence: miss %+v, want a diverged chain at token 10 with its tokens", u.Miss)
	}
}
