package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/tier/redis"
)

type completionResult struct {
	text  string
	usage apiUsage
}

func completeText(t *testing.T, url string, prompt string) completionResult {
	t.Helper()
	code, out := post(t, url+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 12, "temperature": 0})
	if code != 200 {
		t.Fatalf("status %d: %s", code, out)
	}
	var r struct {
		Choices []struct{ Text string }
		Usage   apiUsage
	}
	if err := jsonUnmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	return completionResult{text: r.Choices[0].Text, usage: r.Usage}
}

func tieredInstance(t *testing.T, model string, to offload.Config) (*instance, string, func()) {
	t.Helper()
	o := serveOptions{model: model, threads: 2, tiers: to, engine: engine.Config{BlockSize: 16, KVMemory: 16 << 20, KVType: 0, PrefixCache: true, Dedup: true, MaxBatchTokens: 256, MaxRunning: 16, Prefetch: engine.PrefetchWait}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	return inst, ts.URL, func() { ts.Close(); inst.Close() }
}

// TestDiskRestart: a prompt served, the server stopped, started again on the same directory:
// the block-aligned prefix comes from disk and the greedy output is the same.
func TestDiskRestart(t *testing.T) {
	dir := t.TempDir()
	to := offload.Config{DiskDir: dir, DiskBytes: 1 << 30}
	prompt := longText(2400)
	_, url, stop := tieredInstance(t, "synthetic:tiny-llama-spm", to)
	cold := completeText(t, url, prompt)
	stop() // graceful: the working pool is written back

	_, url, stop = tieredInstance(t, "synthetic:tiny-llama-spm", to)
	defer stop()
	warm := completeText(t, url, prompt)
	aligned := (warm.usage.PromptTokens - 1) / 16 * 16
	if got := warm.usage.Cache["disk_tokens"]; float64(got) < 0.95*float64(aligned) {
		t.Errorf("after restart: %d disk tokens of %d block-aligned (usage %v)", got, aligned, warm.usage.Cache)
	}
	if warm.text != cold.text {
		t.Errorf("after restart the output changed: %q vs %q", warm.text, cold.text)
	}

	// Corruption: flip bytes in every block file; the answer stays right, discards are counted.
	stop()
	flipped := 0
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() > 4096 {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x55
			os.WriteFile(p, b, 0o644)
			flipped++
		}
		return nil
	})
	if flipped == 0 {
		t.Fatal("no block files found to corrupt")
	}
	_, url, stop = tieredInstance(t, "synthetic:tiny-llama-spm", to)
	bad := completeText(t, url, prompt)
	if bad.text != cold.text {
		t.Errorf("with corrupted tier files the output changed: %q vs %q", bad.text, cold.text)
	}
	if bad.usage.Cache["disk_tokens"] != 0 {
		t.Errorf("corrupted blocks were used: %v", bad.usage.Cache)
	}
	m := scrape(t, url)
	discards := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "stockpot_kv_blocks_discarded_total") {
			discards += v
		}
	}
	if discards == 0 || bad.usage.Cache["discarded_tokens"] == 0 {
		t.Errorf("corruption not counted: %v discards in metrics, usage %v", discards, bad.usage.Cache)
	}

	// Identity: another model on the same directory reuses nothing.
	stop()
	_, url, stop = tieredInstance(t, "synthetic:tiny-smollm", to)
	other := completeText(t, url, prompt)
	if c := *other.usage.PromptTokensDetails.CachedTokens; c != 0 {
		t.Errorf("another model reused %d tokens from the same directory", c)
	}
}

// TestHostTier: with a working pool too small to keep a long prompt while others run, the
// evicted blocks come back from host RAM.
func TestHostTier(t *testing.T) {
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, tiers: offload.Config{HostBytes: 64 << 20}, engine: engine.Config{BlockSize: 16, KVMemory: 70 * 8192, PrefixCache: true, MaxBatchTokens: 256, MaxRunning: 4, Prefetch: engine.PrefetchWait}}
	inst, err := newInstance(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := newHTTPServer(inst)
	defer func() { ts.Close(); inst.Close() }()
	first := completeText(t, ts.URL, longText(1500))
	for i := 0; i < 3; i++ { // push the first prompt out of the working pool
		completeText(t, ts.URL, fmt.Sprint(i, longText(1500)))
	}
	again := completeText(t, ts.URL, longText(1500))
	if again.usage.Cache["host_tokens"] == 0 {
		t.Errorf("nothing restored from host: %v", again.usage.Cache)
	}
	if again.text != first.text {
		t.Errorf("restored output differs: %q vs %q", again.text, first.text)
	}
	m := scrape(t, ts.URL)
	if m[`stockpot_kv_cache_usage_bytes{tier="host"}`] == 0 || m[`stockpot_kv_cache_evictions_total{tier="device"}`] == 0 {
		t.Errorf("tier metrics: host usage %v, device evictions %v", m[`stockpot_kv_cache_usage_bytes{tier="host"}`], m[`stockpot_kv_cache_evictions_total{tier="device"}`])
	}
}

// TestRedisSharedAcrossReplicas: replica A computes a prefix; replica B, sharing one real
// Redis, restores it from the remote tier. Stopping Redis mid-run never fails a request.
func TestRedisSharedAcrossReplicas(t *testing.T) {
	addr := startRedis(t)
	to := offload.Config{RemoteURL: "redis://" + addr + "/0", Remote: testRemote}
	prompt := longText(1200)
	_, urlA, stopA := tieredInstance(t, "synthetic:tiny-llama-spm", to)
	a := completeText(t, urlA, prompt)
	stopA() // writes A's pool to Redis
	_, urlB, stopB := tieredInstance(t, "synthetic:tiny-llama-spm", to)
	defer stopB()
	b := completeText(t, urlB, prompt)
	aligned := (b.usage.PromptTokens - 1) / 16 * 16
	if b.usage.Cache["remote_tokens"] != aligned {
		t.Errorf("replica B: remote tokens %d, want %d (%v)", b.usage.Cache["remote_tokens"], aligned, b.usage.Cache)
	}
	if a.text != b.text {
		t.Errorf("outputs differ: %q vs %q", a.text, b.text)
	}
	stopRedis(t)
	c := completeText(t, urlB, "a new prompt while redis is down "+prompt)
	if c.usage.PromptTokens == 0 {
		t.Error("no answer with redis down")
	}
}

var redisCmd *exec.Cmd

func startRedis(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server not found (%v): `make test` installs it", err)
	}
	addr := freePort(t)
	_, port, _ := net.SplitHostPort(addr)
	redisCmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := redisCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopRedis(t) })
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
	}
	t.Fatal("redis-server did not start")
	return ""
}

// testRemote is the remote tier's settings where a test needs every Redis call to succeed:
// the default call timeout (250 ms) fails calls that a busy machine makes slow, and the tests
// that count restored tokens would then count fewer.
var testRemote = redis.Config{CallTimeout: time.Minute}

func stopRedis(t *testing.T) {
	if redisCmd != nil && redisCmd.Process != nil {
		redisCmd.Process.Kill()
		redisCmd.Wait()
		redisCmd = nil
	}
}

// stockpotServer is the real binary serving on a free loopback port.
type stockpotServer struct {
	cmd    *exec.Cmd
	url    string
	stderr *bytes.Buffer
}

func buildStockpot(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stockpot")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

func startStockpot(t *testing.T, bin string, args ...string) *stockpotServer {
	t.Helper()
	addr := freePort(t)
	s := &stockpotServer{cmd: exec.Command(bin, append([]string{"serve", "--addr", addr}, args...)...), url: "http://" + addr, stderr: &bytes.Buffer{}}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.kill)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(s.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server not healthy: %s", s.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill is kill -9: nothing is flushed.
func (s *stockpotServer) kill() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// TestDiskReusedAfterKill9WithEvictionChurn is issue 17's probe, scaled down 4x (prompts,
// working pool, host and disk budgets keep their ratios): more distinct prompts than every
// tier together holds, kill -9, a restart on the same directory and the same prompts again.
// The blocks the disk kept (it held only what it had room for) are reused, not evicted by the
// second pass's new write-backs before its lookups reach them; then, with 50 files damaged,
// the damage is found, counted and recomputed, and every answer stays the same.
func TestDiskReusedAfterKill9WithEvictionChurn(t *testing.T) {
	bin := buildStockpot(t)
	dir := t.TempDir()
	args := []string{"--kv-memory", "16MiB", "--host-cache", "64MiB", "--disk-cache", dir, "--disk-cache-size", "16MiB"}
	prompts := make([]string, 24)
	for i := range prompts {
		var b strings.Builder
		for k := 0; b.Len() < 860; k++ {
			fmt.Fprintf(&b, "Doc %d line %d: the pot of stock number %d simmers. ", i, k, i*7+k)
		}
		prompts[i] = b.String()
	}
	pass := func(s *stockpotServer) (texts []string, disk, discarded int) {
		for _, p := range prompts {
			r := completeText(t, s.url, p)
			texts = append(texts, r.text)
			disk += r.usage.Cache["disk_tokens"]
			discarded += r.usage.Cache["discarded_tokens"]
		}
		return texts, disk, discarded
	}

	s := startStockpot(t, bin, args...)
	want, _, _ := pass(s)
	s.kill()

	s = startStockpot(t, bin, args...)
	got, disk, _ := pass(s)
	m := scrape(t, s.url)
	s.kill()
	t.Logf("after kill -9: %d prompt tokens from disk", disk)
	if disk == 0 || m[`stockpot_prefix_cache_hits_total{tier="disk"}`] == 0 {
		t.Errorf("after kill -9: %d disk tokens, %v disk hits in metrics; want the blocks the disk kept reused (disk usage %v bytes)",
			disk, m[`stockpot_prefix_cache_hits_total{tier="disk"}`], m[`stockpot_kv_cache_usage_bytes{tier="disk"}`])
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("prompt %d after kill -9: %q, want %q", i, got[i], want[i])
		}
	}

	// Damage 50 block files: truncate every other one to half its size, flip a byte in the rest.
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*.kv"))
	if len(files) < 50 {
		t.Fatalf("%d block files on disk, want at least 50", len(files))
	}
	for i, f := range files[:50] {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			b = b[:len(b)/2]
		} else {
			b[len(b)/3] ^= 0x55
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s = startStockpot(t, bin, args...)
	got, _, discarded := pass(s)
	m = scrape(t, s.url)
	t.Logf("with 50 of %d files damaged: %v checksum discards, %d discarded tokens", len(files), m[`stockpot_kv_blocks_discarded_total{reason="checksum"}`], discarded)
	if m[`stockpot_kv_blocks_discarded_total{reason="checksum"}`] == 0 || discarded == 0 {
		t.Errorf("50 damaged files: %v checksum discards in metrics, %d discarded tokens in usage; want the damage counted",
			m[`stockpot_kv_blocks_discarded_total{reason="checksum"}`], discarded)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("prompt %d with damaged files: %q, want %q", i, got[i], want[i])
		}
	}
}

// TestDiskTierOnFullTmpfs is issue 17's second probe: the disk tier on an 8 MiB tmpfs under a
// 64 MiB --disk-cache-size. Writes that meet ENOSPC evict from the tier's own LRU and are
// retried, so they succeed and the tier keeps what the file system holds; the failures
// metric has a row for every reason; answers stay the same. It needs root to mount the
// tmpfs; the ENOSPC path itself is tested through the disk store's FS seam in
// internal/tier/disk and internal/offload, which always run.
func TestDiskTierOnFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; internal/tier/disk TestDiskFullEvictsAndRetries covers ENOSPC")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s; internal/tier/disk TestDiskFullEvictsAndRetries covers ENOSPC", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	to := offload.Config{DiskDir: dir, DiskBytes: 64 << 20}
	_, url, stop := tieredInstance(t, "synthetic:default", to)
	defer func() { stop() }() // the last instance: the file system is unmounted after it
	var first []string
	for i := range 12 { // ~5 prompts' blocks fit the working pool, 2 the tmpfs
		first = append(first, completeText(t, url, fmt.Sprint("Doc ", i, " ", longText(800))).text)
	}
	m := scrape(t, url)
	if m[`stockpot_kv_cache_evictions_total{tier="disk"}`] == 0 || m[`stockpot_kv_cache_usage_bytes{tier="disk"}`] > 8<<20 {
		t.Errorf("disk tier on an 8 MiB tmpfs: %v evictions, %v bytes used; want it to evict to what the file system holds",
			m[`stockpot_kv_cache_evictions_total{tier="disk"}`], m[`stockpot_kv_cache_usage_bytes{tier="disk"}`])
	}
	for _, r := range []string{"no_space", "io_error", "queue_full"} {
		k := `stockpot_kv_tier_write_failures_total{reason="` + r + `",tier="disk"}`
		if v, ok := m[k]; !ok || (r != "queue_full" && v != 0) {
			t.Errorf("%s = %v (present %v); want the row, and 0 failures once ENOSPC evicts and retries", k, v, ok)
		}
	}
	for i := range 12 {
		if got := completeText(t, url, fmt.Sprint("Doc ", i, " ", longText(800))).text; got != first[i] {
			t.Errorf("prompt %d again: %q, want %q", i, got, first[i])
		}
	}

	// A file system full of someone else's data: evicting the tier's own files frees nothing,
	// so writes fail, and now the metric shows it.
	stop()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		os.RemoveAll(filepath.Join(dir, e.Name()))
	}
	os.WriteFile(filepath.Join(dir, "junk"), make([]byte, 9<<20), 0o644) // fails once the 8 MiB are full
	_, url, stop = tieredInstance(t, "synthetic:default", to)
	for i := range 8 {
		if got := completeText(t, url, fmt.Sprint("Doc ", i, " ", longText(800))).text; got != first[i] {
			t.Errorf("prompt %d on a full file system: %q, want %q", i, got, first[i])
		}
	}
	m = scrape(t, url)
	if v := m[`stockpot_kv_tier_write_failures_total{reason="no_space",tier="disk"}`]; v == 0 {
		t.Errorf("no_space failures = %v with the file system full, want the failed writes counted", v)
	}
}
