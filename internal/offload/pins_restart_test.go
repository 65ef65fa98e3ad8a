package offload

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/kvtier"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

func tinyEngineModel(t *testing.T) *model.Model {
	t.Helper()
	w, err := synth.Build("tiny-llama-spm", synth.Options{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	pool := kernels.NewPool(2)
	t.Cleanup(pool.Close)
	m, err := model.Load(f, pool)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPinsAcrossRestart: a prefix pinned in the pool goes down the Pinner tiers with its
// TTL; after a graceful stop (the pool's write-back) and a start over the same persistent
// store, the next request that brings the prefix back into the pool re-pins it with its
// remaining time. The persistent store is the in-package fake Pinner (the real disk store's
// Pinner is on another branch; cmd/stockpot's restart test runs it after the merge).
func TestPinsAcrossRestart(t *testing.T) {
	m := tinyEngineModel(t)
	mc := m.Config()
	lay := kvcache.Layout{BlockSize: 16, Layers: mc.Layers, KVHeads: mc.KVHeads, HeadDim: mc.HeadDim, DType: kvcache.F32}
	disk := newFakePinner()
	disk.now = time.Now()
	start := func() (*engine.Engine, *Tiers) {
		cfg := DefaultConfig()
		cfg.Identity, cfg.Layout, cfg.DiskDir = identity, lay, "fake"
		host := newFakePinner()
		host.now = time.Now()
		ts := &Tiers{cfg: cfg, tiers: []TierStore{{kvtier.Host, host}, {kvtier.Disk, disk}}}
		if err := ts.start(prometheus.NewRegistry()); err != nil {
			t.Fatal(err)
		}
		ecfg := engine.DefaultConfig()
		ecfg.Identity, ecfg.KVMemory, ecfg.Prefetch = identity[:], 64*lay.BlockBytes(), engine.PrefetchWait
		ts.Hook(&ecfg)
		e, err := engine.New(m, ecfg)
		if err != nil {
			t.Fatal(err)
		}
		return e, ts
	}
	stop := func(e *engine.Engine, ts *Tiers) {
		e.FlushCached(ts.FlushBlock)
		e.Close()
		ts.Close()
	}
	sys := make([]int32, 4*16+3)
	for i := range sys {
		sys[i] = int32(5 + i*7%300)
	}
	ask := func(e *engine.Engine, tail int32, pin bool) engine.Usage {
		req := &engine.Request{Prompt: append(append([]int32(nil), sys...), tail), MaxTokens: 1}
		if pin {
			req.Pins = []engine.PinSpec{{Tokens: len(sys), TTL: time.Hour}}
		}
		ch, err := e.Generate(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		var u engine.Usage
		for o := range ch {
			if o.Done {
				u = *o.Usage
			}
		}
		return u
	}

	e, ts := start()
	if u := ask(e, 900, true); len(u.Pins) != 1 || u.Pins[0].Pinned != 64 {
		t.Fatalf("pin: %+v", u.Pins)
	}
	pinned := e.Pins()
	stop(e, ts)
	if got := len(disk.Pins()); got != 4 {
		t.Fatalf("the persistent tier holds %d pins after the stop, want 4", got)
	}
	// Each of the 4 blocks reaches each of the 2 tiers pinned: Put pinned when the pin
	// event comes first, or Pinned in place when the write-through got there before it (the
	// two run on their own workers; either order is right).
	if st := ts.PinStats(); st.Put+st.Pinned != 8 || st.Failed != 0 {
		t.Errorf("pin writer %+v: want 4 blocks pinned in each of 2 tiers, put or pinned in place", st)
	}

	e, ts = start()
	defer stop(e, ts)
	if got := len(e.Pins()); got != 0 {
		t.Fatalf("%d pins in a fresh pool", got)
	}
	u := ask(e, 901, false) // no pin asked: the kept pins come back by themselves
	t.Logf("after the restart: %d tokens from disk, %d computed", u.DiskTokens, u.ComputedTokens)
	again := e.Pins()
	if len(again) != 4 {
		t.Fatalf("after the restart the prefix is pinned in %d blocks, want 4", len(again))
	}
	for i, p := range again {
		if p.Hash != pinned[i].Hash || p.TTL != time.Hour || p.Expires.After(disk.now.Add(time.Hour)) || !p.Expires.After(time.Now()) {
			t.Errorf("block %d re-pinned as %+v, want the kept pin (1h, expiring by %v)", i, p, disk.now.Add(time.Hour))
		}
	}
}
