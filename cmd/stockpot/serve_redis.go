package main

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"stockpot/internal/tier/redis"
)

// remoteTTLFlags registers serve's flags of the remote tier's TTLs into rc:
// --remote-cache-ttl (Config.TTL) and --remote-cache-ttl-refresh (Config.NoReadRefresh's
// inverse). Each checks its value as it is set (a flag or its STOCKPOT_ variable).
func remoteTTLFlags(fs *flag.FlagSet, rc *redis.Config) {
	def := redis.DefaultConfig().TTL
	rc.TTL = def
	fs.Func("remote-cache-ttl", fmt.Sprintf("TTL of an unpinned block in the remote tier: it expires this long after its last write, or its last read with --remote-cache-ttl-refresh; pinned blocks keep their pins' TTLs (default %v)", def),
		func(s string) error {
			d, err := time.ParseDuration(s)
			if err == nil && d < time.Millisecond {
				err = fmt.Errorf("%v: want at least 1ms", d)
			}
			rc.TTL = d
			return err
		})
	fs.BoolFunc("remote-cache-ttl-refresh", "a read of an unpinned remote block pushes its TTL out to --remote-cache-ttl again, in the read's round trip (default true; false: it expires --remote-cache-ttl after its write, however often read)",
		func(s string) error {
			v, err := strconv.ParseBool(s)
			rc.NoReadRefresh = !v
			return err
		})
}
