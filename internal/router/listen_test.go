package router

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// servedRouter runs the router behind its own HTTPServer (the limits under
// test) on a loopback listener and returns the address.
func servedRouter(t *testing.T, sc ServerConfig, mod func(*Config), backends ...string) (*Router, string) {
	t.Helper()
	rt, _, _ := authRouter(t, mod, backends...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, lln, err := rt.HTTPServer(ln, sc)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rt, ln.Addr().String()
}

// closedWithin reports whether the server closes c (a read returns EOF or
// a reset) within d; a deadline hit means it stayed open.
func closedWithin(t *testing.T, c net.Conn, r *bufio.Reader, d time.Duration) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := r.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	if err == nil {
		t.Fatal("unexpected bytes from the server")
	}
	return true
}

func readResponse(t *testing.T, r *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestIdleConnectionClosed: a keep-alive connection with no next request
// is closed after the idle timeout.
func TestIdleConnectionClosed(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	_, addr := servedRouter(t, ServerConfig{IdleTimeout: 200 * time.Millisecond}, nil, be.URL)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
	r := bufio.NewReader(c)
	if resp, body := readResponse(t, r); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("first request: HTTP %d close=%v %s", resp.StatusCode, resp.Close, body)
	}
	if !closedWithin(t, c, r, 20*time.Second) {
		t.Fatal("an idle keep-alive connection was still open 20s after a 200ms idle timeout")
	}
}

// TestSlowBodyCut: a body dripping in at a byte every 100ms is cut by the
// body read timeout with a JSON 408, and the connection closes.
func TestSlowBodyCut(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	_, addr := servedRouter(t, ServerConfig{}, func(c *Config) { c.BodyReadTimeout = 300 * time.Millisecond }, be.URL)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if _, err := io.WriteString(c, " "); err != nil {
					return
				}
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	resp, body := readResponse(t, r)
	wantAPIError(t, "dripped body", resp.StatusCode, http.StatusRequestTimeout, body, "invalid_request_error")
	if !resp.Close {
		t.Errorf("the 408 keeps the connection open")
	}
	if !closedWithin(t, c, r, 20*time.Second) {
		t.Fatal("the connection stayed open after the body timeout")
	}
	for _, s := range be.seen() {
		if s.path == "/v1/completions" {
			t.Fatal("a cut request was forwarded")
		}
	}
}

// TestBodyTimeoutSparesStreams: the body deadline ends with the body; a
// response that runs past it (a long stream) is not cut.
func TestBodyTimeoutSparesStreams(t *testing.T) {
	// The stream lasts 4.5 s, past a 3 s body deadline (not shorter: the small body must be
	// read inside it even when a busy machine leaves the handler without a CPU for seconds).
	slow := slowStreamBackend(t, 6, 750*time.Millisecond)
	_, addr := servedRouter(t, ServerConfig{}, func(c *Config) { c.BodyReadTimeout = 3 * time.Second }, slow.URL)
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(b), "data: [DONE]\n\n") || strings.Contains(string(b), `"error"`) {
		t.Fatalf("a stream longer than the body timeout: %v %q", err, b)
	}
}

// TestConnectionCap: past MaxConnections a new connection is not served
// until an open one closes; then it is.
func TestConnectionCap(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	rt, addr := servedRouter(t, ServerConfig{MaxConnections: 2}, nil, be.URL)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp, _ := readResponse(t, bufio.NewReader(c)); resp.StatusCode != 200 {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
		held = append(held, c)
	}
	third := make(chan int, 1)
	go func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			third <- -1
			return
		}
		defer c.Close()
		io.WriteString(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			third <- -2
			return
		}
		third <- resp.StatusCode
	}()
	waitUntil(t, "the accept loop to wait for a slot", func() bool {
		return gauge(t, rt, "stockpot_router_connection_waits_total") >= 1
	})
	select {
	case code := <-third:
		t.Fatalf("a third connection was served (%d) while 2 of 2 were held", code)
	case <-time.After(300 * time.Millisecond):
	}
	if n := gauge(t, rt, "stockpot_router_connections"); n != 2 {
		t.Fatalf("stockpot_router_connections %v, want 2", n)
	}
	held[0].Close()
	select {
	case code := <-third:
		if code != 200 {
			t.Fatalf("third connection after a slot freed: %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the third connection was not served 20s after a slot freed")
	}
}

func gauge(t *testing.T, rt *Router, name string) float64 {
	t.Helper()
	for _, mf := range mustGather(t, rt) {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestProtocolErrorsJSON: net/http's own refusals (headers too large, a
// malformed request) reach the client in the API's JSON error shape.
func TestProtocolErrorsJSON(t *testing.T) {
	be := newRecordingBackend(t, "", false)
	_, addr := servedRouter(t, ServerConfig{MaxHeaderBytes: 4096}, nil, be.URL)
	for _, c := range []struct {
		name, req string
		code      int
	}{
		{"headers too large", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n", 431},
		{"malformed", "GET /health HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n", 400},
		{"no host", "GET /health HTTP/1.1\r\n\r\n", 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(conn, c.req)
			resp, body := readResponse(t, bufio.NewReader(conn))
			wantAPIError(t, c.name, resp.StatusCode, c.code, body, "invalid_request_error")
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

func TestJSONProtocolError(t *testing.T) {
	for _, c := range []struct {
		in   string
		ok   bool
		code int
	}{
		{"HTTP/1.1 400 Bad Request" + plainErrorHeaders + "400 Bad Request", true, 400},
		{"HTTP/1.1 400 Bad Request: missing required Host header" + plainErrorHeaders + "400 Bad Request: missing required Host header", true, 400},
		{"HTTP/1.1 431 Request Header Fields Too Large" + plainErrorHeaders + "431 Request Header Fields Too Large", true, 431},
		// A handler's (or a proxied backend's) text/plain 400 carries Date
		// and a length: left alone.
		{"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nDate: x\r\nContent-Length: 3\r\n\r\nbad", false, 0},
		{"HTTP/1.1 200 OK" + plainErrorHeaders + "ok", false, 0},
		{"HTTP/1.1 4", false, 0},
		{"HTTP/1.1 4xx Bad" + plainErrorHeaders, false, 0},
		{"", false, 0},
	} {
		out, ok := jsonProtocolError([]byte(c.in))
		if ok != c.ok {
			t.Errorf("%q: rewritten %v, want %v", c.in, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(out))), nil)
		if err != nil {
			t.Fatalf("%q → %q: %v", c.in, out, err)
		}
		var e struct {
			Error struct{ Message, Type string }
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != c.code || json.Unmarshal(b, &e) != nil || e.Error.Message == "" {
			t.Errorf("%q → HTTP %d %s", c.in, resp.StatusCode, b)
		}
	}
}

// FuzzJSONProtocolError: whatever net/http (or a backend) writes, the
// rewrite never panics and, when it fires, yields a parseable response.
func FuzzJSONProtocolError(f *testing.F) {
	f.Add([]byte("HTTP/1.1 400 Bad Request" + plainErrorHeaders + "400 Bad Request"))
	f.Add([]byte("HTTP/1.1 431 Request Header Fields Too Large" + plainErrorHeaders + "431 Request Header Fields Too Large"))
	f.Add([]byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, p []byte) {
		out, ok := jsonProtocolError(p)
		if !ok {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(out))), nil)
		if err != nil {
			t.Fatalf("%q → unparseable %q: %v", p, out, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || !json.Valid(b) {
			t.Fatalf("%q → body %q: %v", p, b, err)
		}
	})
}

func TestServerConfigValidate(t *testing.T) {
	for _, bad := range []ServerConfig{{ReadHeaderTimeout: -time.Second}, {IdleTimeout: -1}, {MaxHeaderBytes: -5}} {
		if _, err := bad.validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	c, err := ServerConfig{MaxConnections: -1}.validate()
	if err != nil || c.MaxConnections != -1 || c != (ServerConfig{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second, MaxConnections: -1, MaxHeaderBytes: 1 << 20}) {
		t.Errorf("defaults: %+v %v", c, err)
	}
}
