package portlock

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// busOffset is Redis Cluster's bus port offset: a node on port p also listens on p+busOffset.
const busOffset = 10000

// low is the first port handed out: above the well-known and most registered service ports.
const low = 10000

var mu struct {
	sync.Mutex
	held []*os.File // the lock files of the ports this process holds, open until it exits
}

// Addr returns "127.0.0.1:PORT" with a port that this process holds (and port+10000 with it):
// no other process using this package gets it, and the kernel hands out neither on its own.
func Addr() (string, error) {
	p, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

// Port is Addr's port.
func Port() (int, error) {
	lo, hi, err := span()
	if err != nil {
		return 0, err
	}
	dir := filepath.Join(os.TempDir(), "stockpot-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, err
	}
	n := hi - lo
	start := rand.IntN(n)
	for i := range n {
		p := lo + (start+i)%n
		if claim(dir, p) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("portlock: every port in [%d, %d) is taken", lo, hi)
}

// span is the range Port draws from: [low, ephemeral start - busOffset), so that a port and its
// bus port both lie below the ephemeral range.
func span() (lo, hi int, err error) {
	eph := 32768 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				eph = v
			}
		}
	}
	if hi = eph - busOffset; hi-low < 1000 {
		return 0, 0, fmt.Errorf("portlock: the ephemeral port range starts at %d, leaving no room below it for ports and bus ports from %d", eph, low)
	}
	return low, hi, nil
}

// claim takes p (and its bus port) if no process holds its lock and nothing listens on either.
func claim(dir string, p int) bool {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return false
	}
	for _, q := range []int{p, p + busOffset} {
		if !free(q) {
			f.Close() // releases the lock: someone outside this scheme uses the port
			return false
		}
	}
	mu.Lock()
	mu.held = append(mu.held, f)
	mu.Unlock()
	return true
}

// free reports whether nothing listens on 127.0.0.1:p now.
func free(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
