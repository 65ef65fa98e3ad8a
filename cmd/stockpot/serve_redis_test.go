package main

import (
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/offload"
	"stockpot/internal/server"
)

// --remote-cache-ttl and --remote-cache-ttl-refresh reach the remote tier's Config, from a
// flag or its STOCKPOT_ variable; a TTL under 1ms is refused.
func TestRemoteTTLFlags(t *testing.T) {
	parse := func(args ...string) (offload.Config, error) {
		o := serveOptions{engine: engine.DefaultConfig(), server: server.DefaultConfig(), tiers: offload.DefaultConfig()}
		fs := newFlagSet("serve")
		addServeFlags(fs, &o)
		err := parseWithEnv(fs, args)
		return o.tiers, err
	}
	tc, err := parse()
	if err != nil || tc.Remote.TTL != 24*time.Hour || tc.Remote.NoReadRefresh {
		t.Fatalf("defaults: TTL %v, NoReadRefresh %v, %v; want 24h and a read refresh", tc.Remote.TTL, tc.Remote.NoReadRefresh, err)
	}
	tc, err = parse("--remote-cache-ttl", "2s", "--remote-cache-ttl-refresh=false")
	if err != nil || tc.Remote.TTL != 2*time.Second || !tc.Remote.NoReadRefresh {
		t.Fatalf("flags: TTL %v, NoReadRefresh %v, %v", tc.Remote.TTL, tc.Remote.NoReadRefresh, err)
	}
	if tc, err = parse("--remote-cache-ttl-refresh"); err != nil || tc.Remote.NoReadRefresh {
		t.Fatalf("--remote-cache-ttl-refresh alone: NoReadRefresh %v, %v", tc.Remote.NoReadRefresh, err)
	}
	t.Setenv("STOCKPOT_REMOTE_CACHE_TTL", "90m")
	t.Setenv("STOCKPOT_REMOTE_CACHE_TTL_REFRESH", "false")
	if tc, err = parse(); err != nil || tc.Remote.TTL != 90*time.Minute || !tc.Remote.NoReadRefresh {
		t.Fatalf("environment: TTL %v, NoReadRefresh %v, %v", tc.Remote.TTL, tc.Remote.NoReadRefresh, err)
	}
	for _, bad := range []string{"0s", "-1h", "soon"} {
		if _, err := parse("--remote-cache-ttl", bad); err == nil {
			t.Errorf("--remote-cache-ttl %s accepted", bad)
		}
	}
}
