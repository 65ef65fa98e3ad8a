package offload

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	f := newFetcher(t, []TierStore{{kvtier.Host, host}}, m, nil)
	req := request(recs)
	req.Into = destinations(4)
	res := fetch(t, f, req)
	if res.Usable != 2 || res.Blocks[2].Reason != tier.ReasonChecksum || res.Blocks[3].Reason != ReasonAfterBreak {
		t.Fatalf("usable %d, reasons %q %q; want 2, checksum, after_break", res.Usable, res.Blocks[2].Reason, res.Blocks[3].Reason)
	}
	for i := range 2 {
		if !bytes.Equal(req.Into[i], recs[i].KV) || &res.Blocks[i].Record.KV[0] != &req.Into[i][0] {
			t.Fatalf("block %d: destination holds the K/V %v, record aliases it %v", i,
				bytes.Equal(req.Into[i], recs[i].KV), &res.Blocks[i].Record.KV[0] == &req.Into[i][0])
		}
	}
	if got, after := counterValue(m.discarded.WithLabelValues("checksum")), counterValue(m.discarded.WithLabelValues(ReasonAfterBreak)); got != 1 || after != 1 {
		t.Fatalf("checksum discards %v, after_break %v; want 1 and 1", got, after)
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
	ts := newTestTiers(t, []TierStore{{kvtier.Host, host}}, func(*Config) {})
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

// recyclingStore is a memstore that hands out copies and records what comes back through
// Recycle, poisoning it (as a reused buffer would be overwritten).
type recyclingStore struct {
	tier.Store
	gate     chan struct{} // if non-nil, Get waits on it
	mu       sync.Mutex
	recycled int
}

func (r *recyclingStore) Get(ctx context.Context, keys []tier.Key) ([][]byte, error) {
	if r.gate != nil {
		<-r.gate
	}
	vals, err := r.Store.Get(ctx, keys)
	for i := range vals {
		vals[i] = bytes.Clone(vals[i])
	}
	return vals, err
}

func (r *recyclingStore) Recycle(vals [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range vals {
		clear(v)
		r.recycled++
	}
}

// Values verified into the pool go back to a Recycler; values a Record still aliases (no
// Into), or that another fetch joined, do not.
func TestFetchRecycles(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 9, 43)
	for _, tt := range []struct {
		name string
		tier kvtier.Tier
		into bool
		want int
	}{
		{"disk into", kvtier.Disk, true, 9}, // chunked: 3 Gets of up to 4
		{"host into", kvtier.Host, true, 9},
		{"disk buffered", kvtier.Disk, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := &recyclingStore{Store: memstore.New()}
			st.Store.Put(ctx, tiertest.Items(recs))
			f := newFetcher(t, []TierStore{{tt.tier, st}}, nil, nil)
			req := request(recs)
			if tt.into {
				req.Into = destinations(len(recs))
			}
			res := fetch(t, f, req)
			if res.Usable != len(recs) || st.recycled != tt.want {
				t.Fatalf("usable %d, recycled %d; want %d, %d", res.Usable, st.recycled, len(recs), tt.want)
			}
			for i, b := range res.Blocks {
				if !bytes.Equal(b.Record.KV, recs[i].KV) {
					t.Fatalf("block %d: K/V damaged by recycling", i)
				}
			}
		})
	}
	// Two fetches of the same blocks: the second joins the first's read, so the values are
	// shared and neither fetch recycles them.
	st := &recyclingStore{Store: memstore.New(), gate: make(chan struct{})}
	st.Store.Put(ctx, tiertest.Items(recs[:2]))
	f := newFetcher(t, []TierStore{{kvtier.Host, st}}, nil, nil)
	a, b := request(recs[:2]), request(recs[:2])
	a.Into, b.Into = destinations(2), destinations(2)
	fa := f.Fetch(ctx, a)
	waitFor(t, "the first fetch's read", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.mu.flight) == 2 })
	fb := f.Fetch(ctx, b)
	waitFor(t, "the second fetch to join", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.mu.flight {
			if c.waiters == 0 {
				return false
			}
		}
		return true
	})
	close(st.gate)
	for _, fu := range []*Future{fa, fb} {
		if res, err := fu.Wait(ctx); err != nil || res.Usable != 2 {
			t.Fatalf("usable %d, %v", res.Usable, err)
		}
	}
	if st.recycled != 0 {
		t.Fatalf("recycled %d shared values", st.recycled)
	}
}

// From the disk tier (a tier.CheckedGetter: the fetch's verification is the store's check, one
// pass over each block), damage is found and counted exactly as with the store's own
// checksum: a flipped K/V byte and a flipped file trailer (the record itself intact) both stop
// the prefix as "checksum", and the store deletes and counts both files; the intact blocks
// land in their destinations.
func TestFetchIntoFromDiskChecked(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, _ := NewMetrics(reg)
	d := openDisk(t, t.TempDir(), 1<<20, nil)
	recs := tiertest.Chain(identity, root, layout, 6, 43)
	d.Put(ctx, tiertest.Items(recs))
	flip := func(i, fromEnd int) {
		path := filepath.Join(d.Dir(), fmt.Sprintf("%x-%x.kv", recs[i].Root[:], recs[i].Hash[:]))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-fromEnd] ^= 1
		os.WriteFile(path, b, 0o644)
	}
	flip(3, 4)   // the file's trailer: the record inside is intact
	flip(4, 300) // the record's K/V
	f := newFetcher(t, []TierStore{{kvtier.Disk, d}}, m, nil)
	req := request(recs)
	req.Into = destinations(len(recs))
	res := fetch(t, f, req)
	if res.Usable != 3 || res.Blocks[3].Reason != tier.ReasonChecksum || res.Blocks[4].Reason != tier.ReasonChecksum || res.Blocks[5].Reason != ReasonAfterBreak {
		t.Fatalf("usable %d, reasons %q %q %q; want 3, checksum, checksum, after_break", res.Usable, res.Blocks[3].Reason, res.Blocks[4].Reason, res.Blocks[5].Reason)
	}
	for i := range 3 {
		if !bytes.Equal(req.Into[i], recs[i].KV) {
			t.Fatalf("block %d: destination does not hold its K/V", i)
		}
	}
	if d.Corrupt() != 2 || d.Stats().Items != int64(len(recs)-2) {
		t.Fatalf("disk: corrupt %d, items %d; want 2, %d", d.Corrupt(), d.Stats().Items, len(recs)-2)
	}
}
