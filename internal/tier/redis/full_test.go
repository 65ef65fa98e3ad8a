package redis

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// TestFullServer: a Redis with maxmemory and noeviction refuses writes once full. Each refused
// item is one ErrNoSpace, the calls count as answered (no failed call, the breaker closed),
// and what was stored before is still read.
func TestFullServer(t *testing.T) {
	srv := startServer(t, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
	digest := randomDigest()
	s := openStore(t, srv.url(), Config{IdentityDigest: digest, BreakerFailures: 1, CallTimeout: time.Minute})
	root := prefix.Root(digest[:], "")
	first := tiertest.Chain(digest, root, tiertest.SmallLayout, 4, 81)
	if err := s.Put(ctx, tiertest.Items(first)); err != nil {
		t.Fatal(err)
	}
	refused := 0
	for round := 0; refused == 0 && round < 200; round++ {
		recs := tiertest.Chain(digest, prefix.Root(digest[:], fmt.Sprint("tenant ", round)), tiertest.SmallLayout, 64, uint64(100+round))
		err := s.Put(ctx, tiertest.Items(recs))
		if err == nil {
			continue
		}
		var joined interface{ Unwrap() []error }
		if !errors.As(err, &joined) || !errors.Is(err, tier.ErrNoSpace) {
			t.Fatalf("round %d: Put on a full server: %v; want one ErrNoSpace per refused item", round, err)
		}
		refused = len(joined.Unwrap())
		for _, e := range joined.Unwrap() {
			if !errors.Is(e, tier.ErrNoSpace) {
				t.Fatalf("round %d: item error %v, want ErrNoSpace", round, e)
			}
		}
	}
	if refused == 0 {
		t.Fatal("the server never filled")
	}
	if st := s.BreakerStats(); st.FailedCalls != 0 || st.Opens != 0 {
		t.Fatalf("a full server counted as failing: %+v", st)
	}
	vals, err := s.Get(ctx, tiertest.Keys(first))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v == nil {
			t.Fatalf("block %d stored before the server filled is not read back", i)
		}
		if _, err := tier.DecodeVerify(v, tiertest.Want(first[i])); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFullClusterMaster: the same on a 3-master cluster whose masters are full: refused items
// are ErrNoSpace (not ErrUnavailable), no master's breaker counts a failure, and what was
// stored before is read back.
func TestFullClusterMaster(t *testing.T) {
	c := startCluster3(t)
	digest := randomDigest()
	s := clusterStore(t, c, Config{IdentityDigest: digest, BreakerFailures: 1, CallTimeout: time.Minute})
	first := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 6, 91)
	if err := s.Put(ctx, tiertest.Items(first)); err != nil {
		t.Fatal(err)
	}
	for i := range c.nodes {
		if err := c.admin(i).ConfigSet(ctx, "maxmemory", "1").Err(); err != nil { // 1 byte: every write is refused
			t.Fatal(err)
		}
		if err := c.admin(i).ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
	}
	recs := tiertest.Chain(digest, prefix.Root(digest[:], "more"), tiertest.SmallLayout, 24, 92)
	err := s.Put(ctx, tiertest.Items(recs))
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || !errors.Is(err, tier.ErrNoSpace) || errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Put on full masters: %v; want ErrNoSpace per refused item, none unavailable", err)
	}
	if st := s.BreakerStats(); st.FailedCalls != 0 || st.Opens != 0 {
		t.Fatalf("full masters counted as failing: %+v", st)
	}
	vals, err := s.Get(ctx, tiertest.Keys(first))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v == nil {
			t.Fatalf("block %d stored before the masters filled is not read back", i)
		}
	}
}
