package connlimit

import (
	"errors"
	"net"
	"testing"
	"time"
)

func TestHeaderBudget(t *testing.T) {
	const s = time.Second
	cases := []struct {
		full        time.Duration
		open, limit int
		want        time.Duration
	}{
		{10 * s, 0, 4096, 10 * s},
		{10 * s, 2048, 4096, 10 * s}, // half full: all of it
		{10 * s, 3072, 4096, 5500 * time.Millisecond},
		{10 * s, 4095, 4096, s + 9*s/2048},
		{10 * s, 4096, 4096, s},                                      // full: the floor
		{10 * s, 4112, 4096, s},                                      // the reserve: the floor
		{500 * time.Millisecond, 4096, 4096, 500 * time.Millisecond}, // never above the configured wait
		{10 * s, 1, 1, s},
		{10 * s, 0, 1, 10 * s},
		{10 * s, 5, 0, 10 * s}, // no limit
	}
	for _, c := range cases {
		if have := headerBudget(c.full, c.open, c.limit); have != c.want {
			t.Errorf("headerBudget(%v, %d of %d): have %v, want %v", c.full, c.open, c.limit, have, c.want)
		}
	}
}

func TestClampReadDeadline(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	lim := Config{Max: 100, HeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second}
	at := func(d time.Duration) time.Time { return now.Add(d) }
	cases := []struct {
		name       string
		t          time.Time
		open       int
		healthOnly bool
		want       time.Time
	}{
		{"zero", time.Time{}, 100, false, time.Time{}},
		{"head, quiet", at(10 * time.Second), 10, false, at(10 * time.Second)},
		{"head, full", at(10 * time.Second), 100, false, at(time.Second)},
		{"head, three quarters", at(10 * time.Second), 75, false, at(5500 * time.Millisecond)},
		{"head armed a moment ago", at(9800 * time.Millisecond), 100, false, at(time.Second)},
		{"idle, full", at(60 * time.Second), 100, false, at(time.Second)},
		{"idle, three quarters", at(60 * time.Second), 75, false, at(30500 * time.Millisecond)},
		{"body (30 s), full", at(30 * time.Second), 100, false, at(30 * time.Second)},
		{"short handler deadline, full", at(2 * time.Second), 100, false, at(2 * time.Second)},
		{"head, health-only, quiet", at(10 * time.Second), 0, true, at(time.Second)},
	}
	for _, c := range cases {
		if have := clampReadDeadline(now, c.t, lim, c.open, c.healthOnly); !have.Equal(c.want) {
			t.Errorf("%s: have %v, want %v", c.name, have.Sub(now), c.want.Sub(now))
		}
	}
}

// TestLimitListenerClose: closing the listener ends an Accept waiting for a free slot (a
// drain with every slot taken), and closing a connection twice frees its slot once.
func TestLimitListenerClose(t *testing.T) {
	inner, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := New(inner, Config{Max: 1, PerClient: 1, MaxHeaderBytes: 1 << 20})
	dial(t, inner.Addr().String())
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sc.Close()
	sc.Close()
	if n := len(ln.slots); n != 0 {
		t.Fatalf("%d slots held after closing the only connection twice", n)
	}
	dial(t, inner.Addr().String())
	sc, err = ln.Accept() // takes the only slot
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	errc := make(chan error, 1)
	go func() { _, err := ln.Accept(); errc <- err }()
	ln.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Accept waiting for a slot did not return after Close")
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
