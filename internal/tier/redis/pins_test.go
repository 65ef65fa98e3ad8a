package redis

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// about reports whether got is within a minute below want (a TTL read back a moment later).
func about(got, want time.Duration) bool { return got <= want && got > want-time.Minute }

func pttl(t *testing.T, c goredis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// What Redis shows: a pinned block's key has a TTL of at least the retention, its pin
// record exactly the retention; a read by any replica refreshes both; an unpinned block's
// TTL is the default and, with NoReadRefresh, is not refreshed (TestReadRefreshesTTL: the
// default refreshes it); an unpin brings the key back to the default.
func TestPinTTLs(t *testing.T) {
	for name, cluster := range map[string]bool{"server": false, "cluster": true} {
		t.Run(name, func(t *testing.T) {
			var srv *server
			if cluster {
				srv = startCluster(t)
			} else {
				srv = startServer(t)
			}
			digest := randomDigest()
			open := func() *Store {
				if !cluster {
					return openStore(t, srv.url(), Config{IdentityDigest: digest, TTL: time.Hour, NoReadRefresh: true})
				}
				c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.addr()}, MaxRetries: -1})
				t.Cleanup(func() { c.Close() })
				s, err := New(c, Config{IdentityDigest: digest, TTL: time.Hour, NoReadRefresh: true})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			a, b := open(), open() // two replicas
			recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 3, 60)
			items := tiertest.Items(recs)
			items[0].PinTTL = 24 * time.Hour // OpenAI's "24h"
			if err := a.Put(ctx, items); err != nil {
				t.Fatal(err)
			}
			if held, err := a.Pin(ctx, []tier.Key{items[1].Key, {Root: items[1].Key.Root}}, 5*time.Minute); err != nil || !held[0] || held[1] {
				t.Fatalf("Pin = %v, %v; want [true false]", held, err)
			}
			k0, k1, k2 := a.key(items[0].Key), a.key(items[1].Key), a.key(items[2].Key)
			for _, c := range []struct {
				key  string
				want time.Duration
			}{
				{k0, 24 * time.Hour}, {a.pinKey(items[0].Key), 24 * time.Hour},
				{k1, time.Hour}, {a.pinKey(items[1].Key), 5 * time.Minute}, // 5m pin: the default 1h still holds
				{k2, time.Hour},
			} {
				if got := pttl(t, a.client, c.key); !about(got, c.want) {
					t.Errorf("PTTL %s = %v, want about %v", c.key[len(c.key)-8:], got, c.want)
				}
			}
			if got := pttl(t, a.client, a.pinKey(items[2].Key)); got >= 0 {
				t.Errorf("unpinned block has a pin record (PTTL %v)", got)
			}

			// Time passes (the TTLs run down); replica b reads: the pins are refreshed, the
			// unpinned block is not.
			for _, k := range []string{k0, a.pinKey(items[0].Key), k1, a.pinKey(items[1].Key), k2} {
				a.client.PExpire(ctx, k, 30*time.Second)
			}
			// a knows its pin of block 0: refreshed in the read's own pipeline. After a script
			// flush (a restarted Redis) the script is sent again (NOSCRIPT).
			a.client.ScriptFlush(ctx)
			if _, err := a.Get(ctx, tiertest.Keys(recs[:1])); err != nil {
				t.Fatal(err)
			}
			if got := pttl(t, a.client, k0); !about(got, 24*time.Hour) {
				t.Errorf("24h pin after a read by its pinner: key PTTL %v", got)
			}
			if got := pttl(t, a.client, k1); got > 30*time.Second {
				t.Errorf("a pin not read was refreshed: PTTL %v", got)
			}
			// b knows no pin: it finds them in its read and refreshes them.
			a.client.ScriptFlush(ctx)
			a.client.PExpire(ctx, k0, 30*time.Second)
			a.client.PExpire(ctx, a.pinKey(items[0].Key), 30*time.Second)
			if _, err := b.Get(ctx, tiertest.Keys(recs)); err != nil {
				t.Fatal(err)
			}
			if got := pttl(t, a.client, k0); !about(got, 24*time.Hour) {
				t.Errorf("24h pin after a read: key PTTL %v", got)
			}
			if got := pttl(t, a.client, a.pinKey(items[0].Key)); !about(got, 24*time.Hour) {
				t.Errorf("24h pin after a read: record PTTL %v", got)
			}
			if got := pttl(t, a.client, k1); !about(got, 5*time.Minute) {
				t.Errorf("5m pin after a read: key PTTL %v, want 5m (its pin, now longer than what was left)", got)
			}
			if got := pttl(t, a.client, k2); got > 30*time.Second {
				t.Errorf("unpinned block refreshed by a read: PTTL %v", got)
			}
			// b discovered the pins by reading them.
			seen := map[tier.Key]time.Duration{}
			for _, p := range b.Pins() {
				seen[p.Key] = p.TTL
			}
			if len(seen) != 2 || seen[items[0].Key] != 24*time.Hour || seen[items[1].Key] != 5*time.Minute {
				t.Errorf("replica b's pins %v, want the two it read", seen)
			}

			// Unpin: the record goes, the key's TTL comes back to the default.
			if _, err := a.Pin(ctx, []tier.Key{items[0].Key}, 0); err != nil {
				t.Fatal(err)
			}
			if got := pttl(t, a.client, k0); !about(got, time.Hour) {
				t.Errorf("after unpin: key PTTL %v, want the default 1h", got)
			}
			if n, _ := a.client.Exists(ctx, a.pinKey(items[0].Key)).Result(); n != 0 {
				t.Error("pin record left after unpin")
			}
			// Delete removes the record with the block.
			a.Delete(ctx, []tier.Key{items[1].Key})
			if n, _ := a.client.Exists(ctx, a.pinKey(items[1].Key)).Result(); n != 0 {
				t.Error("pin record left after Delete")
			}
		})
	}
}

// A pin record expires on Redis's clock; afterwards the block is an unpinned one: read, not
// refreshed (with NoReadRefresh), until its own TTL.
func TestPinRecordExpires(t *testing.T) {
	srv := startServer(t)
	digest := randomDigest()
	s := openStore(t, srv.url(), Config{IdentityDigest: digest, TTL: time.Hour, NoReadRefresh: true})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 1, 61)
	items := tiertest.Items(recs)
	items[0].PinTTL = 2 * time.Hour
	s.Put(ctx, items)
	s.client.Del(ctx, s.pinKey(items[0].Key)) // as Redis does when the record's TTL runs out
	s.client.PExpire(ctx, s.key(items[0].Key), 30*time.Second)
	vals, err := s.Get(ctx, tiertest.Keys(recs))
	if err != nil {
		t.Fatal(err)
	}
	if vals[0] == nil {
		t.Fatal("Get after the pin ended: a miss")
	}
	if got := pttl(t, s.client, s.key(items[0].Key)); got > 30*time.Second {
		t.Fatalf("a block whose pin ended was refreshed: PTTL %v", got)
	}
	if len(s.Pins()) != 0 {
		t.Fatalf("Pins() = %v after a read found no record", s.Pins())
	}
}

// BenchmarkGet compares a batch read that reads and refreshes pins with the plain MGET it
// replaced (the peer), for 32 unpinned and 32 pinned blocks of SmallLayout.
func BenchmarkGet(b *testing.B) {
	srv := startServer(&testing.T{})
	defer srv.kill()
	digest := randomDigest()
	s, err := Open(srv.url(), Config{IdentityDigest: digest, CallTimeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 64, 62)
	items := tiertest.Items(recs)
	for i := range items[32:] {
		items[32+i].PinTTL = time.Hour
	}
	if err := s.Put(ctx, items); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		keys []tier.Key
	}{{"unpinned", tiertest.Keys(recs[:32])}, {"pinned", tiertest.Keys(recs[32:])}} {
		b.Run("pins/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Get(ctx, c.keys); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("mget/"+c.name, func(b *testing.B) {
			names := make([]string, len(c.keys))
			for i, k := range c.keys {
				names[i] = s.key(k)
			}
			b.ReportAllocs()
			for b.Loop() { // the Get before pins: one MGET, values copied out
				vals, err := s.client.MGet(ctx, names...).Result()
				if err != nil {
					b.Fatal(err)
				}
				out := make([][]byte, len(vals))
				for i, v := range vals {
					if str, ok := v.(string); ok {
						out[i] = []byte(str)
					}
				}
			}
		})
	}
}
