package offload

import (
	"context"
	"strings"
	"testing"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// notLister is a store that cannot list its keys.
type notLister struct{ tier.Store }

// TestDropRoot: a drop by root deletes that root's blocks from every tier and leaves the
// others; AllRoots deletes everything; a tier that cannot list is reported, not skipped
// silently.
func TestDropRoot(t *testing.T) {
	ctx := context.Background()
	salted := prefix.Root(identity[:], "tenant")
	a := tiertest.Chain(identity, root, layout, 3, 1)
	b := tiertest.Chain(identity, salted, layout, 2, 2)
	host, disk := memstore.New(), memstore.New()
	for _, s := range []tier.Store{host, disk} {
		if err := s.Put(ctx, append(tiertest.Items(a), tiertest.Items(b)...)); err != nil {
			t.Fatal(err)
		}
	}
	ts := &Tiers{tiers: []TierStore{{Tier: kvtier.Host, Store: host}, {Tier: kvtier.Disk, Store: disk}}}
	n, err := ts.DropRoot(ctx, salted)
	if err != nil || n[kvtier.Host] != 2 || n[kvtier.Disk] != 2 {
		t.Fatalf("drop salted: %v %v, want 2 per tier", n, err)
	}
	if st := ts.Stats(); st[0].Items != 3 || st[1].Items != 3 {
		t.Errorf("after the salted drop: %+v, want the other root's 3 blocks per tier", st)
	}
	n, err = ts.DropRoot(ctx, tier.AllRoots)
	if err != nil || n[kvtier.Host] != 3 || n[kvtier.Disk] != 3 {
		t.Fatalf("drop all: %v %v", n, err)
	}
	ts.tiers = append(ts.tiers, TierStore{Tier: kvtier.Remote, Store: notLister{memstore.New()}})
	if _, err := ts.DropRoot(ctx, root); err == nil || !strings.Contains(err.Error(), "remote tier") {
		t.Errorf("a tier that cannot list: err %v", err)
	}
}
