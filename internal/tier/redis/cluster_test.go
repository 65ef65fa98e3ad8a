package redis

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/prefix"
	"stockpot/internal/tier"
	"stockpot/internal/tier/tiertest"
)

// clusterStore opens a store on c through a redis+cluster:// URL, as --remote-cache does.
func clusterStore(t *testing.T, c *cluster, cfg Config) *Store {
	t.Helper()
	url := "redis+cluster://" + c.nodes[0].addr()
	for _, a := range c.seeds()[1:] {
		url += map[bool]string{true: "?", false: "&"}[!strings.Contains(url, "?")] + "addr=" + a
	}
	s := openStore(t, url, cfg)
	if !s.cluster {
		t.Fatalf("%s: not opened as a cluster", url)
	}
	return s
}

// The Redis Cluster slot of a key, as Redis computes it, for block keys, pin records and
// the hash-tag edge cases.
func TestKeySlot(t *testing.T) {
	srv := startCluster(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.addr()})
	defer c.Close()
	digest := randomDigest()
	s, err := New(c, Config{IdentityDigest: digest})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"", "a", "foo", "{user1000}.following", "{}x", "x{}y", "{a}{b}", "a{b", "a}b{c}", "{{x}}"}
	for _, rec := range tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 8, 70) {
		keys = append(keys, s.key(rec.Key()), s.pinKey(rec.Key()))
	}
	for _, k := range keys {
		want, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		if got := keySlot(k); got != int(want) {
			t.Errorf("keySlot(%q) = %d, Redis says %d", k, got, want)
		}
	}
}

func TestConformanceCluster3(t *testing.T) {
	c := startCluster3(t)
	tiertest.RunOptions(t, func(t *testing.T) tier.Store {
		return clusterStore(t, c, Config{IdentityDigest: randomDigest()})
	}, tiertest.Options{SharedStats: true, ServerClock: true,
		Pins: func(t *testing.T, _ int64, now func() time.Time) tier.Store {
			return clusterStore(t, c, Config{IdentityDigest: randomDigest(), Now: now})
		}})
}

// commandCalls returns how many times node ran cmd (INFO commandstats).
func commandCalls(t *testing.T, a *goredis.Client, cmd string) int {
	t.Helper()
	info, err := a.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// A prefix's blocks spread over all three masters; a batch read is one MGET per slot (a
// block and its pin record share one), never a cross-slot MGET and never a GET per key sent
// by the client. With the read's TTL refresh (the default) each slot also runs one EVALSHA in
// the same pipeline, whose GETs of pin records run inside Redis (INFO counts them); without
// it, the read is the MGETs alone.
func TestClusterSpreadAndMGetPerSlot(t *testing.T) {
	for _, refresh := range []bool{false, true} {
		t.Run(fmt.Sprint("refresh=", refresh), func(t *testing.T) { testClusterMGetPerSlot(t, startCluster3(t), refresh) })
	}
}

func testClusterMGetPerSlot(t *testing.T, c *cluster, refresh bool) {
	digest := randomDigest()
	s := clusterStore(t, c, Config{IdentityDigest: digest, NoReadRefresh: !refresh})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 48, 71)
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	perNode := make([]int, 3)
	slots := map[int]bool{}
	for _, r := range recs {
		slot := keySlot(s.key(r.Key()))
		slots[slot] = true
		perNode[c.owner(slot)]++
	}
	for i := range c.nodes {
		n, err := c.admin(i).DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || int(n) != perNode[i] {
			t.Errorf("master %d holds %d keys, want %d (of 48) and not 0", i, n, perNode[i])
		}
	}
	if _, err := s.Get(ctx, tiertest.Keys(recs)); err != nil { // the masters cache the script
		t.Fatal(err)
	}
	var mgetBefore, getBefore, evalBefore int
	for i := range c.nodes {
		mgetBefore += commandCalls(t, c.admin(i), "mget")
		getBefore += commandCalls(t, c.admin(i), "get")
		evalBefore += commandCalls(t, c.admin(i), "evalsha") + commandCalls(t, c.admin(i), "eval")
	}
	vals, err := s.Get(ctx, tiertest.Keys(recs))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
			t.Fatalf("block %d: %v", i, err)
		}
	}
	var mget, get, eval int
	for i := range c.nodes {
		mget += commandCalls(t, c.admin(i), "mget")
		get += commandCalls(t, c.admin(i), "get")
		eval += commandCalls(t, c.admin(i), "evalsha") + commandCalls(t, c.admin(i), "eval")
	}
	wantEval, wantGet := 0, 0
	if refresh {
		wantEval, wantGet = len(slots), len(recs) // one script a slot; its GET of each pin record
	}
	if mget-mgetBefore != len(slots) || get-getBefore != wantGet || eval-evalBefore != wantEval {
		t.Fatalf("a read of %d keys in %d slots ran %d MGETs, %d GETs and %d scripts; want %d, %d and %d",
			len(recs), len(slots), mget-mgetBefore, get-getBefore, eval-evalBefore, len(slots), wantGet, wantEval)
	}
	if st := s.BreakerStats(); st.FailedCalls != 0 || st.SkippedKeys != 0 {
		t.Fatalf("breaker stats %+v after a clean run", st)
	}
}

// A slot moved between masters mid-run (CLUSTER SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT
// NODE): reads during the migration follow ASK, reads after it follow MOVED, and writes land
// on the new owner.
func TestClusterSlotMigration(t *testing.T) {
	c := startCluster3(t)
	digest := randomDigest()
	s := clusterStore(t, c, Config{IdentityDigest: digest})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 12, 72)
	items := tiertest.Items(recs)
	items[0].PinTTL = time.Hour // the pin record moves with its block
	if err := s.Put(ctx, items); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		vals, err := s.Get(ctx, tiertest.Keys(recs))
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		for i, v := range vals {
			if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
				t.Fatalf("%s: block %d: %v", when, i, err)
			}
		}
	}
	check("before")
	k := s.key(recs[0].Key())
	slot := keySlot(k)
	from := c.owner(slot)
	to := (from + 1) % 3
	src, dst := c.admin(from), c.admin(to)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[from]).Err())
	must(src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[to]).Err())
	names, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
	must(err)
	if len(names) != 2 {
		t.Fatalf("slot %d holds %q, want the block and its pin record", slot, names)
	}
	args := []any{"MIGRATE", "127.0.0.1", c.nodes[to].port, "", 0, 5000, "KEYS"}
	for _, n := range names {
		args = append(args, n)
	}
	must(src.Do(ctx, args...).Err())
	check("during the migration (ASK)")
	for i := range c.nodes {
		must(c.admin(i).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", c.ids[to]).Err())
	}
	check("after the migration (MOVED)")
	if n, err := dst.Exists(ctx, k).Result(); err != nil || n != 1 {
		t.Fatalf("block not on the new owner: %v, %v", n, err)
	}
	if err := s.Put(ctx, items[:1]); err != nil {
		t.Fatal(err)
	}
	if n, _ := src.Do(ctx, "CLUSTER", "COUNTKEYSINSLOT", slot).Int(); n != 0 {
		t.Fatalf("old owner holds %d keys of the moved slot after a write", n)
	}
	if pins := s.Pins(); len(pins) != 1 {
		t.Fatalf("pins %v, want the moved block's", pins)
	}
	if st := s.BreakerStats(); st.FailedCalls != 0 || st.SkippedKeys != 0 {
		t.Fatalf("breaker stats %+v: a migration is not a failure", st)
	}
}

// A master killed mid-run: reads go on without an error, its keys miss and the others hit;
// its breaker opens (counted) and skips it; after it restarts (empty) and the cool-down, a
// probe closes the breaker (counted) and its slots work again.
func TestClusterMasterKilled(t *testing.T) {
	c := startCluster3(t)
	digest := randomDigest()
	const cooldown = time.Second
	clock := newFakeClock() // the cool-down passes only when the test advances it
	s := clusterStore(t, c, Config{IdentityDigest: digest, BreakerFailures: 2, BreakerCooldown: cooldown, CallTimeout: time.Minute, Now: clock.Now})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 36, 73)
	keys := tiertest.Keys(recs)
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	const dead = 2
	onDead := make([]bool, len(recs))
	nDead := 0
	for i, r := range recs {
		if onDead[i] = c.owner(keySlot(s.key(r.Key()))) == dead; onDead[i] {
			nDead++
		}
	}
	if nDead == 0 || nDead == len(recs) {
		t.Fatalf("%d of %d blocks on the master to kill; want some", nDead, len(recs))
	}
	c.nodes[dead].kill()
	for round := range 6 { // fails twice (the breaker opens), then skips
		vals, err := s.Get(ctx, keys)
		if err != nil {
			t.Fatalf("round %d: a read failed with one master of three down: %v", round, err)
		}
		for i, v := range vals {
			if onDead[i] != (v == nil) {
				t.Fatalf("round %d: block %d (on the dead master: %v) read %v", round, i, onDead[i], v != nil)
			}
			if v != nil {
				if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
					t.Fatalf("round %d: block %d: %v", round, i, err)
				}
			}
		}
		has, err := s.Contains(ctx, keys)
		if err != nil {
			t.Fatalf("round %d: Contains: %v", round, err)
		}
		for i := range has {
			if has[i] == onDead[i] {
				t.Fatalf("round %d: Contains block %d = %v", round, i, has[i])
			}
		}
	}
	st := s.BreakerStats()
	if st.Open != 1 || st.Opens != 1 || st.Recoveries != 0 || st.FailedCalls != 2 {
		t.Fatalf("with one master dead: %+v; want one breaker open, opened once after 2 failed calls", st)
	}
	if want := uint64(6 * 2 * nDead); st.SkippedKeys != want {
		t.Fatalf("skipped %d keys, want %d (6 rounds of Get and Contains × %d)", st.SkippedKeys, want, nDead)
	}
	if !s.BreakerOpen() {
		t.Fatal("BreakerOpen() = false with a master's breaker open")
	}
	// A write: the live masters' items are stored, each of the dead one's is one error.
	err := s.Put(ctx, tiertest.Items(recs))
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != nDead || !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("Put with a master down: %v; want %d ErrUnavailable errors", err, nDead)
	}
	if hits := s.Stats().Hits; hits != uint64(6*(len(recs)-nDead)) {
		t.Fatalf("hits %d, want %d", hits, 6*(len(recs)-nDead))
	}

	c.nodes[dead].start() // same port and nodes.conf: it rejoins, empty
	c.waitOK()
	clock.Advance(cooldown)
	vals, err := s.Get(ctx, keys)
	if err != nil {
		t.Fatalf("after the restart: %v", err)
	}
	for i, v := range vals {
		if onDead[i] != (v == nil) {
			t.Fatalf("after the restart: block %d (on the restarted master: %v) read %v", i, onDead[i], v != nil)
		}
	}
	st = s.BreakerStats()
	if st.Open != 0 || st.Recoveries != 1 {
		t.Fatalf("after the restart: %+v; want no breaker open, one recovery", st)
	}
	// The same counts on /metrics.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		got[mf.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	want := map[string]float64{"stockpot_kv_remote_breaker_open": 0, "stockpot_kv_remote_breaker_opens_total": 1,
		"stockpot_kv_remote_breaker_recoveries_total": 1, "stockpot_kv_remote_failed_calls_total": float64(st.FailedCalls),
		"stockpot_kv_remote_skipped_keys_total": float64(st.SkippedKeys)}
	for name, w := range want {
		if g, ok := got[name]; !ok || g != w {
			t.Errorf("metric %s = %v (present %v), want %v", name, g, ok, w)
		}
	}
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	vals, err = s.Get(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v == nil {
			t.Fatalf("after recovery: block %d missed", i)
		}
	}
}

// Every master down: the batch fails as a whole (the caller treats it as misses), then the
// breakers skip at once with ErrUnavailable.
func TestClusterAllMastersDown(t *testing.T) {
	c := startCluster3(t)
	digest := randomDigest()
	s := clusterStore(t, c, Config{IdentityDigest: digest, BreakerFailures: 1, BreakerCooldown: time.Minute, CallTimeout: time.Minute})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 24, 74)
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.nodes {
		n.kill()
	}
	if _, err := s.Get(ctx, tiertest.Keys(recs)); err == nil || errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("first read with every master down: %v; want a failure", err)
	}
	_, err := s.Get(ctx, tiertest.Keys(recs))
	if !errors.Is(err, tier.ErrUnavailable) {
		t.Fatalf("read with every breaker open: %v; want ErrUnavailable", err)
	}
	if _, err := s.Keys(ctx, tier.AllRoots); err == nil {
		t.Fatal("Keys with every master down succeeded")
	}
}

// A master killed while readers and writers are running: no read fails, every value read
// verifies, a write fails only for the dead master's items (ErrUnavailable), and the breaker
// opened.
func TestClusterMasterKilledUnderLoad(t *testing.T) {
	c := startCluster3(t)
	digest := randomDigest()
	const cooldown = 200 * time.Millisecond
	clock := newFakeClock()
	s := clusterStore(t, c, Config{IdentityDigest: digest, BreakerFailures: 2, BreakerCooldown: cooldown, CallTimeout: time.Minute, Now: clock.Now})
	recs := tiertest.Chain(digest, prefix.Root(digest[:], ""), tiertest.SmallLayout, 32, 75)
	if err := s.Put(ctx, tiertest.Items(recs)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	var reads atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if w == 0 && n%4 == 0 { // one writer among the readers
					if err := s.Put(ctx, tiertest.Items(recs)); err != nil && !errors.Is(err, tier.ErrUnavailable) {
						errs <- fmt.Errorf("Put: %w", err)
					}
					continue
				}
				vals, err := s.Get(ctx, tiertest.Keys(recs))
				reads.Add(1)
				if err != nil {
					errs <- fmt.Errorf("Get: %w", err)
					continue
				}
				for i, v := range vals {
					if v == nil {
						continue
					}
					if _, err := tier.DecodeVerify(v, tiertest.Want(recs[i])); err != nil {
						errs <- fmt.Errorf("block %d: %w", i, err)
					}
				}
			}
		}()
	}
	// Kill a master while the readers run; its breaker opens and skips it; past a cool-down
	// a probe fails and reopens it. Each stage is waited for, not slept through.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("never: %s (breaker %+v)", what, s.BreakerStats())
			}
		}
	}
	waitFor("reads before the kill", func() bool { return reads.Load() >= 8 })
	c.nodes[1].kill()
	waitFor("the dead master's breaker to open and skip keys", func() bool {
		st := s.BreakerStats()
		return st.Opens >= 1 && st.Open == 1 && st.SkippedKeys > 0
	})
	failed := s.BreakerStats().FailedCalls
	clock.Advance(cooldown)
	waitFor("a probe to fail and reopen the breaker", func() bool {
		st := s.BreakerStats()
		return st.FailedCalls > failed && st.Open == 1
	})
	at := reads.Load()
	waitFor("reads after the reopening", func() bool { return reads.Load() >= at+8 })
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := s.BreakerStats(); st.Opens < 1 || st.Open != 1 || st.SkippedKeys == 0 {
		t.Fatalf("breaker stats %+v: want the dead master's breaker open, keys skipped", st)
	}
}
