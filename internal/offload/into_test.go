package offload

import (
	"bytes"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/engine"
	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// destinations returns n zeroed block-sized buffers (reserved pool blocks).
func destinations(n int) [][]byte {
	d := make([][]byte, n)
	for i := range d {
		d[i] = make([]byte, layout.BlockBytes())
	}
	return d
}

// With Request.Into, verified blocks land in their destinations and the Record's KV is the
// destination; a torn block stops the prefix and is counted exactly as without Into.
func TestFetchIntoDiscards(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := NewMetrics(reg)
	host := memstore.New()
	recs := tiertest.Chain(identity, root, layout, 4, 41)
	items := tiertest.Items(recs)
	items[2].Value[300] ^= 1 // torn block 2
	host.Put(ctx, items)
	f := newFetcher(t, []Tier{{kvtier.Host, host}}, m, nil)
	req := request(recs)
	req.Into = destinations(4)
	res := fetch(t, f, req)
	if res.Usable != 2 || res.Blocks[2].Reason != tier.ReasonChecksum || res.Blocks[3].Reason != tier.ReasonChecksum {
		t.Fatalf("usable %d, reasons %q %q; want 2, checksum, checksum", res.Usable, res.Blocks[2].Reason, res.Blocks[3].Reason)
	}
	for i := range 2 {
		if !bytes.Equal(req.Into[i], recs[i].KV) || &res.Blocks[i].Record.KV[0] != &req.Into[i][0] {
			t.Fatalf("block %d: destination holds the K/V %v, record aliases it %v", i,
				bytes.Equal(req.Into[i], recs[i].KV), &res.Blocks[i].Record.KV[0] == &req.Into[i][0])
		}
	}
	if got := counterValue(m.discarded.WithLabelValues("checksum")); got != 2 {
		t.Fatalf("checksum discards %v, want 2", got)
	}
	bad := request(recs)
	bad.Into = destinations(3)
	if _, err := f.Fetch(ctx, bad).Wait(ctx); err == nil {
		t.Fatal("3 destinations for 4 blocks: no error")
	}
	bad.Into = destinations(4)
	bad.Into[1] = bad.Into[1][:10]
	if _, err := f.Fetch(ctx, bad).Wait(ctx); err == nil {
		t.Fatal("a short destination: no error")
	}
}

// PrefetchInto reports the restored blocks as in place, with no bytes to copy, and looks no
// further than the reservation.
func TestPrefetchInto(t *testing.T) {
	host := memstore.New()
	recs := tiertest.Chain(identity, root, layout, 5, 42)
	host.Put(ctx, tiertest.Items(recs))
	ts := newTestTiers(t, []Tier{{kvtier.Host, host}}, func(*Config) {})
	hs, toks := prefetchArgs(recs)
	dst := destinations(3)
	ch := make(chan engine.Prefetched, 1)
	ts.PrefetchInto(root, hs, toks, 1, dst, func(p engine.Prefetched) { ch <- p })
	p := <-ch
	if p.First != 1 || len(p.Blocks) != 3 {
		t.Fatalf("restored %d blocks from %d, want 3 (the reservation) from 1", len(p.Blocks), p.First)
	}
	for i, b := range p.Blocks {
		if !b.InPlace || b.Data != nil || !bytes.Equal(dst[i], recs[1+i].KV) {
			t.Fatalf("block %d: in place %v, data %d bytes, destination right %v", i, b.InPlace, len(b.Data), bytes.Equal(dst[i], recs[1+i].KV))
		}
	}
}
