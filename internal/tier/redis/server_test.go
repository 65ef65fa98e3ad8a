package redis

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"stockpot/internal/portlock"

	goredis "github.com/redis/go-redis/v9"
)

// fakeClock is a store's clock (Config.Now) that moves only when a test advances it: a
// breaker's cool-down passes when the test says so, not when a busy machine gets to it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// server is a real redis-server started by a test on a loopback port.
type server struct {
	t    *testing.T
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

func (s *server) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }
func (s *server) url() string  { return "redis://" + s.addr() + "/0" }

// freePort is a port this test process holds (portlock): nobody else is told it, and the
// kernel hands it out to no one, between now and redis-server's bind and across its restarts.
func freePort(t *testing.T) int {
	p, err := portlock.Port()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startServer starts redis-server with extra args (for example cluster
// mode). It fails, never skips, when the binary is missing: the tests that
// say Redis works must run against Redis.
func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found in PATH (%v): install it (apt-get install redis-server); `make test` and .ci install it", err)
	}
	s := &server{t: t, port: freePort(t), dir: t.TempDir(), args: extra}
	s.start()
	t.Cleanup(s.kill)
	return s
}

func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	out, err := os.Create(s.dir + "/redis.log")
	if err != nil {
		s.t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	c := goredis.NewClient(&goredis.Options{Addr: s.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil || strings.HasPrefix(err.Error(), "NOAUTH") { // up, and asking for a password
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.dir + "/redis.log")
			s.t.Fatalf("redis-server on %s not ready: %v\n%s", s.addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits: the server vanishes mid-run.
func (s *server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// startCluster starts a one-node Redis Cluster owning every slot: the
// cluster protocol (CLUSTER SLOTS, MOVED, per-node pipelines) is real.
func startCluster(t *testing.T) *server {
	t.Helper()
	s := startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := goredis.NewClient(&goredis.Options{Addr: s.addr()})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ok: %v %s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cluster is a 3-master Redis Cluster started by a test: each master owns a third of the
// slots, no replicas, and cluster-require-full-coverage off, so that a master that dies
// leaves the others serving their slots (what a deployment should configure; docs/deploy.md).
type cluster struct {
	t     *testing.T
	nodes []*server
	ids   []string
}

// seeds are the masters' addresses, for a ClusterClient.
func (c *cluster) seeds() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.addr())
	}
	return out
}

func (c *cluster) admin(i int) *goredis.Client {
	cl := goredis.NewClient(&goredis.Options{Addr: c.nodes[i].addr(), MaxRetries: -1})
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// startCluster3 starts three masters and joins them with CLUSTER ADDSLOTSRANGE and CLUSTER
// MEET (what redis-cli --cluster create does, without its one-second waits).
func startCluster3(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t}
	ctx := context.Background()
	for range 3 {
		c.nodes = append(c.nodes, startServer(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "500", "--cluster-require-full-coverage", "no"))
	}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i := range c.nodes {
		a := c.admin(i)
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatalf("node %d: CLUSTER ADDSLOTSRANGE: %v", i, err)
		}
		id, err := a.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		c.ids = append(c.ids, id)
		if i > 0 {
			if err := a.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(c.nodes[0].port)).Err(); err != nil {
				t.Fatalf("node %d: CLUSTER MEET: %v", i, err)
			}
		}
	}
	c.waitOK()
	return c
}

// waitOK waits until every live node sees all three masters and every slot served.
func (c *cluster) waitOK() {
	c.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(3 * time.Minute) // a loaded machine forms a cluster slowly
	for i, n := range c.nodes {
		if n.cmd == nil {
			continue
		}
		a := c.admin(i)
		for {
			info, err := a.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") &&
				strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d: cluster not ok: %v\n%s", i, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// owner returns the index of the master that serves slot.
func (c *cluster) owner(slot int) int {
	switch {
	case slot <= 5460:
		return 0
	case slot <= 10922:
		return 1
	}
	return 2
}
