package offload

import (
	"context"
	"errors"
	"testing"

	"stockpot/internal/kvtier"
	"stockpot/internal/tier"
	"stockpot/internal/tier/memstore"
	"stockpot/internal/tier/tiertest"
)

// TestDropRootOneTier: a drop limited to one tier deletes that tier's blocks and leaves the
// other tiers' copies (what DELETE /v1/cache?tier= needs to make the next tier down the first
// holder); a tier this Tiers does not have is ErrNoSuchTier, with the tiers it has still
// dropped; no filter is every tier, as before.
func TestDropRootOneTier(t *testing.T) {
	ctx := context.Background()
	chain := tiertest.Chain(identity, root, layout, 4, 1)
	host, disk := memstore.New(), memstore.New()
	for _, s := range []tier.Store{host, disk} {
		if err := s.Put(ctx, tiertest.Items(chain)); err != nil {
			t.Fatal(err)
		}
	}
	ts := &Tiers{tiers: []TierStore{{Tier: kvtier.Host, Store: host}, {Tier: kvtier.Disk, Store: disk}}}
	if !ts.Has(kvtier.Host) || !ts.Has(kvtier.Disk) || ts.Has(kvtier.Remote) || ts.Has(kvtier.Device) {
		t.Errorf("Has: host %v disk %v remote %v device %v", ts.Has(kvtier.Host), ts.Has(kvtier.Disk), ts.Has(kvtier.Remote), ts.Has(kvtier.Device))
	}

	n, err := ts.DropRoot(ctx, tier.AllRoots, kvtier.Host)
	if err != nil || n[kvtier.Host] != 4 || n[kvtier.Disk] != 0 {
		t.Fatalf("drop host: %v %v, want 4 from host, none from disk", n, err)
	}
	if st := ts.Stats(); st[0].Items != 0 || st[1].Items != 4 {
		t.Errorf("after the host drop: host %d items, disk %d; want 0 and 4", st[0].Items, st[1].Items)
	}
	keys := make([]tier.Key, len(chain))
	for i, r := range chain {
		keys[i] = tier.Key{Root: r.Root, Hash: r.Hash}
	}
	if have, err := disk.Contains(ctx, keys); err != nil || len(have) != 4 || !have[0] || !have[3] {
		t.Errorf("disk lost its copies: %v %v", have, err)
	}

	n, err = ts.DropRoot(ctx, root, kvtier.Remote, kvtier.Disk)
	if !errors.Is(err, ErrNoSuchTier) || n[kvtier.Disk] != 4 {
		t.Errorf("drop remote+disk without a remote tier: %v %v, want ErrNoSuchTier and disk's 4 dropped", n, err)
	}
	if st := ts.Stats(); st[1].Items != 0 {
		t.Errorf("disk still holds %d items", st[1].Items)
	}

	for _, s := range []tier.Store{host, disk} {
		if err := s.Put(ctx, tiertest.Items(chain)); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := ts.DropRoot(ctx, root); err != nil || n[kvtier.Host] != 4 || n[kvtier.Disk] != 4 {
		t.Errorf("unfiltered drop: %v %v, want 4 per tier", n, err)
	}
}
