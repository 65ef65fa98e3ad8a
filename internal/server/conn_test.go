package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"stockpot/internal/api"
	"stockpot/internal/connlimit"
)

// serveLoopback runs s.Serve on a loopback port until the test ends and returns its address.
func serveLoopback(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
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

// roundTrip writes raw on c and reads one response.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the response to %.40q: %v", raw, err)
	}
	return resp
}

const getHealth = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"

// apiErrorOf decodes resp's body as an OpenAI error and checks its shape.
func apiErrorOf(t *testing.T, resp *http.Response) api.ErrorDetail {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e api.ErrorBody
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("%d %s: body is not an API error: %q (%v)", resp.StatusCode, resp.Header.Get("Content-Type"), b, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q", ct)
	}
	return e.Error
}

// stillServes checks that a fresh connection gets answered.
func stillServes(t *testing.T, addr string) {
	t.Helper()
	c := dial(t, addr)
	resp := roundTrip(t, c, bufio.NewReader(c), getHealth)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/health after: %d", resp.StatusCode)
	}
}

// closedByServer waits (up to a generous deadline) for the server to close c.
func closedByServer(c net.Conn, br *bufio.Reader) error {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := br.ReadByte()
	if err == nil {
		return errors.New("the server sent more bytes")
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("still open after 20 s")
	}
	return nil // EOF or reset: closed
}

// TestIdleConnectionsClosed: a keep-alive connection idle past IdleTimeout is closed.
func TestIdleConnectionsClosed(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.IdleTimeout = 50 * time.Millisecond })
	addr := serveLoopback(t, s)
	conns := make([]net.Conn, 20)
	readers := make([]*bufio.Reader, len(conns))
	for i := range conns {
		conns[i] = dial(t, addr)
		readers[i] = bufio.NewReader(conns[i])
		resp := roundTrip(t, conns[i], readers[i], getHealth)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("keep-alive request: %d, close %v", resp.StatusCode, resp.Close)
		}
	}
	for i := range conns {
		if err := closedByServer(conns[i], readers[i]); err != nil {
			t.Errorf("idle connection %d: %v", i, err)
		}
	}
	stillServes(t, addr)
}

// TestSlowBodyCut: a body trickling in at one byte per interval is answered 408 in the API's
// error shape once ReadTimeout passes, its connection closed, and the server keeps serving.
func TestSlowBodyCut(t *testing.T) {
	// 3 s: short beside the trickle below (one byte every 200 ms: 8 s for the body), and long
	// enough that a small body sent at once is read inside it even when a busy machine leaves
	// the handler without a CPU for seconds.
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.ReadTimeout = 3 * time.Second })
	addr := serveLoopback(t, s)
	for _, path := range []string{"/v1/completions", "/v1/nowhere"} {
		c := dial(t, addr)
		body := `{"prompt":"a slow prompt","max_tokens":1}`
		if _, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, len(body)); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		go func() { // one byte every 200 ms: the whole body would take 8 s
			for i := 0; i < len(body); i++ {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := c.Write([]byte{body[i]}); err != nil {
					return
				}
			}
		}()
		br := bufio.NewReader(c)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		close(stop)
		switch {
		case err != nil:
			t.Fatalf("%s: no answer: %v", path, err)
		case path == "/v1/completions":
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("%s: slow body answered %d, want 408", path, resp.StatusCode)
			}
			if e := apiErrorOf(t, resp); e.Code == nil || *e.Code != "request_timeout" {
				t.Errorf("%s: 408 code %v", path, e.Code)
			}
		default:
			// Answered 404 at once; what is left of the body is read under the same deadline.
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Errorf("%s: %d, want 404", path, resp.StatusCode)
			}
		}
		if err := closedByServer(c, br); err != nil {
			t.Errorf("%s: slow connection: %v", path, err)
		}
	}
	stillServes(t, addr)
	// A stream runs past ReadTimeout: the deadline was cleared once its body was read.
	s.gen.(*fakeGen).delay = time.Second // 4 tokens: 4 s
	c := dial(t, addr)
	body := `{"prompt":"x","max_tokens":4,"stream":true}`
	resp := roundTrip(t, c, bufio.NewReader(c), fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Errorf("a stream longer than ReadTimeout: %d %v %q", resp.StatusCode, err, b)
	}
}

// TestConnectionCap: connections over MaxConnections wait until one closes.
func TestConnectionCap(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), func(c *Config) { c.MaxConnections = 2; c.MaxConnectionsPerClient = 100 })
	addr := serveLoopback(t, s)
	// The cap and the health reserve held: the next connection waits in the backlog.
	held := make([]net.Conn, 2+connlimit.HealthReserve)
	for i := range held {
		held[i] = dial(t, addr)
		resp := roundTrip(t, held[i], bufio.NewReader(held[i]), getHealth)
		resp.Body.Close()
	}
	third := dial(t, addr) // the kernel completes the handshake; the server has not accepted it
	answered := make(chan int, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(third), nil)
		if err != nil {
			answered <- -1
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	if _, err := io.WriteString(third, getHealth); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-answered:
		t.Fatalf("a third connection over a cap of 2 was served (%d)", code)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	select {
	case code := <-answered:
		if code != 200 {
			t.Errorf("third connection, once a slot was free: %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the third connection was not served after a slot was freed")
	}
}

// TestPreHandlerErrorsInAPIShape: the answers net/http writes itself, before any handler (431
// for huge headers, 400 for a malformed request or Content-Length, 501 for an unknown
// transfer encoding), carry the API's error shape; the server keeps serving.
func TestPreHandlerErrorsInAPIShape(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("x"), nil)
	addr := serveLoopback(t, s)
	for _, tc := range []struct {
		name, raw string
		status    int
		code      string
	}{
		{"2 MB header", "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2<<20) + "\r\n\r\n", 431, "request_header_fields_too_large"},
		{"huge Content-Length", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400, "malformed_request"},
		{"no Host", "GET /health HTTP/1.1\r\n\r\n", 400, "malformed_request"},
		{"garbage", "\x16\x03\x01 hello\r\n\r\n", 400, "malformed_request"},
		{"transfer encoding", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported_transfer_encoding"},
	} {
		c := dial(t, addr)
		br := bufio.NewReader(c)
		go io.WriteString(c, tc.raw) // the server may answer before reading it all
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		if e := apiErrorOf(t, resp); e.Code == nil || *e.Code != tc.code || e.Type != api.TypeInvalidRequest {
			t.Errorf("%s: error %+v, want code %s", tc.name, e, tc.code)
		}
	}
	stillServes(t, addr)
}
