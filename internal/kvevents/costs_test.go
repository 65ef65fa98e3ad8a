package kvevents

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"stockpot/internal/kvtier"
)

// costSink is a mapSink that keeps the last cost figures.
type costSink struct {
	mapSink
	mu    sync.Mutex
	costs []Costs
}

func (c *costSink) Costs(x Costs) {
	c.mu.Lock()
	c.costs = append(c.costs, x)
	c.mu.Unlock()
}

func (c *costSink) Reset(s Snapshot) {
	c.mapSink.Reset(s)
	if s.Costs != nil {
		c.Costs(*s.Costs)
	}
}

func (c *costSink) last() (Costs, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.costs) == 0 {
		return Costs{}, 0
	}
	return c.costs[len(c.costs)-1], len(c.costs)
}

func testCosts(prefill float64) Costs {
	c := Costs{PrefillTokensPerSecond: prefill, BlockSize: 16, BlockBytes: 98304}
	c.ReadBandwidth[kvtier.Host] = 9.5e9
	c.ReadBandwidth[kvtier.Remote] = 1.25e8
	return c
}

// TestCostsStream: the figures reach a CostSink in the snapshot, on the stream's open, and
// again when they change (at a heartbeat); events of every tier keep flowing meanwhile.
func TestCostsStream(t *testing.T) {
	p := mustPublisher(t, Config{Heartbeat: 20 * time.Millisecond})
	var cur atomic.Pointer[Costs]
	c0 := testCosts(1200)
	cur.Store(&c0)
	p.SetCosts(func() Costs { return *cur.Load() })
	if s := p.Snapshot(); s.Costs == nil || *s.Costs != c0 {
		t.Fatalf("snapshot costs %+v", s.Costs)
	}
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	sink := &costSink{}
	sub := startSub(t, srv.URL, sink)
	for _, tr := range []kvtier.Tier{kvtier.Device, kvtier.Host, kvtier.Disk, kvtier.Remote} {
		p.Publish(Event{Kind: Stored, Tier: tr, Hash: h(int(tr))})
	}
	waitConverged(t, p, &sink.mapSink, sub)
	if got, _ := sink.last(); got != c0 {
		t.Fatalf("costs %+v, want %+v", got, c0)
	}
	c1 := testCosts(800)
	c1.ReadBandwidth[kvtier.Disk] = 1e9
	cur.Store(&c1)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if got, _ := sink.last(); got == c1 {
			break
		}
		if time.Now().After(deadline) {
			got, n := sink.last()
			t.Fatalf("changed costs never arrived: %d lines, last %+v", n, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Unchanged figures are not resent at every heartbeat.
	_, n := sink.last()
	time.Sleep(100 * time.Millisecond)
	if _, m := sink.last(); m != n {
		t.Fatalf("unchanged costs resent: %d → %d lines", n, m)
	}
}

// TestGarbageIsolates: a replica whose stream turns to garbage has its Sink emptied (the
// router's index for it is dropped), and a clean snapshot fills it again.
func TestGarbageIsolates(t *testing.T) {
	p := mustPublisher(t, Config{Heartbeat: 20 * time.Millisecond})
	for i := range 10 {
		p.Publish(Event{Kind: Stored, Tier: kvtier.Host, Hash: h(i)})
	}
	var bad atomic.Value // the garbage the stream sends after its hello; "" for none
	bad.Store("")
	inner := p.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := bad.Load().(string)
		if g == "" || strings.HasSuffix(r.URL.Path, "/snapshot") {
			// A clean stream lasts until garbage is asked for.
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			go func() {
				for ctx.Err() == nil && bad.Load().(string) == "" {
					time.Sleep(2 * time.Millisecond)
				}
				cancel()
			}()
			inner.ServeHTTP(w, r.WithContext(ctx))
			return
		}
		s := p.Snapshot()
		w.Write([]byte(`{"type":"hello","epoch":"` + epochString(s.Epoch) + `","seq":` + strconv.FormatUint(s.Seq, 10) + `,"block_size":16}` + "\n" + g + "\n"))
	}))
	t.Cleanup(srv.Close)
	sink := &costSink{}
	sub := startSub(t, srv.URL, sink)
	waitConverged(t, p, &sink.mapSink, sub)
	for _, g := range []string{
		`{"type":"event","seq":11,"kind":"stored","tier":"tape","hash":"` + strings.Repeat("ab", 32) + `"}`,
		`{"type":"event","seq":11,"kind":"stored","tier":"host","hash":"xyz"}`,
		`{"type":"costs","seq":10,"costs":{"prefill_tps":-1}}`,
		`{"type":"costs","seq":10,"costs":{"prefill_tps":1,"read_bps":{"device":5}}}`,
		`not json at all`,
	} {
		before := sub.Stats().Garbage
		bad.Store(g)
		deadline := time.Now().Add(3 * time.Minute)
		for sub.Stats().Garbage == before || len(sink.sorted()) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not isolated: stats %+v, sink %d blocks", g, sub.Stats(), len(sink.sorted()))
			}
			time.Sleep(5 * time.Millisecond)
		}
		if sub.Stats().Synced {
			t.Fatalf("%s: still synced after garbage", g)
		}
		bad.Store("")
		waitConverged(t, p, &sink.mapSink, sub)
		if !sub.Stats().Synced {
			t.Fatalf("%s: no clean resync", g)
		}
	}
}

// FuzzDecodeLine: the router's parser of a replica's stream lines and snapshots never
// panics, rejects what it cannot represent, and what the publisher writes decodes to itself.
func FuzzDecodeLine(f *testing.F) {
	for _, tr := range []kvtier.Tier{kvtier.Device, kvtier.Host, kvtier.Disk, kvtier.Remote} {
		for _, k := range []Kind{Stored, Removed, Cleared} {
			ev := Event{Seq: 42, Kind: k, Tier: tr, Hash: h(1), Parent: h(0), Time: time.Unix(0, 1712)}
			f.Add(appendEventJSON(nil, &ev))
		}
	}
	c := testCosts(1000)
	f.Add(appendCostsJSON(nil, 7, &c))
	f.Add([]byte(`{"type":"costs","seq":1,"costs":{"prefill_tps":1e400}}`))
	f.Add([]byte(`{"type":"costs","seq":1}`))
	f.Add([]byte(`{"type":"hello","epoch":"1f","seq":120,"identity":"ab","block_size":16}`))
	f.Add([]byte(`{"type":"hello","epoch":"1f","seq":120,"identity":"ab","block_size":16,"reuse_blocks":4}`))
	f.Add([]byte(`{"type":"hello","epoch":"1f","seq":120,"reuse_blocks":-3}`))
	f.Add([]byte(`{"epoch":"1f","seq":3,"identity":"ab","block_size":16,"reuse_blocks":8,"blocks":[]}`))
	f.Add([]byte(`{"epoch":"1f","seq":3,"block_size":16,"reuse_blocks":99999999999,"blocks":[]}`))
	f.Add([]byte(`{"type":"heartbeat","seq":121,"time":1712}`))
	f.Add([]byte(`{"type":"resync","epoch":"zz","seq":1}`))
	f.Add([]byte(`{"epoch":"1f","seq":3,"identity":"","block_size":16,"blocks":[{"hash":"` + strings.Repeat("0a", 32) + `","tier":"remote"}],"costs":{"prefill_tps":5,"block_size":16,"block_bytes":9,"read_bps":{"disk":3}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		m, ev, c, err := decodeLine(line)
		if err == nil {
			switch m.Type {
			case "hello":
				if m.ReuseBlocks < 0 || m.ReuseBlocks > MaxReuseBlocks {
					t.Fatalf("hello accepted reuse_blocks %d", m.ReuseBlocks)
				}
			case "event":
				if !ev.Tier.Valid() {
					t.Fatalf("accepted tier %v", ev.Tier)
				}
				out := appendEventJSON(nil, &ev)
				_, ev2, _, err := decodeLine(out)
				if err != nil || ev2.Seq != ev.Seq || ev2.Kind != ev.Kind || ev2.Tier != ev.Tier || ev2.Hash != ev.Hash ||
					(ev.Kind != Cleared && ev2.Parent != ev.Parent) {
					t.Fatalf("event %+v re-encodes to %q → %+v, %v", ev, out, ev2, err)
				}
			case "costs":
				out := appendCostsJSON(nil, m.Seq, &c)
				if _, _, c2, err := decodeLine(out); err != nil || c2 != c {
					t.Fatalf("costs %+v re-encode to %q → %+v, %v", c, out, c2, err)
				}
			}
		}
		if s, err := decodeSnapshot(line); err == nil {
			if u := s.Unit(); u < 1 || u > MaxReuseBlocks {
				t.Fatalf("snapshot accepted reuse unit %d", u)
			}
			for _, b := range s.Blocks {
				if !b.Tier.Valid() {
					t.Fatalf("snapshot accepted tier %v", b.Tier)
				}
			}
		}
	})
}
