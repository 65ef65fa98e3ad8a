package offload

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/kvevents"
	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/hostmem"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// eventLog replays published tier events into the set a router would hold.
type eventLog struct {
	mu   sync.Mutex
	held map[kvtier.Tier]map[prefix.Hash]bool
	n    int
}

func (l *eventLog) publish(evs ...kvevents.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range evs {
		if l.held[ev.Tier] == nil {
			l.held[ev.Tier] = map[prefix.Hash]bool{}
		}
		switch ev.Kind {
		case kvevents.Stored:
			l.held[ev.Tier][ev.Hash] = true
		case kvevents.Removed:
			delete(l.held[ev.Tier], ev.Hash)
		}
		l.n++
	}
}

// view is the announced set of tr, as one character per record ('x' announced).
func (l *eventLog) view(tr kvtier.Tier, recs []*tier.Record) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range recs {
		if l.held[tr][r.Hash] {
			b.WriteByte('x')
		} else {
			b.WriteByte('.')
		}
	}
	return b.String()
}

func waitView(t *testing.T, l *eventLog, tr kvtier.Tier, recs []*tier.Record, want func() string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		w := want()
		got := l.view(tr, recs)
		if got == w {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: announced %s, tier holds %s", tr, got, w)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTierEvents: what the host, disk and remote tiers hold is announced, including the
// host's evictions, deletes, and what a persistent tier held at open.
func TestTierEvents(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 12, 31)
	survivors := tiertest.Chain(identity, root, layout, 3, 32)
	host, err := hostmem.New(hostmem.Config{CapacityBytes: 4 * (recordBytes(recs[0]) + 192)})
	if err != nil {
		t.Fatal(err)
	}
	disk := openDisk(t, t.TempDir(), 1<<20, nil)
	if err := disk.Put(ctx, tiertest.Items(survivors)); err != nil {
		t.Fatal(err)
	}
	remote := memstore.New()
	log := &eventLog{held: map[kvtier.Tier]map[prefix.Hash]bool{}}
	cfg := DefaultConfig()
	cfg.Identity, cfg.Layout, cfg.Events = identity, layout, log.publish
	ts := &Tiers{cfg: cfg, tiers: []TierStore{{kvtier.Host, host}, {kvtier.Disk, disk}, {kvtier.Remote, remote}}}
	if err := ts.start(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	if got := log.view(kvtier.Disk, survivors); got != "xxx" {
		t.Fatalf("disk's blocks at open announced %s, want xxx", got)
	}
	// In rounds, so the host tier announces blocks that it later evicts.
	for i := 0; i < len(recs); i += 4 {
		for _, r := range recs[i : i+4] {
			ts.writer.Enqueue(evicted(r, 0, 0), r.KV)
		}
		for deadline := time.Now().Add(3 * time.Minute); has(t, host, recs[i:i+4]) != "xxxx"; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: host holds %s", i/4, has(t, host, recs))
			}
		}
		waitView(t, log, kvtier.Host, recs, func() string { return has(t, host, recs) })
		if got := log.view(kvtier.Host, recs[i:i+4]); got != "xxxx" {
			t.Fatalf("round %d: host announced %s of the round's blocks", i/4, got)
		}
	}
	if got := log.view(kvtier.Host, recs); got != "........xxxx" {
		t.Fatalf("host announced %s after its evictions", got)
	}
	for _, tc := range []struct {
		tr kvtier.Tier
		s  tier.Store
	}{{kvtier.Host, host}, {kvtier.Disk, disk}, {kvtier.Remote, remote}} {
		waitView(t, log, tc.tr, recs, func() string { return has(t, tc.s, recs) })
	}
	if got := log.view(kvtier.Host, recs); strings.Count(got, "x") > 4 {
		t.Fatalf("host announced %s: more than it can hold", got)
	}
	// Deletes (the cache admin's) are announced too, within a reconcile.
	if err := disk.Delete(ctx, tiertest.Keys(recs[:5])); err != nil {
		t.Fatal(err)
	}
	waitView(t, log, kvtier.Disk, recs, func() string { return has(t, disk, recs) })
	if got := log.view(kvtier.Disk, recs[:5]); got != "....." {
		t.Fatalf("deleted blocks still announced: %s", got)
	}
	// Figures for the publisher: the configured tiers only, with the block's size.
	c := ts.Costs()
	if c.BlockSize != layout.BlockSize || c.BlockBytes != layout.BlockBytes() || !(c.PrefillTokensPerSecond > 0) {
		t.Fatalf("costs %+v", c)
	}
	var tiers []string
	for tr, bw := range c.ReadBandwidth {
		if bw > 0 {
			tiers = append(tiers, kvtier.Tier(tr).String())
		}
	}
	sort.Strings(tiers)
	if strings.Join(tiers, ",") != "disk,host,remote" {
		t.Fatalf("costs tiers %v", tiers)
	}
}

// TestRemoteReconcile: a block this replica announced in the remote tier and that the store
// then lost (Redis evicts and expires on its own) is announced Removed by the periodic
// remote pass.
func TestRemoteReconcile(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 6, 33)
	remote := memstore.New()
	log := &eventLog{held: map[kvtier.Tier]map[prefix.Hash]bool{}}
	e := newTierEvents(log.publish, []TierStore{{kvtier.Remote, remote}})
	e.every, e.remoteEvery = 5*time.Millisecond, 20*time.Millisecond
	e.start()
	defer e.close()
	items := tiertest.Items(recs)
	if err := remote.Put(ctx, items); err != nil {
		t.Fatal(err)
	}
	e.put(TierStore{kvtier.Remote, remote}, items, nil)
	if got := log.view(kvtier.Remote, recs); got != "xxxxxx" {
		t.Fatalf("announced %s after the Put", got)
	}
	if err := remote.Delete(ctx, tiertest.Keys(recs[2:4])); err != nil {
		t.Fatal(err)
	}
	waitView(t, log, kvtier.Remote, recs, func() string { return "xx..xx" })
	// A failed Put is announced only for what the store holds.
	fresh := tiertest.Chain(identity, root, layout, 2, 34)
	if err := remote.Put(ctx, tiertest.Items(fresh[:1])); err != nil {
		t.Fatal(err)
	}
	e.put(TierStore{kvtier.Remote, remote}, tiertest.Items(fresh), errors.New("one item failed"))
	if got := log.view(kvtier.Remote, fresh); got != "x." {
		t.Fatalf("after a partly failed Put: announced %s, want x.", got)
	}
}

// TestRemoteAdoption: blocks another replica wrote to the shared tier are announced by the
// replica that restores them (verified present), once, and from then on reconciled by it: a
// block the store then loses is announced Removed.
func TestRemoteAdoption(t *testing.T) {
	recs := tiertest.Chain(identity, root, layout, 6, 35)
	remote := memstore.New()
	if err := remote.Put(ctx, tiertest.Items(recs)); err != nil { // another replica's writes
		t.Fatal(err)
	}
	log := &eventLog{held: map[kvtier.Tier]map[prefix.Hash]bool{}}
	cfg := DefaultConfig()
	cfg.Identity, cfg.Layout, cfg.Events = identity, layout, log.publish
	ts := &Tiers{cfg: cfg, tiers: []TierStore{{kvtier.Remote, remote}}}
	if err := ts.start(prometheus.NewRegistry()); err != nil {
		t.Fatal(err)
	}
	defer ts.Close()
	if got := log.view(kvtier.Remote, recs); got != "......" {
		t.Fatalf("announced %s before any restore", got)
	}
	res, err := ts.fetcher.Fetch(ctx, request(recs[:4])).Wait(ctx)
	if err != nil || res.Usable != 4 {
		t.Fatalf("fetch: %d usable, %v", res.Usable, err)
	}
	if got := log.view(kvtier.Remote, recs); got != "xxxx.." {
		t.Fatalf("after restoring 4 blocks: announced %s, want xxxx..", got)
	}
	n := log.n
	if _, err := ts.fetcher.Fetch(ctx, request(recs[:4])).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if log.n != n {
		t.Fatalf("a second restore announced %d events again", log.n-n)
	}
	// Adopted blocks are reconciled: one the store loses is announced Removed.
	if err := remote.Delete(ctx, tiertest.Keys(recs[1:2])); err != nil {
		t.Fatal(err)
	}
	ts.events.reconcile(ts.events.index(kvtier.Remote))
	if got := log.view(kvtier.Remote, recs); got != "x.xx.." {
		t.Fatalf("after the store lost block 1: announced %s, want x.xx..", got)
	}
}
