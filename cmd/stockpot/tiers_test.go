package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stockpot/internal/engine"
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

func tieredInstance(t *testing.T, model string, to tierOptions) (*instance, string, func()) {
	t.Helper()
	o := serveOptions{model: model, threads: 2, blockSize: 16, kvBudget: 16 << 20, kvType: 0,
		prefixCache: true, dedup: true, maxBatch: 256, maxRunning: 16, tiers: to}
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
	to := tierOptions{diskDir: dir, diskBytes: 1 << 30, prefetch: engine.PrefetchWait}
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
	o := serveOptions{model: "synthetic:tiny-llama-spm", threads: 2, blockSize: 16, kvBudget: 70 * 8192, prefixCache: true,
		maxBatch: 256, maxRunning: 4, tiers: tierOptions{hostBytes: 64 << 20, prefetch: engine.PrefetchWait}}
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
	to := tierOptions{remoteURL: "redis://" + addr + "/0", prefetch: engine.PrefetchWait}
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	redisCmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := redisCmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopRedis(t) })
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("redis-server did not start")
	return ""
}

func stopRedis(t *testing.T) {
	if redisCmd != nil && redisCmd.Process != nil {
		redisCmd.Process.Kill()
		redisCmd.Wait()
		redisCmd = nil
	}
}
