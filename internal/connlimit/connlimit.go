package connlimit

import (
	"bytes"
	"context"
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

// Config configures a Listener.
type Config struct {
	Max       int // connections open at once for any request; more wait in the backlog
	PerClient int // connections open at once from one remote IP (the reserve included)
	// Reserve is the connections accepted beyond Max that may carry only GET /health and
	// /ready (HealthOnly): probes are answered while clients hold every other slot.
	Reserve int
	// HeaderTimeout and IdleTimeout are net/http's ReadHeaderTimeout and IdleTimeout: the
	// read deadlines of that length are the waits for a client to send a request's head,
	// which clampReadDeadline shrinks as the listener fills.
	HeaderTimeout, IdleTimeout time.Duration
	MaxHeaderBytes             int // for serverConn's rewrite of net/http's 431
}

// HealthReserve is the connections kept for health probes beyond MaxConnections: a few
// kubelets and load balancers probe at once, each on its own connection, and a connection in
// the reserve waits for its head at most headerFloor, so 16 hold against clients that fill
// them with half-sent heads too.
const HealthReserve = 16

// headerFloor is the shortest wait for a request's head, when the listener is full: long
// enough for a client across a continent to send one (a few round trips), short enough that
// connections held by half-sent heads turn over every second.
const headerFloor = time.Second

// headerBudget is how long a connection may take to send a request's head when open of limit
// connections are open and full is the configured wait: all of it while at most half are
// open, then falling in a straight line to headerFloor (or full, if shorter) when all are.
func headerBudget(full time.Duration, open, limit int) time.Duration {
	floor := min(full, headerFloor)
	half := limit / 2
	switch {
	case limit <= 0 || open <= half:
		return full
	case open >= limit:
		return floor
	}
	// open in (half, limit): the share of the upper half still free, times what is above
	// the floor.
	return floor + (full-floor)*time.Duration(limit-open)/time.Duration(limit-half)
}

// clampReadDeadline returns the read deadline to arm at now for the deadline t net/http asked
// for. A wait for a request's head (t is now + headerTimeout or now + idleTimeout, within
// deadlineSlack: net/http takes its clock just before the call) is cut to headerBudget of
// that wait, at open of lim.Max connections; a health-only connection's to the floor. Other
// deadlines (a body's, a handler's, zero) are kept.
func clampReadDeadline(now, t time.Time, lim Config, open int, healthOnly bool) time.Time {
	if t.IsZero() {
		return t
	}
	d := t.Sub(now)
	for _, full := range []time.Duration{lim.HeaderTimeout, lim.IdleTimeout} {
		if full <= 0 || d > full || d < full-deadlineSlack {
			continue
		}
		b := headerBudget(full, open, lim.Max)
		if healthOnly {
			b = min(full, headerFloor)
		}
		if d > b {
			return now.Add(b)
		}
		return t
	}
	return t
}

// deadlineSlack is how far before now+timeout a deadline may be and still be net/http's wait
// for a head: the time between its clock read and the call, generous for a busy machine.
const deadlineSlack = 500 * time.Millisecond

// Listener accepts at most Max+Reserve connections at once, at most PerClient of them
// from one remote IP. Accept takes a slot before accepting, so the connections over the cap
// wait in the kernel's backlog (the client sees a slow connect, not a reset) until one of the
// open ones closes; a connection over its IP's share is answered 429 and closed at once.
// Those accepted while Max are open are health-only (see Config.Reserve).
type Listener struct {
	net.Listener
	lim       Config
	slots     chan struct{} // one value per open connection; capacity Max+Reserve
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	mu        struct {
		sync.Mutex
		open  int            // connections accepted and not closed; == len(slots)
		perIP map[string]int // open connections by remote IP; no zero entries
	}
}

// New returns a Listener accepting on ln under lim (Max and PerClient at least 1).
func New(ln net.Listener, lim Config) *Listener {
	lim.Max = max(lim.Max, 1)
	lim.PerClient = max(lim.PerClient, 1)
	lim.Reserve = max(lim.Reserve, 0)
	l := &Listener{Listener: ln, lim: lim, slots: make(chan struct{}, lim.Max+lim.Reserve), done: make(chan struct{})}
	l.mu.perIP = map[string]int{}
	return l
}

func (l *Listener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		ip := remoteIP(c.RemoteAddr())
		l.mu.Lock()
		if l.mu.perIP[ip] >= l.lim.PerClient {
			l.mu.Unlock()
			<-l.slots
			refuseConn(c, l.lim.PerClient)
			continue
		}
		l.mu.perIP[ip]++
		l.mu.open++
		healthOnly := l.mu.open > l.lim.Max
		l.mu.Unlock()
		return &serverConn{Conn: c, l: l, ip: ip, healthOnly: healthOnly}, nil
	}
}

func (l *Listener) release(ip string) {
	l.mu.Lock()
	l.mu.open--
	if l.mu.perIP[ip]--; l.mu.perIP[ip] <= 0 {
		delete(l.mu.perIP, ip)
	}
	l.mu.Unlock()
	<-l.slots
}

// Usage returns the open connections and those of ip.
func (l *Listener) Usage(ip string) (open, fromIP int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.open, l.mu.perIP[ip]
}

func (l *Listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// remoteIP is the address's IP (the whole address if it has no port).
func remoteIP(a net.Addr) string {
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// refuseConn answers a connection over its client's share with a 429 in the API's shape and
// closes it. The answer is one small write to a fresh socket (its send buffer is empty) under
// a short deadline, so Accept never waits on the client; a TLS connection, whose answer would
// need a handshake, is closed without one.
func refuseConn(c net.Conn, perClient int) {
	defer c.Close()
	if _, ok := c.(*tls.Conn); ok {
		return
	}
	e := &api.Error{Status: http.StatusTooManyRequests, Type: api.TypeInvalidRequest, Code: "too_many_connections",
		Message: fmt.Sprintf("this client has %d connections open, its share of this server's (--max-connections-per-client); reuse them or close some", perClient)}
	js, err := json.Marshal(e)
	if err != nil {
		return
	}
	js = append(js, '\n')
	out := fmt.Appendf(nil, "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n", len(js))
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(append(out, js...))
}

// serverConn is one accepted connection: it frees its listener slot once, when closed, cuts
// its waits for a request's head as the listener fills (clampReadDeadline), and gives
// net/http's own error answers the API's error shape (see rewritePreHandlerError).
type serverConn struct {
	net.Conn
	l          *Listener
	ip         string
	healthOnly bool // accepted into the reserve: only GET /health and /ready (HealthOnly)
	once       sync.Once
}

// SetReadDeadline is how net/http arms its wait for a request's head; see clampReadDeadline.
func (c *serverConn) SetReadDeadline(t time.Time) error {
	open, _ := c.l.Usage(c.ip)
	return c.Conn.SetReadDeadline(clampReadDeadline(time.Now(), t, c.l.lim, open, c.healthOnly))
}

// SetDeadline clamps its read half as SetReadDeadline.
func (c *serverConn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.SetReadDeadline(t)
}

func (c *serverConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// CloseWrite keeps net/http's half-close before it closes a connection after an error
// answer (so the client reads the answer instead of a reset); it needs the TCP connection's.
func (c *serverConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *serverConn) Write(b []byte) (int, error) {
	if r, ok := rewritePreHandlerError(b, c.l.lim.MaxHeaderBytes); ok {
		if _, err := c.Conn.Write(r); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// preHandlerHeaders is the header block of the answers net/http writes by itself, straight to
// the connection, when it cannot parse a request (431 for headers over MaxHeaderBytes, 400
// for a malformed request or Content-Length, 501 for an unknown Transfer-Encoding). A handler's
// response never has it: net/http always adds a Date header to those, and writes the headers
// a handler sets in sorted order (Connection before Content-Type).
const preHandlerHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// rewritePreHandlerError turns one of net/http's plain-text answers to a request it could not
// parse (one Write holding the whole response) into the same status with an OpenAI-shaped
// JSON error body. maxHeaderBytes is the server's header limit, for the 431's message. It
// reports false for anything else, which is written unchanged.
func rewritePreHandlerError(b []byte, maxHeaderBytes int) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(b, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 4 || rest[3] != ' ' {
		return nil, false
	}
	code, err := strconv.Atoi(string(rest[:3]))
	if err != nil || code < 400 || code > 599 {
		return nil, false
	}
	statusLine, _, ok := bytes.Cut(rest[4:], []byte(preHandlerHeaders))
	if !ok || bytes.ContainsAny(statusLine, "\r\n") {
		return nil, false
	}
	// The status line is "TEXT" or "TEXT: DETAIL"; the body repeats it.
	_, detail, _ := bytes.Cut(statusLine, []byte(": "))
	e := &api.Error{Status: code, Type: api.TypeInvalidRequest}
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		e.Code = "request_header_fields_too_large"
		e.Message = fmt.Sprintf("request headers are over this server's limit of %d bytes", maxHeaderBytes)
	case http.StatusNotImplemented:
		e.Code = "unsupported_transfer_encoding"
		e.Message = "unsupported Transfer-Encoding; send the body with a Content-Length or chunked"
	default:
		e.Code = "malformed_request"
		e.Message = "malformed HTTP request"
		if len(detail) > 0 {
			e.Message += ": " + string(detail)
		}
	}
	js, err := json.Marshal(e)
	if err != nil {
		return nil, false
	}
	js = append(js, '\n')
	out := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %d\r\n\r\n",
		code, http.StatusText(code), len(js))
	return append(out, js...), true
}

// healthOnlyKey marks, on a request's context, a connection from the health reserve.
type healthOnlyKey struct{}

// ConnContext is http.Server.ConnContext: it marks the requests of a health-only connection.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*serverConn); ok && sc.healthOnly {
		return context.WithValue(ctx, healthOnlyKey{}, true)
	}
	return ctx
}

// HealthOnly reports whether ctx is a request's on a health-only connection (accepted into
// the reserve; marked by ConnContext): it may carry only GET /health and /ready.
func HealthOnly(ctx context.Context) bool { return ctx.Value(healthOnlyKey{}) != nil }
