package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/server"
	"stockpot/internal/tier/redis"
)

// What an operator sees of the Redis tier: GET /v1/cache's remote row and the
// stockpot_kv_cache_{blocks,usage_bytes}{tier="remote"} gauges carry what Redis holds
// (measured from Redis, so a second replica that wrote nothing sees the first one's blocks),
// and stockpot_kv_tier_read_bytes_total{tier="remote"} counts what a restore read.
func TestRedisUsageOnCacheAndMetrics(t *testing.T) {
	addr := startRedis(t)
	rc := testRemote
	rc.UsageEvery = 50 * time.Millisecond
	to := offload.Config{RemoteURL: "redis://" + addr + "/0", RemoteWrite: offload.WriteThrough, Remote: rc}
	replica := func() (*instance, string) {
		o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, tiers: to, server: server.Config{AdminKeys: []string{"adm"}, PublicMetrics: true},
			engine: engine.Config{BlockSize: 16, KVMemory: 16 << 20, PrefixCache: true, MaxBatchTokens: 256, MaxRunning: 4, Prefetch: engine.PrefetchWait}}
		inst, err := newInstance(o)
		if err != nil {
			t.Fatal(err)
		}
		ts := newHTTPServer(inst)
		t.Cleanup(func() { ts.Close(); inst.Close() })
		return inst, ts.URL
	}
	instA, a := replica()
	prompt := longText(1500)
	first := completeText(t, a, prompt)
	remoteAccounted(t, instA)
	written := instA.tiers.WriterStats().Written[len(instA.tiers.WriterStats().Written)-1]

	_, b := replica() // wrote nothing: what it shows is Redis's
	var remote struct {
		Tier   string `json:"tier"`
		Blocks int64  `json:"blocks"`
		Bytes  int64  `json:"bytes"`
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var out struct {
			Tiers []json.RawMessage `json:"tiers"`
		}
		if adminCall(t, "GET", b+"/v1/cache", "adm", nil, &out) == 200 {
			for _, raw := range out.Tiers {
				if json.Unmarshal(raw, &remote) == nil && remote.Tier == "remote" && remote.Blocks > 0 {
					break
				}
			}
		}
		if remote.Tier == "remote" && uint64(remote.Blocks) == written {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/cache on replica B: remote row %+v, want the %d blocks A wrote", remote, written)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if remote.Bytes < int64(written)*16*64 { // at least the K/V of 16 tokens a block (64 B a token here, and more)
		t.Errorf("GET /v1/cache: remote %d blocks in %d bytes: too few bytes", remote.Blocks, remote.Bytes)
	}
	m := scrape(t, b)
	if m[`stockpot_kv_cache_blocks{tier="remote"}`] != float64(remote.Blocks) || m[`stockpot_kv_cache_usage_bytes{tier="remote"}`] != float64(remote.Bytes) {
		t.Errorf("metrics: remote blocks %v, bytes %v; GET /v1/cache said %d and %d", m[`stockpot_kv_cache_blocks{tier="remote"}`],
			m[`stockpot_kv_cache_usage_bytes{tier="remote"}`], remote.Blocks, remote.Bytes)
	}
	if got, ok := m[`stockpot_kv_tier_read_bytes_total{tier="remote"}`]; !ok || got != 0 {
		t.Errorf("replica B read %v bytes (present %v) from Redis before any request; want a 0 series", got, ok)
	}
	again := completeText(t, b, prompt)
	if again.usage.Cache["remote_tokens"] == 0 || again.text != first.text {
		t.Fatalf("replica B: %v remote tokens, text %q vs %q", again.usage.Cache, again.text, first.text)
	}
	if got := scrape(t, b)[`stockpot_kv_tier_read_bytes_total{tier="remote"}`]; got < float64(again.usage.Cache["remote_tokens"])*64 {
		t.Errorf("replica B restored %d tokens from Redis but counts %v bytes read", again.usage.Cache["remote_tokens"], got)
	}
}

// relay is what a Kubernetes Service is to the replicas: one address, forwarded to whichever
// Redis is the primary now. Retarget points it elsewhere and cuts the connections it relays
// (the old primary is dead: so are they).
type relay struct {
	ln     net.Listener
	target atomic.Value // string
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

func newRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, conns: map[net.Conn]bool{}}
	r.target.Store(target)
	go r.accept()
	t.Cleanup(func() { ln.Close(); r.Retarget(target) })
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) accept() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.serve(c)
	}
}

func (r *relay) serve(c net.Conn) {
	up, err := net.Dial("tcp", r.target.Load().(string))
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	r.conns[c], r.conns[up] = true, true
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) { io.Copy(dst, src); done <- struct{}{} }
	go pipe(up, c)
	go pipe(c, up)
	<-done
	c.Close()
	up.Close()
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, up)
	r.mu.Unlock()
}

// Retarget sends new connections to target and closes the ones open now.
func (r *relay) Retarget(target string) {
	r.target.Store(target)
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
}

// TestRedisFailover is deploy/k8s/redis-replica.yaml's failover, with real processes: a
// primary and a replica (REPLICAOF) behind one address (relay, the Service), a writer and a
// reader replica under load, the primary killed -9, the replica promoted (REPLICAOF NO ONE)
// and the address repointed. Every answer under load is the cache-off one (a read that
// fails computes instead); a replica started after the failover restores what was written
// before it from the promoted replica; and the running replicas' remote reads resume.
func TestRedisFailover(t *testing.T) {
	primary := newRedisProc(t)
	replicaProc := newRedisProc(t, "--replicaof", "127.0.0.1", primary.port)
	svc := newRelay(t, primary.addr())
	prompts := faultPrompts("Failover", 6)
	want := referenceAnswers(t, prompts)
	rc := redis.Config{BreakerFailures: 2, BreakerCooldown: 50 * time.Millisecond, CallTimeout: testRemote.CallTimeout}
	url := "redis://" + svc.addr() + "/0"
	// A working pool of 70 blocks holds about four of the prompts: cycling through six, each
	// request restores its prefix from Redis (or computes it), so the load reads Redis.
	small := func() (*instance, string) {
		o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, tiers: offload.Config{RemoteURL: url, RemoteWrite: offload.WriteThrough, Remote: rc},
			engine: engine.Config{BlockSize: 16, KVMemory: 70 * 8192, PrefixCache: true, Dedup: true, MaxBatchTokens: 256, MaxRunning: 2, Prefetch: engine.PrefetchWait}}
		inst, err := newInstance(o)
		if err != nil {
			t.Fatal(err)
		}
		ts := newHTTPServer(inst)
		t.Cleanup(func() { ts.Close(); inst.Close() })
		return inst, ts.URL
	}
	winst, w := small()
	for i, p := range prompts[:3] {
		if got := completeText(t, w, p).text; got != want[i] {
			t.Fatalf("before: prompt %d: %q, want %q", i, got, want[i])
		}
	}
	remoteAccounted(t, winst)
	pc := goredis.NewClient(&goredis.Options{Addr: primary.addr(), MaxRetries: -1})
	if n, err := pc.Wait(context.Background(), 1, 60_000).Result(); err != nil || n < 1 {
		t.Fatalf("WAIT 1: %d replicas acknowledged, %v", n, err)
	}
	pc.Close()
	_, r := small()

	var wrong, answered, remote atomic.Int64
	var firstWrong atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g, base := range []string{w, r} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body, _ := json.Marshal(map[string]any{"prompt": prompts[i%len(prompts)], "max_tokens": 12, "temperature": 0})
				code, out := postBytes(base+"/v1/completions", body)
				var res struct {
					Choices []struct{ Text string }
					Usage   apiUsage
				}
				if code != 200 || json.Unmarshal(out, &res) != nil || len(res.Choices) != 1 || res.Choices[0].Text != want[i%len(prompts)] {
					wrong.Add(1)
					firstWrong.CompareAndSwap(nil, fmt.Sprintf("%s prompt %d: HTTP %d %s", base, i%len(prompts), code, out))
				}
				if res.Usage.Cache["remote_tokens"] > 0 {
					remote.Add(1)
				}
				answered.Add(1)
			}
		}()
	}
	waitAnswered := func(n int64) {
		deadline := time.Now().Add(3 * time.Minute)
		for answered.Load() < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitAnswered(4)
	primary.stop() // kill -9
	rpc := goredis.NewClient(&goredis.Options{Addr: replicaProc.addr(), MaxRetries: -1})
	defer rpc.Close()
	if err := rpc.SlaveOf(context.Background(), "NO", "ONE").Err(); err != nil {
		t.Fatalf("REPLICAOF NO ONE: %v", err)
	}
	svc.Retarget(replicaProc.addr())
	waitAnswered(answered.Load() + 8)

	// A replica started now restores what was written before the kill, from the promoted one.
	_, fresh := faultReplica(t, url, rc, engine.PrefetchWait, 0)
	if res := completeText(t, fresh, prompts[0]); res.usage.Cache["remote_tokens"] == 0 || res.text != want[0] {
		t.Errorf("a replica started after the failover: %v, text %q want %q", res.usage.Cache, res.text, want[0])
	}
	// The running ones: the writer's write-through and the reader's reads resume.
	deadline := time.Now().Add(3 * time.Minute)
	for i := 0; ; i++ {
		p := fmt.Sprintf("After failover %d. %s", i, longText(600))
		wres := completeText(t, w, p)
		waitQueuesEmpty(t, winst)
		if res := completeText(t, r, p); res.usage.Cache["remote_tokens"] > 0 {
			if res.text != wres.text {
				t.Fatalf("after the failover the reader restored %q, the writer answered %q", res.text, wres.text)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("remote reads never resumed after the failover: writer %v, reader %v", scrape(t, w), scrape(t, r))
		}
		time.Sleep(60 * time.Millisecond) // past the cool-down: the next call is a probe
	}
	close(stop)
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Fatalf("%d of %d answers under load were not the cache-off answer; first: %v", n, answered.Load(), firstWrong.Load())
	}
	if remote.Load() == 0 {
		t.Fatalf("none of the %d answers under load restored from Redis: the load did not exercise it", answered.Load())
	}
	t.Logf("%d answers under load, all right, %d of them with blocks from Redis; breaker opens: writer %v, reader %v", answered.Load(), remote.Load(),
		scrape(t, w)["stockpot_kv_remote_breaker_opens_total"], scrape(t, r)["stockpot_kv_remote_breaker_opens_total"])
}
