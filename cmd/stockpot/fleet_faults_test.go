package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/soak"
	"stockpot/internal/tier/redis"
)

// The shared tier's faults, end to end: real redis-server processes (one, or a 3-master
// cluster) behind in-process replicas. Redis slow, full or flapping, or a master killed:
// every request is answered, every answer is the one a server with no cache gives (greedy),
// a request never waits on Redis past its prefetch policy, and what does not reach Redis is
// counted. Assertions are on counters and outcomes, never on durations.

// redisProc is a redis-server on a fixed loopback port that a test can stop and start again.
type redisProc struct {
	t    *testing.T
	port string
	dir  string
	args []string
	cmd  *exec.Cmd
}

func newRedisProc(t *testing.T, extra ...string) *redisProc {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found (%v): `make test` installs it", err)
	}
	_, port, _ := net.SplitHostPort(freePort(t))
	r := &redisProc{t: t, port: port, dir: t.TempDir(), args: extra}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *redisProc) addr() string { return "127.0.0.1:" + r.port }

func (r *redisProc) start() {
	r.t.Helper()
	args := append([]string{"--port", r.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", r.dir,
		"--protected-mode", "no", "--loglevel", "warning"}, r.args...)
	r.cmd = exec.Command("redis-server", args...)
	log, err := os.Create(r.dir + "/redis.log")
	if err != nil {
		r.t.Fatal(err)
	}
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: r.addr(), MaxRetries: -1})
	defer c.Close()
	for i := 0; ; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		if i == 9000 { // 3 minutes: a watchdog
			b, _ := os.ReadFile(r.dir + "/redis.log")
			r.t.Fatalf("redis-server on %s not ready:\n%s", r.addr(), b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop is kill -9: nothing is saved (none is configured anyway).
func (r *redisProc) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		r.cmd = nil
	}
}

// slowProxy relays TCP to upstream, holding every chunk of the server's replies for delay:
// a Redis that answers, slowly (the soak's proxy).
func slowProxy(t *testing.T, upstream string, delay time.Duration) string {
	t.Helper()
	p, err := soak.NewTCPProxy(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p.SetDelay(delay)
	t.Cleanup(p.Close)
	return p.Addr()
}

// faultReplica is an in-process replica with the remote tier only (written through) and the
// given prefetch policy.
func faultReplica(t *testing.T, url string, rc redis.Config, policy engine.PrefetchPolicy, maxWait time.Duration) (*instance, string) {
	t.Helper()
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, tiers: offload.Config{RemoteURL: url, RemoteWrite: offload.WriteThrough, Remote: rc}, engine: engine.Config{BlockSize: 16, KVMemory: 16 << 20, PrefixCache: true, Dedup: true, MaxBatchTokens: 256, MaxRunning: 16, Prefetch: policy, PrefetchMaxWait: maxWait}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	t.Cleanup(func() { ts.Close(); inst.Close() })
	return inst, ts.URL
}

// referenceAnswers are a server's greedy answers with no cache at all: the oracle.
func referenceAnswers(t *testing.T, prompts []string) []string {
	t.Helper()
	_, ts := newTestInstance(t, func(o *serveOptions) { o.engine.PrefixCache = false })
	out := make([]string, len(prompts))
	for i, p := range prompts {
		out[i] = completeText(t, ts.URL, p).text
	}
	return out
}

func faultPrompts(tag string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s prompt %d. %s", tag, i, longText(700+40*i))
	}
	return out
}

// remoteAccounted waits until every block written through to the remote tier (the last) is
// written, failed or dropped, the queue drained and no Put in flight: nothing vanishes
// uncounted.
func remoteAccounted(t *testing.T, inst *instance) offload.WriterStats {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st := inst.tiers.WriterStats()
		r := len(st.Written) - 1
		got := st.Written[r] + st.Failed[r] + st.Dropped[r]
		if got == st.Through && st.Queued[r] == 0 {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote writes: %d through, but written %d + failed %d + dropped %d = %d (%d queued)",
				st.Through, st.Written[r], st.Failed[r], st.Dropped[r], got, st.Queued[r])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitQueuesEmpty(t *testing.T, inst *instance) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st := inst.tiers.WriterStats()
		if st.Queued[len(st.Queued)-1] == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote queue never drained: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func sumPrefix(m map[string]float64, prefix string) float64 {
	s := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

// TestRemoteSlowRedis: replica A fills Redis directly; replica B reaches the same Redis
// through a proxy that holds every reply for 300 ms, under --prefetch timeout with a 40 ms
// deadline. B's requests are admitted at the deadline without their prefetch (counted late),
// compute their prompts, and answer what a
// cache-off server answers; B's own writes to the slow Redis are all accounted for.
func TestRemoteSlowRedis(t *testing.T) {
	r := newRedisProc(t)
	prompts := faultPrompts("Slow", 4)
	want := referenceAnswers(t, prompts)
	instA, urlA := faultReplica(t, "redis://"+r.addr()+"/0", redis.Config{}, engine.PrefetchWait, 0)
	for i, p := range prompts {
		if got := completeText(t, urlA, p).text; got != want[i] {
			t.Fatalf("A, prompt %d: %q, want %q", i, got, want[i])
		}
	}
	waitQueuesEmpty(t, instA)
	if st := remoteAccounted(t, instA); st.Written[len(st.Written)-1] == 0 {
		t.Fatalf("A wrote nothing to Redis: %+v", st)
	}

	slow := slowProxy(t, r.addr(), 300*time.Millisecond)
	rc := redis.Config{CallTimeout: 5 * time.Second} // slow, not failing: the prefetch deadline decides
	instB, urlB := faultReplica(t, "redis://"+slow+"/0", rc, engine.PrefetchTimeout, 40*time.Millisecond)
	for i, p := range prompts {
		res := completeText(t, urlB, p)
		if res.text != want[i] {
			t.Fatalf("B, prompt %d: %q, want %q", i, res.text, want[i])
		}
		if res.usage.Cache["remote_tokens"] != 0 {
			t.Fatalf("B, prompt %d: %d tokens restored through a Redis slower than the deadline", i, res.usage.Cache["remote_tokens"])
		}
	}
	m := scrape(t, urlB)
	late := m[`stockpot_engine_prefetches_total{outcome="late"}`]
	t.Logf("B: %v prefetches late, %v dropped; %v prompt tokens computed", late, m[`stockpot_engine_prefetches_total{outcome="dropped"}`],
		m[`stockpot_prompt_tokens_total{source="computed"}`])
	if int(late) != len(prompts) {
		t.Fatalf("%v prefetches admitted late, want all %d: a request waited on the slow Redis past its deadline", late, len(prompts))
	}
	remoteAccounted(t, instB)
}

// TestRemoteFullRedis: a Redis with maxmemory and noeviction fills up under replica A's
// write-through. The refused writes are failures counted as no_space, not a Redis that is
// down: the breaker stays closed, so replica B still restores, from the full Redis, the
// prompt that was written before it filled. Every answer is the cache-off server's.
func TestRemoteFullRedis(t *testing.T) {
	r := newRedisProc(t, "--maxmemory", "3mb", "--maxmemory-policy", "noeviction")
	prompts := faultPrompts("Full", 8)
	want := referenceAnswers(t, prompts)
	rc := redis.Config{BreakerFailures: 2, CallTimeout: testRemote.CallTimeout}
	instA, urlA := faultReplica(t, "redis://"+r.addr()+"/0", rc, engine.PrefetchWait, 0)
	completeText(t, urlA, prompts[0])
	waitQueuesEmpty(t, instA)
	first := remoteAccounted(t, instA)
	if first.Failed[len(first.Failed)-1] != 0 {
		t.Fatalf("the first prompt already failed to fit: %+v", first)
	}
	for i, p := range prompts[1:] {
		if got := completeText(t, urlA, p).text; got != want[i+1] {
			t.Fatalf("A, prompt %d: %q, want %q", i+1, got, want[i+1])
		}
		waitQueuesEmpty(t, instA)
	}
	st := remoteAccounted(t, instA)
	mA := scrape(t, urlA)
	t.Logf("A: %+v; breaker opens %v", st, mA["stockpot_kv_remote_breaker_opens_total"])
	if st.Failed[len(st.Failed)-1] == 0 {
		t.Fatalf("Redis never filled: %+v (raise the prompts or lower maxmemory)", st)
	}
	if v := mA[`stockpot_kv_tier_write_failures_total{reason="no_space",tier="remote"}`]; v == 0 {
		t.Fatalf("refused writes not counted as no_space: %v io_error", mA[`stockpot_kv_tier_write_failures_total{reason="io_error",tier="remote"}`])
	}
	if f, o := mA["stockpot_kv_remote_failed_calls_total"], mA["stockpot_kv_remote_breaker_opens_total"]; f != 0 || o != 0 {
		t.Fatalf("a full Redis counted %v failed calls, opened the breaker %v times: it answers, it is only full", f, o)
	}

	_, urlB := faultReplica(t, "redis://"+r.addr()+"/0", rc, engine.PrefetchWait, 0)
	for i, p := range prompts {
		res := completeText(t, urlB, p)
		if res.text != want[i] {
			t.Fatalf("B, prompt %d: %q, want %q", i, res.text, want[i])
		}
		if i == 0 {
			if aligned := (res.usage.PromptTokens - 1) / 16 * 16; res.usage.Cache["remote_tokens"] != aligned {
				t.Fatalf("B restored %d of prompt 0's %d tokens from the full Redis", res.usage.Cache["remote_tokens"], aligned)
			}
		}
	}
}

// TestRemoteFlappingRedis: Redis killed and started again, three times, under traffic. While
// it is down the breaker opens (counted) and requests compute; once it is back a probe closes
// the breaker (counted) and write-through resumes. Every answer is the cache-off server's and
// every write is accounted for.
func TestRemoteFlappingRedis(t *testing.T) {
	r := newRedisProc(t)
	prompts := faultPrompts("Flap", 6)
	want := referenceAnswers(t, prompts)
	// A generous call timeout: a Redis that is down refuses at once, and one that is up must not
	// fail calls that a busy machine makes slow.
	rc := redis.Config{BreakerFailures: 2, BreakerCooldown: 50 * time.Millisecond, CallTimeout: testRemote.CallTimeout}
	inst, url := faultReplica(t, "redis://"+r.addr()+"/0", rc, engine.PrefetchTimeout, 100*time.Millisecond)
	m0 := scrape(t, url)
	for round := range 3 {
		r.stop()
		// New prompts while Redis is down: their write-through fails (or is skipped by the
		// open breaker), counted.
		for i := range 3 {
			p := fmt.Sprintf("Down %d.%d %s", round, i, longText(600))
			if res := completeText(t, url, p); res.usage.PromptTokens == 0 {
				t.Fatalf("round %d: no answer with Redis down", round)
			}
		}
		waitQueuesEmpty(t, inst)
		r.start()
		deadline := time.Now().Add(3 * time.Minute)
		for i := 0; ; i++ { // Redis is back: requests until a probe closes the breaker
			p := fmt.Sprintf("Up %d.%d %s", round, i, longText(600))
			completeText(t, url, p)
			waitQueuesEmpty(t, inst)
			if m := scrape(t, url); m["stockpot_kv_remote_breaker_open"] == 0 && m["stockpot_kv_remote_breaker_recoveries_total"] > m0["stockpot_kv_remote_breaker_recoveries_total"]+float64(round) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the breaker never closed again after Redis came back: %v", round, scrape(t, url))
			}
			time.Sleep(60 * time.Millisecond) // past the cool-down, so the next call is a probe
		}
		for i, p := range prompts {
			if got := completeText(t, url, p).text; got != want[i] {
				t.Fatalf("round %d, prompt %d: %q, want %q", round, i, got, want[i])
			}
		}
	}
	waitQueuesEmpty(t, inst)
	st := remoteAccounted(t, inst)
	m := scrape(t, url)
	t.Logf("after 3 flaps: %+v; breaker opens %v, recoveries %v, failed calls %v", st, m["stockpot_kv_remote_breaker_opens_total"],
		m["stockpot_kv_remote_breaker_recoveries_total"], m["stockpot_kv_remote_failed_calls_total"])
	if m["stockpot_kv_remote_breaker_opens_total"] < 3 || m["stockpot_kv_remote_breaker_recoveries_total"] < 3 {
		t.Fatalf("3 flaps: breaker opened %v and recovered %v times, want 3 each", m["stockpot_kv_remote_breaker_opens_total"], m["stockpot_kv_remote_breaker_recoveries_total"])
	}
	if failed := sumPrefix(m, `stockpot_kv_tier_write_failures_total{reason="unavailable",tier="remote"}`) +
		sumPrefix(m, `stockpot_kv_tier_write_failures_total{reason="io_error",tier="remote"}`) +
		sumPrefix(m, `stockpot_kv_tier_write_failures_total{reason="timeout",tier="remote"}`); failed == 0 {
		t.Fatalf("no remote write failures counted with Redis down three times")
	}
}

// redisCluster is three masters, a third of the slots each, no replicas, and
// cluster-require-full-coverage off (a dead master leaves the others serving; docs/deploy.md).
type redisCluster struct {
	t     *testing.T
	nodes []*redisProc
}

func newRedisCluster(t *testing.T) *redisCluster {
	t.Helper()
	c := &redisCluster{t: t}
	for range 3 {
		c.nodes = append(c.nodes, newRedisProc(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "500", "--cluster-require-full-coverage", "no"))
	}
	ctx := context.Background()
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range c.nodes {
		a := goredis.NewClient(&goredis.Options{Addr: n.addr(), MaxRetries: -1})
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatalf("node %d: CLUSTER ADDSLOTSRANGE: %v", i, err)
		}
		if i > 0 {
			if err := a.ClusterMeet(ctx, "127.0.0.1", c.nodes[0].port).Err(); err != nil {
				t.Fatalf("node %d: CLUSTER MEET: %v", i, err)
			}
		}
		a.Close()
	}
	c.waitOK()
	return c
}

func (c *redisCluster) url() string {
	return "redis+cluster://" + c.nodes[0].addr() + "?addr=" + c.nodes[1].addr() + "&addr=" + c.nodes[2].addr()
}

// waitOK waits until every live master sees all three and every slot is served.
func (c *redisCluster) waitOK() {
	c.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for i, n := range c.nodes {
		if n.cmd == nil {
			continue
		}
		a := goredis.NewClient(&goredis.Options{Addr: n.addr(), MaxRetries: -1})
		for {
			info, err := a.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") &&
				strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				a.Close()
				c.t.Fatalf("node %d: cluster not ok: %v\n%s", i, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		a.Close()
	}
}

// TestRemoteClusterMasterKilled: replicas on a 3-master Redis Cluster. A writes its prompts
// through; a cold B restores them from the cluster. One master is killed: A's new blocks on
// it fail (counted), B restores what the live masters hold and computes the rest, the
// per-master breakers open (counted), and no answer differs from a cache-off server's. The
// master comes back (empty) and the breakers recover (counted).
func TestRemoteClusterMasterKilled(t *testing.T) {
	c := newRedisCluster(t)
	prompts := faultPrompts("Cluster", 8)
	want := referenceAnswers(t, prompts)
	// A generous call timeout: a killed master refuses at once, and the live ones must not fail
	// calls that a busy machine makes slow (A's writes and B's restores are counted).
	rc := redis.Config{BreakerFailures: 2, BreakerCooldown: 100 * time.Millisecond, CallTimeout: testRemote.CallTimeout}
	instA, urlA := faultReplica(t, c.url(), rc, engine.PrefetchWait, 0)
	for i, p := range prompts[:6] {
		if got := completeText(t, urlA, p).text; got != want[i] {
			t.Fatalf("A, prompt %d: %q, want %q", i, got, want[i])
		}
	}
	if st := remoteAccounted(t, instA); st.Failed[0] != 0 || st.Dropped[0] != 0 {
		t.Fatalf("A's writes with every master up: %+v", st)
	}
	_, urlB := faultReplica(t, c.url(), rc, engine.PrefetchWait, 0)
	for i, p := range prompts[:3] {
		res := completeText(t, urlB, p)
		if aligned := (res.usage.PromptTokens - 1) / 16 * 16; res.text != want[i] || res.usage.Cache["remote_tokens"] != aligned {
			t.Fatalf("B, prompt %d: %q restoring %d of %d tokens; want %q, all restored", i, res.text, res.usage.Cache["remote_tokens"], aligned, want[i])
		}
	}

	c.nodes[2].stop()
	for i, p := range prompts[6:] { // new blocks: a third of them hash to the dead master
		if got := completeText(t, urlA, p).text; got != want[6+i] {
			t.Fatalf("A with a master down, prompt %d: %q, want %q", 6+i, got, want[6+i])
		}
	}
	stA := remoteAccounted(t, instA)
	partial := 0
	for i, p := range prompts[3:6] { // B has not seen these: it restores up to the first lost block
		res := completeText(t, urlB, p)
		if res.text != want[3+i] {
			t.Fatalf("B with a master down, prompt %d: %q, want %q", 3+i, res.text, want[3+i])
		}
		if res.usage.Cache["discarded_tokens"] != 0 {
			t.Fatalf("B, prompt %d: %d tokens discarded", 3+i, res.usage.Cache["discarded_tokens"])
		}
		if aligned := (res.usage.PromptTokens - 1) / 16 * 16; res.usage.Cache["remote_tokens"] < aligned {
			partial++
		}
	}
	mA, mB := scrape(t, urlA), scrape(t, urlB)
	t.Logf("master down: A %+v, write failures unavailable %v io_error %v timeout %v; B restored partially %d of 3; breaker opens A %v B %v, skipped keys B %v",
		stA, mA[`stockpot_kv_tier_write_failures_total{reason="unavailable",tier="remote"}`], mA[`stockpot_kv_tier_write_failures_total{reason="io_error",tier="remote"}`],
		mA[`stockpot_kv_tier_write_failures_total{reason="timeout",tier="remote"}`], partial,
		sumPrefix(mA, "stockpot_kv_remote_breaker_opens_total"), sumPrefix(mB, "stockpot_kv_remote_breaker_opens_total"), sumPrefix(mB, "stockpot_kv_remote_skipped_keys_total"))
	if stA.Failed[0] == 0 {
		t.Fatalf("no write failed with a master down: %+v", stA)
	}
	if partial == 0 {
		t.Fatal("every prompt restored whole with a master down: the test lost nothing")
	}
	if sumPrefix(mA, "stockpot_kv_remote_breaker_opens_total")+sumPrefix(mB, "stockpot_kv_remote_breaker_opens_total") == 0 {
		t.Fatal("no breaker opened with a master down")
	}

	c.nodes[2].start() // same port and nodes.conf: it rejoins, empty
	c.waitOK()
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; sumPrefix(scrape(t, urlA), "stockpot_kv_remote_breaker_recoveries_total") == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("A's breaker never recovered: %v", sumPrefix(scrape(t, urlA), "stockpot_kv_remote_breaker_"))
		}
		time.Sleep(150 * time.Millisecond) // past the cool-down: the next write is a probe
		completeText(t, urlA, fmt.Sprintf("Back %d. %s", i, longText(500)))
	}
	for i, p := range prompts {
		if got := completeText(t, urlB, p).text; got != want[i] {
			t.Fatalf("B after the master came back, prompt %d: %q, want %q", i, got, want[i])
		}
	}
	remoteAccounted(t, instA)
}
