package engine_test

import (
	"context"
	"errors"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/prefix"
)

// TestPrewarm: a prewarm computes the prompt and generates nothing; a request with the same
// prefix then finds it cached, and a second prewarm computes only the tail.
func TestPrewarm(t *testing.T) {
	e := newEngine(t, nil)
	ctx := context.Background()
	prompt := seqPrompt(3, 100) // 6 full blocks of 16, and 4 tokens
	u, err := e.Prewarm(ctx, &engine.Request{Prompt: prompt, MaxTokens: 50})
	if err != nil {
		t.Fatal(err)
	}
	if u.PromptTokens != 100 || u.ComputedTokens != 100 || u.CompletionTokens != 0 {
		t.Fatalf("first prewarm usage %+v: want 100 prompt tokens computed, none generated", u)
	}
	u, err = e.Prewarm(ctx, &engine.Request{Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	if u.CachedTokens() != 96 || u.ComputedTokens != 4 {
		t.Errorf("second prewarm: cached %d computed %d, want 96 and 4", u.CachedTokens(), u.ComputedTokens)
	}
	r := collect(t, e, engine.Request{Prompt: append(prompt[:96:96], 7, 8, 9), MaxTokens: 2})
	if r.usage.CachedTokens() != 96 {
		t.Errorf("a request on the prewarmed prefix found %d cached tokens, want 96", r.usage.CachedTokens())
	}
	// Another salt is another tenant: nothing cached.
	u, err = e.Prewarm(ctx, &engine.Request{Prompt: prompt, CacheSalt: "t2"})
	if err != nil || u.CachedTokens() != 0 {
		t.Errorf("salted prewarm: %+v %v, want nothing cached", u, err)
	}
	if err := e.PoolFits(100); err != nil {
		t.Errorf("PoolFits(100): %v", err)
	}
	if err := e.PoolFits(1 << 30); !errors.Is(err, engine.ErrPromptTooLong) {
		t.Errorf("PoolFits(huge): %v, want ErrPromptTooLong", err)
	}
}

// TestResidencyAndDrop: the residency lists the prewarmed chains by bytes and hits; a drop by
// salt removes that tenant's blocks only, and a drop of all empties the pool.
func TestResidencyAndDrop(t *testing.T) {
	e := newEngine(t, nil)
	ctx := context.Background()
	long, short := seqPrompt(3, 100), seqPrompt(500, 40)
	for _, p := range []*engine.Request{{Prompt: long}, {Prompt: short, CacheSalt: "t2"}, {Prompt: long}, {Prompt: long}} {
		if _, err := e.Prewarm(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	res := e.Residency(10)
	if res.Pool.Cached != 6+2 || res.Pool.Used != 0 || res.Pool.Free != res.Pool.Blocks-8 {
		t.Errorf("pool %+v: want 8 cached blocks, none used", res.Pool)
	}
	if len(res.ByBytes) != 2 || res.ByBytes[0].Tokens != 96 || res.ByBytes[1].Tokens != 32 {
		t.Fatalf("by bytes %+v: want the 96-token chain then the 32-token one", res.ByBytes)
	}
	if res.ByBytes[0].Bytes != 6*res.Pool.BlockBytes {
		t.Errorf("by bytes: %d bytes, want 6 blocks' %d", res.ByBytes[0].Bytes, 6*res.Pool.BlockBytes)
	}
	// Each later prewarm of the long prompt hit its 6 blocks: the longest prefix at 2 hits
	// leads.
	if top := res.ByHits[0]; top.Hits != 2 || top.Tokens != 96 || top.Root != e.Root("") {
		t.Errorf("by hits top %+v: want 2 hits under the unsalted root", top)
	}
	if len(res.Roots) != 2 || res.Roots[0].Blocks != 6 || res.Roots[1].Root != e.Root("t2") {
		t.Errorf("roots %+v", res.Roots)
	}
	if one := e.Residency(1); len(one.ByBytes) != 1 || len(one.ByHits) != 1 || len(one.Roots) != 1 {
		t.Errorf("limit 1: %+v", one)
	}

	d := e.DropCache("t2", false)
	if d.Blocks != 2 || d.Busy != 0 || d.Root != e.Root("t2") {
		t.Errorf("drop t2: %+v", d)
	}
	if u, _ := e.Prewarm(ctx, &engine.Request{Prompt: long}); u.CachedTokens() != 96 {
		t.Errorf("after dropping t2 the unsalted chain has %d cached tokens, want 96", u.CachedTokens())
	}
	d = e.DropCache("", true)
	if d.Blocks != 6 || d.Root != (prefix.Hash{}) {
		t.Errorf("drop all: %+v", d)
	}
	if res := e.Residency(10); res.Pool.Cached != 0 || len(res.ByBytes) != 0 {
		t.Errorf("after drop all: %+v", res)
	}
}

// TestDropBusy: blocks a running request holds are dropped from the index but not freed under
// it; the request finishes normally and the blocks come back free.
func TestDropBusy(t *testing.T) {
	e := newEngine(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	prompt := seqPrompt(9, 64)
	ch, err := e.Generate(ctx, &engine.Request{Prompt: prompt, MaxTokens: 400, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ch // the first tokens: the prompt's blocks are committed and held
	d := e.DropCache("", false)
	if d.Blocks == 0 || d.Busy != d.Blocks {
		t.Errorf("drop under a running request: %+v, want every dropped block busy", d)
	}
	cancel()
	for range ch {
	}
	if err := e.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
