package offload

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"stockpot/internal/kvtier"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/redis"
)

// TierProbe is one store's answer to Probe: whether a write and a read of probe records
// round-tripped, and how long the read of them all took.
type TierProbe struct {
	Tier          kvtier.Tier
	CapacityBytes int64 // 0: no budget of its own (Redis)
	Evictions     uint64
	PinnedItems   int64
	Records       int           // probe records written
	ReadBytes     int64         // bytes read back and matched (0 when the round trip failed)
	ReadTime      time.Duration // the Gets of all of them, back to back
	Err           error         // the round trip failed: the write, the read, or a mismatch
	// Redis is the remote tier's eviction settings per server (redis.Store.MemoryPolicies).
	Redis []redis.MemoryPolicy
}

// probeIdentity roots the probe records' chain: no request's chain starts there, so a probe
// record can never be served as a block, and a random salt per Probe keeps two at once apart.
var probeIdentity = []byte("stockpot/preflight-probe/v1")

// maxProbeRecords bounds one Probe's records per tier, whatever size is asked for.
const maxProbeRecords = 1024

// Probe writes records of one block's size to every lower tier (enough to make up readBytes,
// at least one), reads them back in the chunks a restore reads in, checks them byte for byte
// and deletes them. The records are written as sole copies, so a full store makes room for
// them as it would for a block; they are not announced on the block events. For the remote
// tier it also reads Redis's eviction settings. Safe for concurrent use.
func (t *Tiers) Probe(ctx context.Context, readBytes int64) []TierProbe {
	bb := max(t.cfg.Layout.BlockBytes(), 1)
	n := int(min(max(1, (readBytes+bb-1)/bb), maxProbeRecords))
	out := make([]TierProbe, 0, len(t.tiers))
	for _, ts := range t.tiers {
		st := ts.Store.Stats()
		p := TierProbe{Tier: ts.Tier, CapacityBytes: st.CapacityBytes, Evictions: st.Evictions, PinnedItems: st.PinnedItems, Records: n}
		p.ReadBytes, p.ReadTime, p.Err = probeStore(ctx, ts, n, bb)
		if rs, ok := ts.Store.(*redis.Store); ok {
			p.Redis = rs.MemoryPolicies(ctx)
		}
		out = append(out, p)
	}
	return out
}

// probeStore is Probe's round trip through one store: n records of size bytes.
func probeStore(ctx context.Context, ts TierStore, n int, size int64) (int64, time.Duration, error) {
	var salt [16]byte
	_, _ = rand.Read(salt[:])
	root := prefix.Root(probeIdentity, string(salt[:]))
	items := make([]tier.Item, n)
	keys := make([]tier.Key, n)
	want := make([][]byte, n)
	for i := range items {
		v := make([]byte, size)
		_, _ = rand.Read(v)
		var h prefix.Hash
		_, _ = rand.Read(h[:])
		keys[i] = tier.Key{Root: root, Hash: h}
		want[i] = v
		items[i] = tier.Item{Key: keys[i], Value: bytes.Clone(v)} // the store owns what it is given
	}
	defer func() { _ = ts.Store.Delete(context.WithoutCancel(ctx), keys) }()
	if err := ts.Store.Put(ctx, items); err != nil {
		return 0, 0, fmt.Errorf("write of %d records of %d bytes: %w", n, size, err)
	}
	chunk := n // host and disk in one Get: the disk store reads a batch's files in parallel
	if ts.Tier == kvtier.Remote {
		chunk = readChunk(ts.Tier, size) // a restore's remote calls: 4 MiB each
	}
	var got int64
	start := time.Now()
	for i := 0; i < n; i += chunk {
		j := min(n, i+chunk)
		vals, err := ts.Store.Get(ctx, keys[i:j])
		if err != nil {
			return 0, 0, fmt.Errorf("read of %d records: %w", j-i, err)
		}
		for k, v := range vals {
			if err := probeMatch(v, want[i+k], i+k); err != nil {
				return 0, 0, err
			}
			got += int64(len(v))
		}
	}
	return got, time.Since(start), nil
}

// errProbeMismatch: a record read back is not the one written.
var errProbeMismatch = errors.New("probe record read back differs from the one written")

func probeMatch(got, want []byte, i int) error {
	switch {
	case got == nil:
		return fmt.Errorf("record %d written but not found on read (declined, or evicted at once)", i)
	case !bytes.Equal(got, want):
		return fmt.Errorf("record %d: %w (%d bytes, want %d)", i, errProbeMismatch, len(got), len(want))
	}
	return nil
}
