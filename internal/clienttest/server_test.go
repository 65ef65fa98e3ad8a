package clienttest

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"stockpot/internal/portlock"
	"stockpot/internal/syncbuf"
)

// The tests run the real binary, built once by TestMain, as a subprocess per test: each test
// gets a fresh server, so its cache holds only its own conversation.
var (
	binPath   string
	buildErr  string
	blockSize = 16 // serve's default --block-size; the cache-reuse bounds use it
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "stockpot-clienttest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "stockpot")
	if out, err := exec.Command("go", "build", "-o", binPath, "stockpot/cmd/stockpot").CombinedOutput(); err != nil {
		buildErr = fmt.Sprintf("building stockpot: %v\n%s", err, out)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one `stockpot serve` subprocess on a loopback port.
type server struct {
	url string // http://127.0.0.1:PORT
	cmd *exec.Cmd
	log *syncbuf.Buffer // the server's combined output, read while it writes
}

// startServer starts `stockpot serve` with the embedded default model (no --model flag, as a
// user starts it) and waits for /health. The server is killed when the test ends; its output
// is logged if the test failed.
func startServer(t *testing.T, extra ...string) *server {
	t.Helper()
	if buildErr != "" {
		t.Fatal(buildErr) // a build failure is a failure, never a skip
	}
	addr := freeAddr(t)
	s := &server{url: "http://" + addr, log: &syncbuf.Buffer{}}
	args := append([]string{"serve", "--addr", addr, "--kv-memory", "256MiB", "--block-size", fmt.Sprint(blockSize)}, extra...)
	s.cmd = exec.Command(binPath, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
		if t.Failed() {
			t.Logf("stockpot serve output:\n%s", s.log)
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.url + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if s.cmd.ProcessState != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("stockpot serve on %s not healthy after 3 minutes:\n%s", addr, s.log)
	return nil
}

// freeAddr is a loopback address whose port this test process holds (portlock): nobody else is
// told it, and the kernel hands it out to no one, before the child binds it.
func freeAddr(t *testing.T) string {
	t.Helper()
	a, err := portlock.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return a
}
