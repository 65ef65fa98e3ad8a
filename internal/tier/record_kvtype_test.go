package tier_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"stockpot/internal/identity"
	"stockpot/internal/kvcache"
	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// TestKVTypesNeverMix: a block's K/V type is in its identity (the
// descriptor's KVType, hence the root of its hash chain) and in its record's
// layout, so a q8_0 record round-trips byte for byte and is refused where an
// f16 or f32 block of the same tokens is wanted.
func TestKVTypesNeverMix(t *testing.T) {
	shape := kvcache.Layout{BlockSize: 4, Layers: 2, KVHeads: 2, HeadDim: 32}
	roots := map[kvcache.DType]prefix.Hash{}
	digests := map[[32]byte]kvcache.DType{}
	for _, dt := range []kvcache.DType{kvcache.F32, kvcache.F16, kvcache.Q8_0} {
		d := identity.Descriptor{Model: identity.Fingerprint{7}, KVType: dt.String(), BlockSize: shape.BlockSize}
		dig := d.Digest()
		if other, ok := digests[dig]; ok {
			t.Fatalf("%v and %v K/V share the identity digest %x", dt, other, dig[:4])
		}
		digests[dig] = dt
		roots[dt] = prefix.Root(dig[:], "")
	}
	q8 := shape
	q8.DType = kvcache.Q8_0
	var q8Digest [32]byte
	for dig, dt := range digests {
		if dt == kvcache.Q8_0 {
			q8Digest = dig
		}
	}
	recs := tiertest.Chain(q8Digest, roots[kvcache.Q8_0], q8, 2, 5)
	r := recs[1]
	if int64(len(r.KV)) != q8.BlockBytes() || q8.BlockBytes() != 2*2*4*2*34 {
		t.Fatalf("q8_0 record carries %d K/V bytes, layout %d, want %d", len(r.KV), q8.BlockBytes(), 2*2*4*2*34)
	}
	b := tiertest.Encode(r)
	got, err := tier.DecodeVerify(b, tiertest.Want(r))
	if err != nil {
		t.Fatal(err)
	}
	if got.Layout != q8 || !bytes.Equal(got.KV, r.KV) {
		t.Fatalf("decoded layout %v, K/V equal %v; want %v and equal", got.Layout, bytes.Equal(got.KV, r.KV), q8)
	}
	for _, dt := range []kvcache.DType{kvcache.F32, kvcache.F16} {
		// The same tokens under the other type's chain: another root, so another hash.
		w := tiertest.Want(r)
		w.Root = roots[dt]
		w.Hash = prefix.Chain(prefix.Chain(roots[dt], recs[0].Tokens, nil), r.Tokens, nil)
		if _, err := tier.DecodeVerify(b, w); !errors.Is(err, tier.ErrIdentity) {
			t.Errorf("q8_0 record wanted as a %v block: %v, want ErrIdentity", dt, err)
		}
		// Even with the hash right, a layout of another dtype is refused.
		w = tiertest.Want(r)
		w.Layout.DType = dt
		if _, err := tier.DecodeVerify(b, w); !errors.Is(err, tier.ErrShape) {
			t.Errorf("q8_0 record wanted with %v layout: %v, want ErrShape", dt, err)
		}
	}
	// A record whose header says q8_0 with a head dim that is not a multiple of 32 is malformed.
	bad := shape
	bad.HeadDim = 48
	bad.DType = kvcache.F16
	br := tiertest.Chain(q8Digest, roots[kvcache.Q8_0], bad, 1, 6)[0]
	eb := tiertest.Encode(br)
	eb[136] = byte(kvcache.Q8_0)
	binary.LittleEndian.PutUint32(eb[len(eb)-4:], crc32.Checksum(eb[:len(eb)-4], crc32.MakeTable(crc32.Castagnoli)))
	if _, err := tier.Decode(eb); !errors.Is(err, tier.ErrFormat) || errors.Is(err, tier.ErrChecksum) {
		t.Errorf("q8_0 record with head dim 48: %v, want ErrFormat", err)
	}
}
