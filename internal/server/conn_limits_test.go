package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// halfHeads opens n connections from local IP from that send half a request head each and
// returns them; they stay open until the test ends.
func halfHeads(t *testing.T, addr, from string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	var cs []net.Conn
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

// waitOpen waits (generously; this asserts no speed) until the server's listener holds open
// connections.
func waitOpen(t *testing.T, s *Server, open int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if n := s.openConnections(); n >= open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener holds %d connections, want %d", s.openConnections(), open)
		}
	}
}

// TestHealthWhileFull: clients from many addresses hold every connection with half-sent
// heads (and a long ReadHeaderTimeout, so they stay); /health is still answered, on the
// reserve, and anything else on the reserve is a 503 in the API's shape, its connection
// closed.
func TestHealthWhileFull(t *testing.T) {
	const limit = 32
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) {
		c.MaxConnections = limit
		c.MaxConnectionsPerClient = limit / 8
		c.ReadHeaderTimeout = 10 * time.Minute // the attack's connections stay put
	})
	addr := serveLoopback(t, s)
	for i := range 8 {
		halfHeads(t, addr, fmt.Sprintf("127.0.0.%d", 10+i), limit/8)
	}
	waitOpen(t, s, limit)

	c := dial(t, addr)
	br := bufio.NewReader(c)
	resp := roundTrip(t, c, br, getHealth)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health while full: %d", resp.StatusCode)
	}
	// The same reserve connection may not carry the API.
	resp = roundTrip(t, c, br, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	e := apiErrorOf(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || e.Code == nil || *e.Code != "connection_limit" {
		t.Fatalf("the API on a reserve connection: %d %+v", resp.StatusCode, e)
	}
	if err := closedByServer(c, br); err != nil {
		t.Error(err)
	}
}

// TestConnectionsPerClient: one IP holds at most its share; the next connection from it is
// answered 429 and closed, while another IP is still served.
func TestConnectionsPerClient(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) {
		c.MaxConnections = 64
		c.MaxConnectionsPerClient = 3
		c.ReadHeaderTimeout = 10 * time.Minute
	})
	addr := serveLoopback(t, s)
	halfHeads(t, addr, "127.0.0.2", 3)
	waitOpen(t, s, 3)
	for range 5 {
		c := halfHeads(t, addr, "127.0.0.2", 1)[0]
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("a connection over its IP's share: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"too_many_connections"`) {
			t.Fatalf("over the share: %d %s", resp.StatusCode, b)
		}
	}
	if open, fromIP := s.connectionsFrom("127.0.0.2"); fromIP != 3 || open != 3 {
		t.Errorf("the listener holds %d, %d from the client, want 3 and 3", open, fromIP)
	}
	// Another address is served.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp := roundTrip(t, c, bufio.NewReader(c), getHealth)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("another client: %d", resp.StatusCode)
	}
}

// openConnections is the connections Serve's listener holds (0 before Serve).
func (s *Server) openConnections() int {
	open, _ := s.connectionsFrom("")
	return open
}
