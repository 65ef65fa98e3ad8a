package portlock

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// Ports handed out are distinct, below the ephemeral range with their bus ports, and free.
func TestAddrDistinctAndBelowEphemeral(t *testing.T) {
	_, hi, err := span()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 50 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, ps, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(ps)
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < low || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, low, hi)
		}
		l, err := net.Listen("tcp", a) // the child can bind it
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		l.Close()
	}
}

// A port this process holds is not handed to another process: the child, running this test
// binary's helper below, claims ports until it has as many as asked and prints them; none is
// one of ours.
func TestHeldAcrossProcesses(t *testing.T) {
	if os.Getenv("PORTLOCK_CHILD") != "" {
		var out []string
		for range 200 {
			p, err := Port()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, strconv.Itoa(p))
		}
		os.Stdout.WriteString(strings.Join(out, " ") + "\n")
		return
	}
	ours := map[string]bool{}
	for range 200 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		ours[strconv.Itoa(p)] = true
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHeldAcrossProcesses$")
	cmd.Env = append(os.Environ(), "PORTLOCK_CHILD=1")
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	for _, p := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) {
		if ours[p] {
			t.Fatalf("the child got port %s, which this process holds", p)
		}
	}
}

// A port somebody outside the scheme listens on is skipped.
func TestSkipsListenedPorts(t *testing.T) {
	lo, hi, err := span()
	if err != nil {
		t.Fatal(err)
	}
	// Occupy a whole stretch by listening; Port never returns a port in it while held.
	var ls []net.Listener
	taken := map[int]bool{}
	for p := lo; p < lo+200 && p < hi; p++ {
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err == nil {
			ls = append(ls, l)
			taken[p] = true
		}
	}
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range 300 {
		p, err := Port()
		if err != nil {
			t.Fatal(err)
		}
		if taken[p] {
			t.Fatalf("port %d handed out while something listens on it", p)
		}
	}
}
