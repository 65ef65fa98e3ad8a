package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

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
// auto is 90% of the memory the process may use: the smaller of the machine's (MemTotal)
// and its cgroup's limit (v2 memory.max, v1 memory.limit_in_bytes), unless GOMEMLIMIT is set,
// which the runtime has applied already. 0 or off sets none.

// memoryLimitAutoShare is auto's share of the memory the process may use, in tenths.
const memoryLimitAutoShare = 9

// resolveMemoryLimit turns the flag into the limit to set: limit < 0 sets nothing (off, or
// GOMEMLIMIT's own); why says where it came from, for the log. machine is the memory the
// process may use (0: unknown). Pure.
func resolveMemoryLimit(flag, gomemlimit string, machine int64) (limit int64, why string, err error) {
	switch strings.ToLower(strings.TrimSpace(flag)) {
	case "auto", "":
		if gomemlimit != "" {
			return -1, "GOMEMLIMIT=" + gomemlimit, nil
		}
		if machine <= 0 {
			return -1, "auto: the machine's memory is unknown; none set", nil
		}
		limit = machine / 10 * memoryLimitAutoShare &^ (1<<20 - 1) // whole MiB, for the log
		return limit, fmt.Sprintf("auto: %d%% of %s the process may use", memoryLimitAutoShare*10, bytesize.Format(machine)), nil
	case "off", "0":
		return -1, "off", nil
	}
	n, err := bytesize.Parse(flag)
	if err != nil {
		return 0, "", fmt.Errorf("--memory-limit %q: a size (e.g. 20GiB), auto or off: %w", flag, err)
	}
	if n <= 0 {
		return -1, "off", nil
	}
	return n, "--memory-limit", nil
}

// machineMemory is the memory this process may use: MemTotal, or its cgroup's limit when
// that is smaller. 0 when neither can be read.
func machineMemory() int64 {
	total := memTotal(readFile("/proc/meminfo"))
	if cg := cgroupLimit(readFile("/proc/self/cgroup"), readFile); cg > 0 && (total == 0 || cg < total) {
		return cg
	}
	return total
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// memTotal reads MemTotal from /proc/meminfo's text, in bytes; 0 if absent.
func memTotal(meminfo string) int64 {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupLimit is the memory limit of the cgroup /proc/self/cgroup's text names (v2 memory.max,
// or v1 memory.limit_in_bytes), read with read; 0 for none ("max", or v1's near-2^63 "no
// limit").
func cgroupLimit(selfCgroup string, read func(string) string) int64 {
	for _, line := range strings.Split(selfCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.max")
		case slices.Contains(strings.Split(parts[1], ","), "memory"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
		default:
			continue
		}
		v := strings.TrimSpace(read(file))
		n, err := strconv.ParseInt(v, 10, 64)
		if err == nil && n > 0 && n < 1<<62 {
			return n
		}
	}
	return 0
}

// applyMemoryLimit resolves the flag and sets the limit, returning the line to log.
func applyMemoryLimit(flag string) (string, error) {
	limit, why, err := resolveMemoryLimit(flag, os.Getenv("GOMEMLIMIT"), machineMemory())
	if err != nil {
		return "", err
	}
	if limit < 0 {
		return "memory limit: " + why, nil
	}
	debug.SetMemoryLimit(limit)
	return fmt.Sprintf("memory limit %s (%s): the collector runs harder near it", bytesize.Format(limit), why), nil
}
