package soak

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"stockpot/internal/portlock"
)

// Proc is one child process on a fixed loopback address, restartable with the same
// arguments: a replica, the router, the oracle or redis-server.
type Proc struct {
	Name   string
	Path   string
	Args   []string
	Addr   string // host:port it listens on
	Health string // URL that answers 200 once it is up; "" = the port accepts
	LogTo  string // file its stdout and stderr go to (appended across restarts)

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
}

// freeAddr returns a loopback host:port nobody listens on now.
// It is held by this process (portlock) for its life, so a replica restarted on it finds it
// free, and no other process is handed it meanwhile.
func freeAddr() (string, error) { return portlock.Addr() }

// Start starts the process and waits until it is healthy.
func (p *Proc) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.cmd != nil {
		p.mu.Unlock()
		return fmt.Errorf("%s: already running", p.Name)
	}
	f, err := os.OpenFile(p.LogTo, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		p.mu.Unlock()
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); f.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	p.starts++
	p.mu.Unlock()
	return p.waitHealthy(ctx, done)
}

func (p *Proc) waitHealthy(ctx context.Context, done chan struct{}) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-done:
			return fmt.Errorf("%s exited while starting: %s (log: %s)", p.Name, lastLine(p.LogTo), p.LogTo)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if p.healthy() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy after 90s (see %s)", p.Name, p.LogTo)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

var healthClient = &http.Client{Timeout: 2 * time.Second}

func (p *Proc) healthy() bool {
	if p.Health == "" {
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	resp, err := healthClient.Get(p.Health)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// Running reports whether the process is up (started and not exited).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop signals the process and waits for it to exit (killing it after grace).
func (p *Proc) stop(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
		if sig != syscall.SIGKILL {
			return fmt.Errorf("%s did not exit %v after %v; killed", p.Name, sig, grace)
		}
	}
	return nil
}

// Kill9 is kill -9: nothing is flushed.
func (p *Proc) Kill9() error { return p.stop(syscall.SIGKILL, 10*time.Second) }

// Term is a graceful stop (SIGTERM; a replica drains and writes back).
func (p *Proc) Term() error { return p.stop(syscall.SIGTERM, 60*time.Second) }

// Starts is how many times the process was started.
func (p *Proc) Starts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// lastLine is the last non-empty line of the file at path (a child's last words), or "".
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// Pid is the running process's id, 0 when it is not running.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
