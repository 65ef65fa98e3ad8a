package main

import (
	"strings"
	"testing"
)

func TestResolveMemoryLimit(t *testing.T) {
	const gib = int64(1) << 30
	for _, c := range []struct {
		flag, env string
		machine   int64
		want      int64
		why       string
		bad       bool
	}{
		{flag: "auto", machine: 20 * gib, want: 18 * gib, why: "90% of 20GiB"},
		{flag: "", machine: 10 * gib, want: 9 * gib, why: "auto"},
		{flag: "auto", env: "12GiB", machine: 20 * gib, want: -1, why: "GOMEMLIMIT=12GiB"},
		{flag: "auto", machine: 0, want: -1, why: "unknown"},
		{flag: "off", machine: 20 * gib, want: -1, why: "off"},
		{flag: "0", machine: 20 * gib, want: -1, why: "off"},
		{flag: "14GiB", env: "12GiB", machine: 20 * gib, want: 14 * gib, why: "--memory-limit"},
		{flag: "lots", bad: true},
		{flag: "-3GiB", bad: true},
	} {
		got, why, err := resolveMemoryLimit(c.flag, c.env, c.machine)
		if c.bad {
			if err == nil {
				t.Errorf("%q: accepted (%d)", c.flag, got)
			}
			continue
		}
		if err != nil || got != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%q env %q machine %d: %d %q %v; want %d and %q", c.flag, c.env, c.machine, got, why, err, c.want, c.why)
		}
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
	}
	read := func(p string) string { return files[p] }
	for self, want := range map[string]int64{
		"0::/svc\n":                        8 << 30,
		"0::/open\n":                       0,
		"4:memory:/job\n1:cpu:/\n0::/\n":   4 << 30,
		"4:cpuacct,memory:/job\n":          4 << 30,
		"4:memory:/nolimit\n0::/\n":        0,
		"":                                 0,
		"not a cgroup line\n0::/missing\n": 0,
	} {
		if got := cgroupLimit(self, read); got != want {
			t.Errorf("cgroup %q: %d, want %d", self, got, want)
		}
	}
}
