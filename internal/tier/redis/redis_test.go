package redis

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

var ctx = context.Background()

func randomDigest() (d [32]byte) {
	rand.Read(d[:])
	return d
}

// openStore opens a store for a test. A test that sets no CallTimeout gets a generous one:
// the default (250 ms) fails calls that a busy machine makes slow, and the tests count what
// was stored and read. The tests of timeouts set their own.
func openStore(t *testing.T, url string, cfg Config) *Store {
	t.Helper()
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = time.Minute
	}
	s, err := Open(url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Each subtest gets a fresh identity digest: a namespace of its own on the
// shared server.
func TestConformance(t *testing.T) {
	srv := startServer(t)
	tiertest.RunOptions(t, func(t *testing.T) tier.Store {
		return openStore(t, srv.url(), Config{IdentityDigest: randomDigest()})
	}, tiertest.Options{SharedStats: true, ServerClock: true,
		Pins: func(t *testing.T, _ int64, now func() time.Time) tier.Store {
			return openStore(t, srv.url(), Config{IdentityDigest: randomDigest(), Now: now})
		}})
}

func TestConformanceCluster(t *testing.T) {
	srv := startCluster(t)
	newStore := func(t *testing.T, now func() time.Time) *Store {
		c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{srv.addr()}, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		s, err := New(c, Config{IdentityDigest: randomDigest(), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if !s.cluster {
			t.Fatal("cluster client not detected")
		}
		return s
	}
	tiertest.RunOptions(t, func(t *testing.T) tier.Store { return newStore(t, nil) }, tiertest.Options{
		SharedStats: true, ServerClock: true,
		Pins: func(t *testing.T, _ int64, now func() time.Time) tier.Store { return newStore(t, now) },
	})
}

func TestConfig(t *testing.T) {
	if _, err := Open("redis://127.0.0.1:1/0", Config{}); err == nil {
		t.Fatal("zero digest accepted")
	}
	for _, url := range []string{"http://nope", "redis+cluster://127.0.0.1:1?no_such_option=1", "rediss+cluster://%zz", "redis+cluster://127.0.0.1:1?addr="} {
		if _, err := Open(url, Config{IdentityDigest: [32]byte{1}}); err == nil {
			t.Errorf("bad URL %q accepted", url)
		}
	}
	s, err := Open("redis+cluster://127.0.0.1:1?addr=127.0.0.1:2", Config{IdentityDigest: [32]byte{1}})
	if err != nil || !s.cluster {
		t.Fatalf("cluster URL: %v (cluster %v)", err, s != nil && s.cluster)
	}
	s.Close()
}

// Two replicas of one model share blocks through one Redis; a replica of
// another model reuses nothing.
func TestReplicasShareAndIdentitiesIsolate(t *testing.T) {
	srv := startServer(t)
	digest := randomDigest()
	root := prefix.Root(digest[:], "")
	a := openStore(t, srv.url(), Config{IdentityDigest: digest})
	b := openStore(t, srv.url(), Config{IdentityDigest: digest})
	other := openStore(t, srv.url(), Config{IdentityDigest: randomDigest()})
	recs := tiertest.Chain(digest, root, tiertest.SmallLayout, 6, 1)
	if err := a.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	vals, err := b.Get(ctx, tiertest.Keys(recs))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
			t.Fatalf("replica b, block %d: %v", i, err)
		}
	}
	vals, err = other.Get(ctx, tiertest.Keys(recs))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != nil {
			t.Fatalf("another model read block %d", i)
		}
	}
}

func TestTTL(t *testing.T) {
	srv := startServer(t)
	digest := randomDigest()
	s := openStore(t, srv.url(), Config{IdentityDigest: digest, TTL: time.Hour})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 1, 2)
	s.Put(ctx, tiertest.Items(recs))
	ttl, err := s.client.TTL(ctx, s.key(recs[0].Key())).Result()
	if err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("TTL = %v, %v; want about 1h", ttl, err)
	}
}

// Redis killed mid-run: calls fail (no panic), the breaker opens and skips
// Redis at once, and after a restart and the cool-down the tier works again.
func TestServerKilledMidRun(t *testing.T) {
	srv := startServer(t)
	digest := randomDigest()
	const cooldown = 300 * time.Millisecond
	clock := newFakeClock()
	s := openStore(t, srv.url(), Config{IdentityDigest: digest, BreakerFailures: 3, BreakerCooldown: cooldown, CallTimeout: time.Minute, Now: clock.Now})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 4, 3)
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}

	srv.kill()
	for i := range 3 {
		if _, err := s.Get(ctx, tiertest.Keys(recs)); err == nil {
			t.Fatalf("call %d to a killed server succeeded", i)
		} else if errors.Is(err, tier.ErrUnavailable) {
			t.Fatalf("call %d: breaker open before %d failures: %v", i, 3, err)
		}
	}
	if !s.BreakerOpen() {
		t.Fatal("breaker closed after 3 consecutive failures")
	}
	for _, call := range []func() error{
		func() error { _, err := s.Get(ctx, tiertest.Keys(recs)); return err },
		func() error { return s.Put(ctx, tiertest.Items(recs)) },
		func() error { _, err := s.Contains(ctx, tiertest.Keys(recs)); return err },
		func() error { return s.Delete(ctx, tiertest.Keys(recs)) },
	} {
		if err := call(); !errors.Is(err, tier.ErrUnavailable) {
			t.Fatalf("call with the breaker open: %v, want ErrUnavailable", err)
		}
	}

	srv.start() // same port, empty (no persistence)
	clock.Advance(cooldown)
	vals, err := s.Get(ctx, tiertest.Keys(recs))
	if err != nil {
		t.Fatalf("probe after restart: %v", err)
	}
	for i, v := range vals {
		if v != nil {
			t.Fatalf("block %d served by a restarted empty server", i)
		}
	}
	if s.BreakerOpen() {
		t.Fatal("breaker still open after a good probe")
	}
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	if vals, err := s.Get(ctx, tiertest.Keys(recs)); err != nil || vals[0] == nil {
		t.Fatalf("after recovery: %v, %v", vals[0] == nil, err)
	}
}

// A slow Redis: a call that outlives CallTimeout fails and counts toward
// the breaker; the caller is never held longer than the timeout.
func TestSlowServer(t *testing.T) {
	srv := startServer(t)
	digest := randomDigest()
	s := openStore(t, srv.url(), Config{IdentityDigest: digest, BreakerFailures: 2, CallTimeout: 100 * time.Millisecond})
	admin := goredis.NewClient(&goredis.Options{Addr: srv.addr()})
	defer admin.Close()
	// Warm the pool so the next call reuses a connection.
	s.Contains(ctx, tiertest.Keys(tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 1, 4)))
	// Paused far longer than the two calls take on the slowest machine (the test ends, and
	// the server is killed, without waiting for the pause to pass).
	if err := admin.Do(ctx, "CLIENT", "PAUSE", 10*60*1000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	keys := tiertest.Keys(tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 2, 5))
	for range 2 {
		if _, err := s.Get(ctx, keys); err == nil {
			t.Fatal("a call to a paused server succeeded")
		}
	}
	if !s.BreakerOpen() {
		t.Fatal("breaker closed after 2 timeouts")
	}
}

func TestBreakerStateMachine(t *testing.T) {
	now := time.Unix(0, 0)
	b := breaker{failures: 2, cooldown: time.Second, now: func() time.Time { return now }}
	steps := []struct {
		name    string
		advance time.Duration
		verdict string // "ok", "fail", "" (no call)
		allowed bool
	}{
		{"closed", 0, "fail", true},
		{"one failure", 0, "fail", true},
		{"open", 0, "", false},
		{"still open", 999 * time.Millisecond, "", false},
		{"half-open probe", time.Millisecond, "fail", true},
		{"reopened", 0, "", false},
		{"probe again", time.Second, "ok", true},
		{"closed again", 0, "fail", true},
		{"one failure is not enough", 0, "ok", true},
	}
	for _, st := range steps {
		now = now.Add(st.advance)
		err := b.allow()
		if (err == nil) != st.allowed {
			t.Fatalf("%s: allow() = %v, want allowed %v", st.name, err, st.allowed)
		}
		if err == nil {
			b.done(st.verdict == "ok")
		}
	}
}
