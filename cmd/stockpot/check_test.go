package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/router"
)

// runCheckCLI runs `stockpot check` with args and returns its output and error (non-nil:
// exit status 1).
func runCheckCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := checkMain(append(args, "--probe-bytes", "1MiB"), &out)
	t.Logf("stockpot check %s:\n%s", strings.Join(args, " "), out.String())
	return out.String(), err
}

// lineOf is the status of check on the output's line for it ("" when absent).
func lineOf(out, check string) string {
	m := regexp.MustCompile(`(?m)^(pass|warn|fail)\s+` + regexp.QuoteMeta(check) + `\s`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// checkedReplica is an in-process serve with the admin key "adm" and the given tiers.
func checkedReplica(t *testing.T, to offload.Config, mutate func(*engine.Config)) string {
	t.Helper()
	_, ts := newTestInstance(t, func(o *serveOptions) {
		o.tiers = to
		o.server.AdminKeys = []string{"adm"}
		o.engine.Prefetch = engine.PrefetchWait
		if mutate != nil {
			mutate(&o.engine)
		}
	})
	return ts.URL
}

// TestCheckServeWithTiers: a serve with host, disk and a real Redis (maxmemory and
// volatile-lru) passes every check that can fail, after two requests sharing a prefix; then
// the same Redis switched to noeviction fails the redis-policy line and the run.
func TestCheckServeWithTiers(t *testing.T) {
	rp := newRedisProc(t, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru")
	url := checkedReplica(t, offload.Config{HostBytes: 64 << 20, DiskDir: t.TempDir(), DiskBytes: 256 << 20,
		RemoteURL: "redis://" + rp.addr() + "/0", Remote: testRemote}, nil)
	prefix := longText(300)
	completeText(t, url, prefix+" first question")
	completeText(t, url, prefix+" second question")
	out, err := runCheckCLI(t, "--target", url, "--key", "adm")
	if err != nil {
		t.Fatalf("check failed on a healthy serve: %v", err)
	}
	for _, c := range []string{"prefix-cache", "tier-host", "tier-disk", "tier-remote", "redis-policy", "identity"} {
		if st := lineOf(out, c); st != "pass" {
			t.Errorf("%s: %q, want pass", c, st)
		}
	}
	for _, c := range []string{"host-size", "read-host", "read-disk", "read-remote", "prefetch", "unstable-prefix"} {
		if lineOf(out, c) == "" { // pass or warn: rates are measured, never asserted
			t.Errorf("no %s line", c)
		}
	}
	if !strings.Contains(out, "shared by the 2 recent requests") {
		t.Errorf("host-size does not size from the 2 recent requests")
	}
	c := goredis.NewClient(&goredis.Options{Addr: rp.addr()})
	defer c.Close()
	if err := c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	out, err = runCheckCLI(t, "--target", url, "--key", "adm")
	if err == nil || lineOf(out, "redis-policy") != "fail" {
		t.Errorf("noeviction with maxmemory: err %v, redis-policy %q; want a fail", err, lineOf(out, "redis-policy"))
	}
}

// TestCheckPrefixCacheOff: --prefix-cache=false fails its line and the run; --strict is not
// needed for a fail, and a serve without the admin key fails to be reached.
func TestCheckPrefixCacheOff(t *testing.T) {
	url := checkedReplica(t, offload.Config{}, func(e *engine.Config) { e.PrefixCache = false })
	out, err := runCheckCLI(t, "--target", url, "--key", "adm")
	if err == nil || lineOf(out, "prefix-cache") != "fail" {
		t.Errorf("prefix cache off: err %v, line %q; want a fail", err, lineOf(out, "prefix-cache"))
	}
	if err := run([]string{"check", "--target", url, "--key", "adm", "--probe-bytes", "0"}); err == nil {
		t.Error("stockpot check exits 0 with prefix caching off")
	}
	out, err = runCheckCLI(t, "--target", url, "--key", "wrong")
	if err == nil || lineOf(out, "reach") != "fail" || !strings.Contains(out, "401") {
		t.Errorf("wrong key: err %v; want a reach fail with the 401", err)
	}
}

// TestCheckRouterIdentity: a route in front of two replicas whose block sizes differ fails
// the identity check; each replica is checked through the route's --backend-key.
func TestCheckRouterIdentity(t *testing.T) {
	a := checkedReplica(t, offload.Config{}, nil)
	b := checkedReplica(t, offload.Config{}, func(e *engine.Config) { e.BlockSize = 32 })
	cfg := router.DefaultConfig()
	cfg.Backends, cfg.Policy, cfg.HealthInterval = []string{a, b}, "round-robin", 50*time.Millisecond
	cfg.AdminKeys, cfg.BackendKey = []string{"radm"}, "adm"
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	rts := httptest.NewServer(rt.Handler())
	t.Cleanup(rts.Close)
	out, err := runCheckCLI(t, "--target", rts.URL, "--key", "radm", "--backend-key", "adm")
	if err == nil || lineOf(out, "identity") != "fail" {
		t.Fatalf("replicas of block size 16 and 32: err %v, identity %q; want a fail", err, lineOf(out, "identity"))
	}
	if strings.Count(out, "prefix-cache") != 2 || !strings.Contains(out, "block size 32") {
		t.Errorf("want both replicas checked and the differing block size named")
	}
}
