package router

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"stockpot/internal/api"
)

// ServerConfig bounds what one client can hold of the router's HTTP server.
// There is deliberately no write timeout and no whole-request read timeout
// (net/http's ReadTimeout cancels a request's context when it passes, even
// mid-response): a long stream runs as long as it runs. The request body
// has its own deadline (Config.BodyReadTimeout).
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers, including the
	// first request of a new connection. Default 10s.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request for this
	// long. Default 60s.
	IdleTimeout time.Duration
	// MaxConnections bounds open client connections; past it the router
	// stops accepting (new ones wait in the kernel's backlog) until one
	// closes. Default 4096; negative: unbounded.
	MaxConnections int
	// MaxHeaderBytes bounds a request's headers (431 past it). Default 1 MiB,
	// net/http's.
	MaxHeaderBytes int
	// TLS, when set, serves HTTPS (internal/tlsconfig.Server; with a client
	// CA, mutual TLS).
	TLS *tls.Config
}

// DefaultServerConfig returns the defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 60 * time.Second,
		MaxConnections: 4096, MaxHeaderBytes: 1 << 20}
}

// validate fills zero values with the defaults and rejects negative durations and sizes
// (MaxConnections may be negative: unbounded).
func (c ServerConfig) validate() (ServerConfig, error) {
	d := DefaultServerConfig()
	if c.ReadHeaderTimeout < 0 || c.IdleTimeout < 0 || c.MaxHeaderBytes < 0 {
		return c, fmt.Errorf("router: ReadHeaderTimeout %v, IdleTimeout %v and MaxHeaderBytes %d must not be negative",
			c.ReadHeaderTimeout, c.IdleTimeout, c.MaxHeaderBytes)
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = d.MaxConnections
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = d.MaxHeaderBytes
	}
	return c, nil
}

// HTTPServer returns a server for the router's Handler with sc's limits,
// and ln wrapped to hold at most sc.MaxConnections connections and to turn
// net/http's plain-text protocol errors (400, 431) into the API's JSON
// error shape. Serve the returned server on the returned listener.
func (r *Router) HTTPServer(ln net.Listener, sc ServerConfig) (*http.Server, net.Listener, error) {
	sc, err := sc.validate()
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: sc.ReadHeaderTimeout,
		IdleTimeout: sc.IdleTimeout, MaxHeaderBytes: sc.MaxHeaderBytes}
	if sc.TLS != nil {
		// Under the limit listener: a slot is taken before the handshake, and
		// the JSON rewrite of net/http's plain-text errors sees plaintext. The
		// handshake runs on the first read, within ReadHeaderTimeout.
		ln = tls.NewListener(ln, sc.TLS)
	}
	return srv, newLimitListener(ln, sc.MaxConnections, r.m), nil
}

// limitListener accepts at most n connections at once: Accept takes a slot
// before it accepts, and a connection's Close gives its slot back (netutil's
// LimitListener, with metrics). Waiting in Accept, not refusing, keeps
// bursts in the kernel's backlog; the idle and header timeouts make sure
// slots come back.
type limitListener struct {
	net.Listener
	slots chan struct{} // nil: unbounded
	m     *metrics
	done  chan struct{}
	once  sync.Once
}

func newLimitListener(ln net.Listener, n int, m *metrics) net.Listener {
	l := &limitListener{Listener: ln, m: m, done: make(chan struct{})}
	if n > 0 {
		l.slots = make(chan struct{}, n)
	}
	return l
}

func (l *limitListener) acquire() bool {
	if l.slots == nil {
		return true
	}
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	l.m.connWaits.Inc()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-l.done:
		return false
	}
}

func (l *limitListener) release() {
	if l.slots != nil {
		<-l.slots
	}
}

func (l *limitListener) Accept() (net.Conn, error) {
	if !l.acquire() {
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		l.release()
		return nil, err
	}
	l.m.connections.Inc()
	return &limitConn{Conn: c, l: l}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.done) })
	return err
}

// limitConn gives its slot back on the first Close, and rewrites net/http's
// plain-text protocol errors as JSON.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.m.connections.Dec()
		c.l.release()
	})
	return err
}

// CloseWrite keeps the half-close net/http uses to deliver an error before
// it closes a connection.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *limitConn) Write(p []byte) (int, error) {
	if js, ok := jsonProtocolError(p); ok {
		if _, err := c.Conn.Write(js); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// plainErrorHeaders is what net/http writes, whole and alone, when it
// refuses a request before any handler runs (malformed request, headers
// over MaxHeaderBytes, bad Transfer-Encoding): "HTTP/1.1 CODE TEXT" +
// plainErrorHeaders + body. Responses from handlers always carry Date and
// a length or chunking, so this exact shape marks net/http's own errors.
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// jsonProtocolError returns p rewritten in the API's JSON error shape when p
// is one of net/http's plain-text protocol errors.
func jsonProtocolError(p []byte) ([]byte, bool) {
	const pre = "HTTP/1.1 4"
	if len(p) > 4096 || !bytes.HasPrefix(p, []byte(pre)) {
		return nil, false
	}
	line, body, ok := bytes.Cut(p, []byte(plainErrorHeaders))
	// The status line is "HTTP/1.1 4xx" and then nothing or " reason".
	const n = len("HTTP/1.1 400")
	if !ok || bytes.ContainsAny(line, "\r\n") || len(line) < n || len(line) > n && line[n] != ' ' {
		return nil, false
	}
	code, err := strconv.Atoi(string(line[n-3 : n]))
	if err != nil || code < 400 || code > 499 {
		return nil, false
	}
	e := &api.Error{Status: code, Type: api.TypeInvalidRequest, Code: "bad_request", Message: string(body)}
	if code == http.StatusRequestHeaderFieldsTooLarge {
		e.Code, e.Message = "headers_too_large", "request headers are over the limit (--max-header-bytes)"
	}
	js, _ := json.Marshal(e.Body())
	out := make([]byte, 0, len(line)+len(js)+128)
	out = append(out, line...)
	out = append(out, "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: "...)
	out = strconv.AppendInt(out, int64(len(js)), 10)
	out = append(out, "\r\n\r\n"...)
	return append(out, js...), true
}
