package handoff

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
)

// BenchmarkPull: a pull of 512 blocks of 256 KiB (a 128 MiB prompt's K/V) over loopback HTTP,
// served from a fake pool and kept in memory, against memcpy of the same bytes (reported as
// the ratio). Run: go test -run '^$' -bench Pull ./internal/handoff
func BenchmarkPull(b *testing.B) {
	l := kvcache.Layout{BlockSize: 16, Layers: 16, KVHeads: 8, HeadDim: 128, DType: kvcache.F32} // 256 KiB a block... per K and V
	const blocks = 512
	tr, _ := testTransfer(1)
	prompt := make([]int32, blocks*l.BlockSize+1)
	for i := range prompt {
		prompt[i] = int32(i % 1000)
	}
	tr.Prompt, tr.Blocks, tr.Salt = prompt, blocks, "s"
	tr.Root = prefix.Root([]byte("id"), "s")
	reg := NewRegistry(time.Minute)
	src := &Source{Registry: reg, Exporter: &fakeExporter{held: blocks, layout: l}, Codec: Codec{Identity: [32]byte{1}, Layout: l}, Now: time.Now}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		src.ServeHTTP(w, r, func(w http.ResponseWriter, err error) { http.Error(w, err.Error(), 500) })
	}))
	defer ts.Close()
	hashes := prefix.BlockHashes(tr.Root, prompt, l.BlockSize)[:blocks]
	var mu sync.Mutex
	kept := 0
	p := &Puller{Client: ts.Client(), Streams: 4, MaxRecord: int(tier.EncodedSizeOf(l)) + 4096,
		Put: func(_ context.Context, items []tier.Item) error {
			mu.Lock()
			kept += len(items)
			mu.Unlock()
			return nil
		}}
	bytes := int64(blocks) * l.BlockBytes()
	b.SetBytes(bytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := *tr
		t.ID = NewID()
		reg.Add(t, time.Now())
		res, err := p.Pull(context.Background(), ts.URL, t.ID, t.Root, hashes)
		if err != nil || res.Blocks != blocks {
			b.Fatalf("pulled %d: %v", res.Blocks, err)
		}
	}
	b.StopTimer()
	el := b.Elapsed()
	pull := float64(bytes) * float64(b.N) / el.Seconds()
	dst, srcb := make([]byte, bytes), make([]byte, bytes)
	start := time.Now()
	for range 4 {
		copy(dst, srcb)
	}
	mem := float64(bytes) * 4 / time.Since(start).Seconds()
	b.ReportMetric(pull/1e9, "GB/s")
	b.ReportMetric(pull/mem, "x_memcpy")
}
