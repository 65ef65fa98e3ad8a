package redis

import (
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// openBoth opens a store on a plain server or on a one-node cluster.
func openBoth(t *testing.T, cluster bool, cfg Config) *Store {
	t.Helper()
	if !cluster {
		return openStore(t, startServer(t).url(), cfg)
	}
	srv := startCluster(t)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.addr()}, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = time.Minute
	}
	s, err := New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A read pushes an unpinned block's TTL out to Config.TTL again, in the read's own round
// trip; a pinned block's TTL is the pin's business (never brought down to the default, never
// raised to it by the read); a block without a TTL keeps none; a miss creates nothing.
func TestReadRefreshesTTL(t *testing.T) {
	for name, cluster := range map[string]bool{"server": false, "cluster": true} {
		t.Run(name, func(t *testing.T) {
			digest := randomDigest()
			s := openBoth(t, cluster, Config{IdentityDigest: digest, TTL: time.Hour})
			recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 5, 70)
			items := tiertest.Items(recs)
			items[1].PinTTL = 24 * time.Hour
			items[2].PinTTL = 5 * time.Minute // shorter than the default: the key keeps 1h
			if err := s.Put(ctx, items[:4]); err != nil {
				t.Fatal(err)
			}
			k := func(i int) string { return s.key(items[i].Key) }
			// Time passes: every TTL runs down. Block 2's key sits at 10m, over its 5m pin.
			s.client.PExpire(ctx, k(0), 2*time.Second)
			s.client.PExpire(ctx, k(1), 2*time.Second)
			s.client.PExpire(ctx, k(2), 10*time.Minute)
			s.client.Persist(ctx, k(3))
			vals, err := s.Get(ctx, tiertest.Keys(recs))
			if err != nil {
				t.Fatal(err)
			}
			if vals[0] == nil || vals[4] != nil {
				t.Fatalf("Get: block 0 found %v, block 4 (never written) found %v", vals[0] != nil, vals[4] != nil)
			}
			if got := pttl(t, s.client, k(0)); !about(got, time.Hour) {
				t.Errorf("unpinned block after a read: PTTL %v, want about the 1h TTL", got)
			}
			if got := pttl(t, s.client, k(1)); !about(got, 24*time.Hour) {
				t.Errorf("24h-pinned block after a read: PTTL %v, want about its pin's 24h", got)
			}
			if got := pttl(t, s.client, k(2)); got > 10*time.Minute || got < 9*time.Minute {
				t.Errorf("5m-pinned block at 10m after a read: PTTL %v, want it left at 10m (a read applies the pin, not the default)", got)
			}
			if got := pttl(t, s.client, s.pinKey(items[2].Key)); !about(got, 5*time.Minute) {
				t.Errorf("pin record after a read: PTTL %v, want about 5m", got)
			}
			if got := pttl(t, s.client, k(3)); got != -1 {
				t.Errorf("a block with no TTL got one from a read: PTTL %v", got)
			}
			if n, _ := s.client.Exists(ctx, k(4)).Result(); n != 0 {
				t.Error("a read of a missing block created it")
			}
		})
	}
}

// With NoReadRefresh a read leaves an unpinned block's TTL as written.
func TestNoReadRefresh(t *testing.T) {
	digest := randomDigest()
	s := openStore(t, startServer(t).url(), Config{IdentityDigest: digest, TTL: time.Hour, NoReadRefresh: true})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 1, 71)
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	s.client.PExpire(ctx, s.key(recs[0].Key()), 30*time.Second)
	if _, err := s.Get(ctx, tiertest.Keys(recs)); err != nil {
		t.Fatal(err)
	}
	if got := pttl(t, s.client, s.key(recs[0].Key())); got > 30*time.Second {
		t.Errorf("PTTL %v after a read with NoReadRefresh, want at most the 30s left", got)
	}
}

// Measure counts this identity's blocks and bytes in Redis (not another model's, not pin
// records), and Stats reports it once the background measurement has run, then again after
// Redis dropped keys and UsageEvery passed.
func TestUsageMeasured(t *testing.T) {
	for name, cluster := range map[string]bool{"server": false, "cluster": true} {
		t.Run(name, func(t *testing.T) {
			clock := newFakeClock()
			digest := randomDigest()
			s := openBoth(t, cluster, Config{IdentityDigest: digest, Now: clock.Now})
			other, err := New(s.client, Config{IdentityDigest: randomDigest()})
			if err != nil {
				t.Fatal(err)
			}
			recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 7, 72)
			items := tiertest.Items(recs)
			items[0].PinTTL = time.Hour
			var want int64
			for _, it := range items {
				want += int64(len(it.Value))
			}
			if err := s.Put(ctx, items); err != nil {
				t.Fatal(err)
			}
			orecs := tiertest.Chain(digest, prefix.Root(digest[:], "x"), tiertest.SmallLayout, 3, 73)
			if err := other.Put(ctx, tiertest.Items(orecs)); err != nil {
				t.Fatal(err)
			}
			u, err := s.Measure(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if u.Blocks != 7 || u.Bytes != want || u.UsedMemory <= 0 {
				t.Fatalf("Measure = %+v, want 7 blocks, %d bytes, used_memory > 0", u, want)
			}
			st := waitStats(t, s, func(st tier.Stats) bool { return st.Items == 7 })
			if st.UsedBytes != want {
				t.Errorf("Stats = %+v, want UsedBytes %d", st, want)
			}
			// Redis forgets two blocks (as an eviction or an expiry would).
			for _, i := range []int{5, 6} { // one DEL each: on a cluster they are in two slots
				if err := s.client.Del(ctx, s.key(items[i].Key)).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if st := s.Stats(); st.Items != 7 {
				t.Errorf("Stats remeasured before UsageEvery passed: %+v", st)
			}
			clock.Advance(s.cfg.UsageEvery)
			st = waitStats(t, s, func(st tier.Stats) bool { return st.Items == 5 })
			if wantNow := want - int64(len(items[5].Value)+len(items[6].Value)); st.UsedBytes != wantNow {
				t.Errorf("after a drop: UsedBytes %d, want %d", st.UsedBytes, wantNow)
			}
		})
	}
}

// waitStats polls s.Stats until ok, with a generous deadline (the measurement runs in the
// background).
func waitStats(t *testing.T, s *Store, ok func(tier.Stats) bool) tier.Stats {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st := s.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("Stats never got there: %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestInfoField(t *testing.T) {
	info := "# Memory\r\nused_memory:1234\r\nused_memory_human:1.21K\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n"
	for _, c := range []struct {
		field string
		want  int64
	}{{"used_memory", 1234}, {"maxmemory", 0}, {"maxmemory_policy", 0}, {"absent", 0}, {"used_memory_human", 0}} {
		if got := infoField(info, c.field); got != c.want {
			t.Errorf("infoField(%q) = %d, want %d", c.field, got, c.want)
		}
	}
}

// FuzzInfoField: any INFO reply, however malformed, gives a number or 0, never a panic, and
// a well-formed line gives its number back.
func FuzzInfoField(f *testing.F) {
	f.Add("used_memory:1234\r\n", int64(7))
	f.Add("used_memory:\r\nused_memory:x", int64(-1))
	f.Fuzz(func(t *testing.T, info string, n int64) {
		infoField(info, "used_memory")
		line := "used_memory:" + strconv.FormatInt(n, 10) + "\r\n"
		if got := infoField(line+info, "used_memory"); got != n {
			t.Fatalf("infoField of %q = %d, want %d", line, got, n)
		}
	})
}

// A read-only replica refuses the read's TTL refresh (READONLY) but still serves the read:
// the refresh is best effort, on a plain server and for pins found, with or without
// NoReadRefresh.
func TestReadFromReadOnlyReplica(t *testing.T) {
	primary := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.port))
	digest := randomDigest()
	w := openStore(t, primary.url(), Config{IdentityDigest: digest, TTL: time.Hour})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 4, 74)
	items := tiertest.Items(recs)
	items[1].PinTTL = 24 * time.Hour
	if err := w.Put(ctx, items); err != nil {
		t.Fatal(err)
	}
	if n, err := w.client.(*goredis.Client).Wait(ctx, 1, 60_000).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged, %v", n, err)
	}
	for _, noRefresh := range []bool{false, true} {
		r := openStore(t, replica.url(), Config{IdentityDigest: digest, TTL: time.Hour, NoReadRefresh: noRefresh})
		for round := range 2 { // the second: the replica has cached the script (EVALSHA, not EVAL)
			vals, err := r.Get(ctx, tiertest.Keys(recs))
			if err != nil {
				t.Fatalf("NoReadRefresh %v, round %d: Get from a read-only replica: %v", noRefresh, round, err)
			}
			for i, v := range vals {
				if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
					t.Fatalf("NoReadRefresh %v, round %d, block %d: %v", noRefresh, round, i, err)
				}
			}
		}
		if st := r.BreakerStats(); st.FailedCalls != 0 {
			t.Errorf("NoReadRefresh %v: %d failed calls: a refused refresh counted against Redis", noRefresh, st.FailedCalls)
		}
	}
}
