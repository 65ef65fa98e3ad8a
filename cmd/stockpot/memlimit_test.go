package main

import (
	"strings"
	"testing"
)

func TestResolveMemoryLimit(t *testing.T) {
	const gib = int64(1) << 30
	for _, c := range []struct {
		flag, env string
		mem       memInfo
		want      int64
		why       string
		follow    bool
		bad       bool
	}{
		// A cgroup limit is the process's own budget: 90% of it, followed.
		{flag: "auto", mem: memInfo{total: 24 * gib, available: 20 * gib, cgroup: 10 * gib}, want: 9 * gib, why: "90% of the cgroup's 10GiB", follow: true},
		{flag: "", mem: memInfo{cgroup: 10 * gib}, want: 9 * gib, why: "cgroup", follow: true},
		// A cgroup limit above the machine's memory binds nothing: the host rule applies.
		{flag: "auto", mem: memInfo{total: 20 * gib, available: 19 * gib, cgroup: 64 * gib}, want: 15 * gib, why: "75% of the host's 20GiB"},
		// A shared host: at most 75% of the machine, and at most 90% of what was free at start.
		{flag: "auto", mem: memInfo{total: 20 * gib, available: 19 * gib}, want: 15 * gib, why: "75% of the host's 20GiB"},
		{flag: "auto", mem: memInfo{total: 20 * gib, available: 10 * gib}, want: 9 * gib, why: "90% of the 10GiB available at start"},
		{flag: "auto", mem: memInfo{total: 20 * gib}, want: 15 * gib, why: "host"},
		{flag: "auto", env: "12GiB", mem: memInfo{total: 20 * gib, cgroup: 8 * gib}, want: -1, why: "GOMEMLIMIT=12GiB"},
		{flag: "auto", want: -1, why: "unknown"},
		{flag: "off", mem: memInfo{total: 20 * gib}, want: -1, why: "off"},
		{flag: "0", mem: memInfo{total: 20 * gib}, want: -1, why: "off"},
		{flag: "14GiB", env: "12GiB", mem: memInfo{total: 20 * gib, cgroup: 8 * gib}, want: 14 * gib, why: "--memory-limit"},
		{flag: "lots", bad: true},
		{flag: "-3GiB", bad: true},
	} {
		got, why, follow, err := resolveMemoryLimit(c.flag, c.env, c.mem)
		if c.bad {
			if err == nil {
				t.Errorf("%q: accepted (%d)", c.flag, got)
			}
			continue
		}
		if err != nil || got != c.want || !strings.Contains(why, c.why) || follow != c.follow {
			t.Errorf("%q env %q mem %+v: %d %q follow %v %v; want %d, %q, follow %v", c.flag, c.env, c.mem, got, why, follow, err, c.want, c.why, c.follow)
		}
	}
}

// TestFollowLimit: a cgroup resized in place moves the limit with it; a cgroup limit that
// vanishes, or a host reading, leaves the held limit alone.
func TestFollowLimit(t *testing.T) {
	const gib = int64(1) << 30
	held := 9 * gib
	for _, c := range []struct {
		mem  memInfo
		want int64
	}{
		{memInfo{total: 24 * gib, cgroup: 10 * gib}, 9 * gib},
		{memInfo{total: 24 * gib, cgroup: 20 * gib}, 18 * gib},
		{memInfo{total: 24 * gib, cgroup: 4 * gib}, percentMiB(4*gib, 90)},
		{memInfo{total: 24 * gib, available: 2 * gib}, held},
		{memInfo{}, held},
	} {
		if got, _ := followLimit(held, "auto", "", c.mem); got != c.want {
			t.Errorf("mem %+v: %d, want %d", c.mem, got, c.want)
		}
	}
	if got, _ := followLimit(held, "auto", "4GiB", memInfo{cgroup: 2 * gib}); got != held {
		t.Errorf("GOMEMLIMIT set: followed to %d", got)
	}
}

func TestMachineMemoryParsers(t *testing.T) {
	if got := memTotal("MemTotal:       24683748 kB\nMemFree:        19482788 kB\n"); got != 24683748<<10 {
		t.Errorf("memTotal %d", got)
	}
	if got := memTotal("garbage\n"); got != 0 {
		t.Errorf("memTotal of garbage %d", got)
	}
	files := map[string]string{
		"/sys/fs/cgroup/svc/memory.max":                       "8589934592\n",
		"/sys/fs/cgroup/open/memory.max":                      "max\n",
		"/sys/fs/cgroup/memory/job/memory.limit_in_bytes":     "4294967296\n",
		"/sys/fs/cgroup/memory/nolimit/memory.limit_in_bytes": "9223372036854771712\n",
		// A limited slice with an unlimited leaf, and memory.high below memory.max.
		"/sys/fs/cgroup/slice/memory.max":                 "6442450944\n",
		"/sys/fs/cgroup/slice/leaf/memory.max":            "max\n",
		"/sys/fs/cgroup/soft/memory.max":                  "8589934592\n",
		"/sys/fs/cgroup/soft/memory.high":                 "2147483648\n",
		"/sys/fs/cgroup/memory/pod/memory.limit_in_bytes": "3221225472\n",
	}
	read := func(p string) string { return files[p] }
	for self, want := range map[string]int64{
		"0::/svc\n":                          8 << 30,
		"0::/open\n":                         0,
		"4:memory:/job\n1:cpu:/\n0::/\n":     4 << 30,
		"4:cpuacct,memory:/job\n":            4 << 30,
		"4:memory:/nolimit\n0::/\n":          0,
		"":                                   0,
		"not a cgroup line\n0::/missing\n":   0,
		"0::/slice/leaf\n":                   6 << 30,
		"0::/soft\n":                         2 << 30,
		"4:memory:/pod/c1\n0::/slice/leaf\n": 3 << 30,
		"0::relative\n":                      0,
	} {
		if got := cgroupLimit(self, read); got != want {
			t.Errorf("cgroup %q: %d, want %d", self, got, want)
		}
	}
}
