package kernels

import (
	"os"
	"sync"
)

var loadavg struct {
	once sync.Once
	f    *os.File // nil where /proc/loadavg cannot be opened
	mu   sync.Mutex
	buf  [128]byte
}

// runnableThreads returns how many threads the machine has running or
// ready to run now (the fourth field of /proc/loadavg, "running/total"),
// and whether it could be read. The file stays open; each call rereads it
// from the start and allocates nothing.
func runnableThreads() (int, bool) {
	l := &loadavg
	l.once.Do(func() { l.f, _ = os.Open("/proc/loadavg") })
	if l.f == nil {
		return 0, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n, _ := l.f.ReadAt(l.buf[:], 0)
	return parseRunnable(l.buf[:n])
}

// parseRunnable reads the running count from a /proc/loadavg line such as
// "0.53 1.41 2.30 3/345 12345".
func parseRunnable(b []byte) (int, bool) {
	field := 0
	for i := 0; i < len(b); i++ {
		if b[i] == ' ' {
			field++
			continue
		}
		if field != 3 {
			continue
		}
		n, digits := 0, 0
		for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
			n = n*10 + int(b[i]-'0')
			digits++
			if n > 1<<20 {
				return 0, false
			}
		}
		if digits == 0 || i >= len(b) || b[i] != '/' {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
