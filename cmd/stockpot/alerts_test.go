package main

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/offload"
	"stockpot/internal/router"
)

// TestAlertRules: deploy/alerts' rules pass `promtool check rules` and `promtool test rules`
// (Debian's prometheus package ships promtool; `make test` installs it), and every stockpot_*
// series they name is one a real serve (with host, disk and Redis tiers) or route exports.
func TestAlertRules(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "alerts")
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (%v): `make test` installs Debian's prometheus package", err)
	}
	for _, args := range [][]string{{"check", "rules", "stockpot.rules.yaml"}, {"test", "rules", "stockpot.rules.test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	rules, err := os.ReadFile(filepath.Join(dir, "stockpot.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The series the rules read (their expressions; comments name them too).
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`stockpot_[a-z0-9_]+`).FindAllString(string(rules), -1) {
		named[strings.TrimSuffix(m, "_bucket")] = true
	}

	exported := map[string]bool{}
	gather := func(g prometheus.Gatherer) {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			exported[mf.GetName()] = true
		}
	}
	redis := startRedis(t)
	inst, url, stop := tieredInstance(t, "synthetic:tiny-llama-spm",
		offload.Config{HostBytes: 16 << 20, DiskDir: t.TempDir(), DiskBytes: 64 << 20, RemoteURL: "redis://" + redis + "/0", Remote: testRemote})
	defer stop()
	completeText(t, url, strings.Repeat("alerts read what serve exports. ", 20))
	gather(inst.reg)

	reg := prometheus.NewRegistry()
	cfg := router.DefaultConfig()
	cfg.Backends, cfg.Policy, cfg.Registerer, cfg.Gatherer = []string{url}, "kv-aware", reg, reg
	cfg.HealthInterval = 50 * time.Millisecond
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	front := httptest.NewServer(rt.Handler())
	defer front.Close()
	completeText(t, front.URL, "one request through the router")
	gather(reg)

	var missing []string
	for n := range named {
		if !exported[n] {
			missing = append(missing, n)
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Fatalf("the alert rules name series that neither serve nor route exports: %v", missing)
	}
	t.Logf("%d series named, all exported", len(named))
}
