package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"stockpot/internal/bytesize"
)

// --memory-limit: the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit).
//
// Without one the collector lets the heap grow to twice what was live after the last
// collection (GOGC=100). A server whose live heap is large (the host tier, the checkpoints, a
// restore of a long prefix in flight) then asks the kernel for twice that: 480K tokens of
// small-kimi-k3 restored from disk beside a full host tier were OOM-killed at 21.7 GB on a
// 24 GB machine. With a limit the collector runs harder as the heap nears it instead.
//
// auto (unless GOMEMLIMIT is set, which the runtime has applied already) depends on where the
// process runs:
//   - In a cgroup with a memory limit (a container, a pod, a systemd unit with MemoryMax): 90%
//     of the tightest limit on the path from the process's cgroup to the root (v2 memory.max and
//     memory.high, v1 memory.limit_in_bytes). The cgroup is Stockpot's own budget, and the limit
//     follows it: it is read again every 30 s and reapplied when it changed (an in-place pod
//     resize), so the collector never aims past what the kernel will allow.
//   - On a host with no such limit: the machine is shared with whatever else runs there, so auto
//     takes the smaller of 75% of MemTotal and 90% of what was available at start (MemAvailable):
//     the rest of the host keeps at least a quarter of the machine and what it already used.
//     This is read once: MemAvailable falls as Stockpot's own heap grows, and following it would
//     shrink the limit under our own feet.
//
// 0 or off sets none.

const (
	// cgroupShare is auto's share of a cgroup limit, in percent: the remaining 10% covers what
	// the Go heap does not count (goroutine stacks, the runtime's own structures, cgo, the page
	// cache charged to the cgroup by disk-tier writes).
	cgroupShare = 90
	// hostShareOfTotal and hostShareOfAvailable bound auto on a host without a cgroup limit, in
	// percent: see the comment above.
	hostShareOfTotal     = 75
	hostShareOfAvailable = 90
	// memoryFollowEvery is how often a cgroup-derived limit is read again.
	memoryFollowEvery = 30 * time.Second
)

// memInfo is what auto looks at: the machine's MemTotal and MemAvailable, and the tightest
// cgroup limit on the process's path (0 for each one unknown or unlimited).
type memInfo struct {
	total, available, cgroup int64
}

// resolveMemoryLimit turns the flag into the limit to set: limit < 0 sets nothing (off, or
// GOMEMLIMIT's own); why says where it came from, for the log; follow says the limit came from
// a cgroup and is to be read again. Pure.
func resolveMemoryLimit(flag, gomemlimit string, m memInfo) (limit int64, why string, follow bool, err error) {
	switch strings.ToLower(strings.TrimSpace(flag)) {
	case "auto", "":
		if gomemlimit != "" {
			return -1, "GOMEMLIMIT=" + gomemlimit, false, nil
		}
		if m.cgroup > 0 && (m.total == 0 || m.cgroup < m.total) {
			limit = percentMiB(m.cgroup, cgroupShare)
			return limit, fmt.Sprintf("auto: %d%% of the cgroup's %s", cgroupShare, gib(m.cgroup)), true, nil
		}
		if m.total <= 0 {
			return -1, "auto: the machine's memory is unknown; none set", false, nil
		}
		limit = percentMiB(m.total, hostShareOfTotal)
		why = fmt.Sprintf("auto: %d%% of the host's %s", hostShareOfTotal, gib(m.total))
		if a := percentMiB(m.available, hostShareOfAvailable); m.available > 0 && a < limit {
			limit = a
			why = fmt.Sprintf("auto: %d%% of the %s available at start (host %s)", hostShareOfAvailable, gib(m.available), gib(m.total))
		}
		return limit, why, false, nil
	case "off", "0":
		return -1, "off", false, nil
	}
	n, err := bytesize.Parse(flag)
	if err != nil {
		return 0, "", false, fmt.Errorf("--memory-limit %q: a size (e.g. 20GiB), auto or off: %w", flag, err)
	}
	if n <= 0 {
		return -1, "off", false, nil
	}
	return n, "--memory-limit", false, nil
}

// gib is n for the log: whole GiB when it is, else one decimal ("23.5GiB"; MemTotal is rarely
// round).
func gib(n int64) string {
	if n%(1<<30) == 0 {
		return bytesize.Format(n)
	}
	return fmt.Sprintf("%.1fGiB", float64(n)/(1<<30))
}

// percentMiB is pct% of n, in whole MiB (computed in MiB: no overflow, no rounding drift).
func percentMiB(n, pct int64) int64 { return (n >> 20) * pct / 100 << 20 }

// readMemInfo reads the machine's and the cgroup's numbers through read.
func readMemInfo(read func(string) string) memInfo {
	meminfo := read("/proc/meminfo")
	return memInfo{
		total:     meminfoField(meminfo, "MemTotal:"),
		available: meminfoField(meminfo, "MemAvailable:"),
		cgroup:    cgroupLimit(read("/proc/self/cgroup"), read),
	}
}

func readFile(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20)) // /proc and cgroup files are small
	if err != nil {
		return ""
	}
	return string(b)
}

// memTotal reads MemTotal from /proc/meminfo's text, in bytes; 0 if absent.
func memTotal(meminfo string) int64 { return meminfoField(meminfo, "MemTotal:") }

// meminfoField reads one "Name: N kB" field from /proc/meminfo's text, in bytes; 0 if absent.
func meminfoField(meminfo, name string) int64 {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == name {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupLimit is the tightest memory limit on the path from the cgroup /proc/self/cgroup's text
// names up to the hierarchy's root (v2 memory.max and memory.high, or v1
// memory.limit_in_bytes), read with read; 0 for none ("max", or v1's near-2^63 "no limit"). A
// parent's limit binds its children too, so a process in an unlimited leaf of a limited slice
// is limited all the same.
func cgroupLimit(selfCgroup string, read func(string) string) int64 {
	var best int64
	for _, line := range strings.Split(selfCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		var root string
		var files []string
		switch {
		case parts[0] == "0" && parts[1] == "":
			root, files = "/sys/fs/cgroup", []string{"memory.max", "memory.high"}
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			root, files = "/sys/fs/cgroup/memory", []string{"memory.limit_in_bytes"}
		default:
			continue
		}
		for dir := path.Clean(parts[2]); ; dir = path.Dir(dir) {
			for _, f := range files {
				n, err := strconv.ParseInt(strings.TrimSpace(read(path.Join(root, dir, f))), 10, 64)
				if err == nil && n > 0 && n < 1<<62 && (best == 0 || n < best) {
					best = n
				}
			}
			if dir == "/" {
				break
			}
		}
	}
	return best
}

// applyMemoryLimit resolves the flag and sets the limit, returning the line to log and, when
// the limit came from a cgroup, a function that follows the cgroup until ctx ends (run it in
// its own goroutine; nil otherwise).
func applyMemoryLimit(flag string) (string, func(ctx context.Context, logf func(string)), error) {
	gomemlimit := os.Getenv("GOMEMLIMIT")
	limit, why, follow, err := resolveMemoryLimit(flag, gomemlimit, readMemInfo(readFile))
	if err != nil {
		return "", nil, err
	}
	if limit < 0 {
		return "memory limit: " + why, nil, nil
	}
	debug.SetMemoryLimit(limit)
	line := fmt.Sprintf("memory limit %s (%s): the collector runs harder near it", bytesize.Format(limit), why)
	if !follow {
		return line, nil, nil
	}
	return line, func(ctx context.Context, logf func(string)) {
		t := time.NewTicker(memoryFollowEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n, why := followLimit(limit, flag, gomemlimit, readMemInfo(readFile)); n != limit {
				debug.SetMemoryLimit(n)
				logf(fmt.Sprintf("memory limit %s (was %s; %s)", bytesize.Format(n), bytesize.Format(limit), why))
				limit = n
			}
		}
	}, nil
}

// followLimit is the limit to hold now, given the one held: the cgroup's new share when its
// limit changed, else the one held (a cgroup limit that vanished keeps the last one). Pure.
func followLimit(held int64, flag, gomemlimit string, m memInfo) (int64, string) {
	n, why, follow, err := resolveMemoryLimit(flag, gomemlimit, m)
	if err != nil || !follow || n <= 0 {
		return held, ""
	}
	return n, why
}
