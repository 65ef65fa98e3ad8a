package server

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

// connLimits configures limitListener.
type connLimits struct {
	max       int // connections open at once for any request; more wait in the backlog
	perClient int // connections open at once from one remote IP (the reserve included)
	// reserve is the connections accepted beyond max that may carry only GET /health and
	// /ready (healthOnly): probes are answered while clients hold every other slot.
	reserve int
	// headerTimeout and idleTimeout are net/http's ReadHeaderTimeout and IdleTimeout: the
	// read deadlines of that length are the waits for a client to send a request's head,
	// which clampReadDeadline shrinks as the listener fills.
	headerTimeout, idleTimeout time.Duration
	maxHeaderBytes             int // for serverConn's rewrite of net/http's 431
}

// healthReserve is the connections kept for health probes beyond MaxConnections: a few
// kubelets and load balancers probe at once, each on its own connection, and a connection in
// the reserve waits for its head at most headerFloor, so 16 hold against clients that fill
// them with half-sent heads too.
const healthReserve = 16

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
// that wait, at open of lim.max connections; a health-only connection's to the floor. Other
// deadlines (a body's, a handler's, zero) are kept.
func clampReadDeadline(now, t time.Time, lim connLimits, open int, healthOnly bool) time.Time {
	if t.IsZero() {
		return t
	}
	d := t.Sub(now)
	for _, full := range []time.Duration{lim.headerTimeout, lim.idleTimeout} {
		if full <= 0 || d > full || d < full-deadlineSlack {
			continue
		}
		b := headerBudget(full, open, lim.max)
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

// limitListener accepts at most max+reserve connections at once, at most perClient of them
// from one remote IP. Accept takes a slot before accepting, so the connections over the cap
// wait in the kernel's backlog (the client sees a slow connect, not a reset) until one of the
// open ones closes; a connection over its IP's share is answered 429 and closed at once.
// Those accepted while max are open are health-only (see connLimits.reserve).
type limitListener struct {
	net.Listener
	lim       connLimits
	slots     chan struct{} // one value per open connection; capacity max+reserve
	done      chan struct{} // closed by Close
	closeOnce sync.Once
	mu        struct {
		sync.Mutex
		open  int            // connections accepted and not closed; == len(slots)
		perIP map[string]int // open connections by remote IP; no zero entries
	}
}

func newLimitListener(ln net.Listener, lim connLimits) *limitListener {
	lim.max = max(lim.max, 1)
	lim.perClient = max(lim.perClient, 1)
	lim.reserve = max(lim.reserve, 0)
	l := &limitListener{Listener: ln, lim: lim, slots: make(chan struct{}, lim.max+lim.reserve), done: make(chan struct{})}
	l.mu.perIP = map[string]int{}
	return l
}

func (l *limitListener) Accept() (net.Conn, error) {
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
		if l.mu.perIP[ip] >= l.lim.perClient {
			l.mu.Unlock()
			<-l.slots
			refuseConn(c, l.lim.perClient)
			continue
		}
		l.mu.perIP[ip]++
		l.mu.open++
		healthOnly := l.mu.open > l.lim.max
		l.mu.Unlock()
		return &serverConn{Conn: c, l: l, ip: ip, healthOnly: healthOnly}, nil
	}
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	l.mu.open--
	if l.mu.perIP[ip]--; l.mu.perIP[ip] <= 0 {
		delete(l.mu.perIP, ip)
	}
	l.mu.Unlock()
	<-l.slots
}

// usage returns the open connections and those of ip.
func (l *limitListener) usage(ip string) (open, fromIP int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.open, l.mu.perIP[ip]
}

func (l *limitListener) Close() error {
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
	l          *limitListener
	ip         string
	healthOnly bool // accepted into the reserve: only GET /health and /ready (healthGate)
	once       sync.Once
}

// SetReadDeadline is how net/http arms its wait for a request's head; see clampReadDeadline.
func (c *serverConn) SetReadDeadline(t time.Time) error {
	open, _ := c.l.usage(c.ip)
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
	if r, ok := rewritePreHandlerError(b, c.l.lim.maxHeaderBytes); ok {
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

// connContext is http.Server.ConnContext: it marks the requests of a health-only connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*serverConn); ok && sc.healthOnly {
		return context.WithValue(ctx, healthOnlyKey{}, true)
	}
	return ctx
}

// healthGate serves a health-only connection's GET /health and /ready and answers anything
// else on it 503 in the API's error shape, closing it: the reserve is for probes, so that
// they are answered while clients hold every other connection.
func healthGate(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Value(healthOnlyKey{}) == nil || r.Method == http.MethodGet && (r.URL.Path == "/health" || r.URL.Path == "/ready") {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		e := api.Unavailable("this server holds all the connections it takes (--max-connections); this one, from the reserve kept for /health, serves only GET /health and /ready; retry")
		e.Code = "connection_limit"
		writeError(w, e)
	})
}

// openConnections is the connections Serve's listener holds (0 before Serve).
func (s *Server) openConnections() int {
	open, _ := s.connectionsFrom("")
	return open
}

// connectionsFrom is the connections Serve's listener holds, and those of ip.
func (s *Server) connectionsFrom(ip string) (open, fromIP int) {
	if l := s.listener.Load(); l != nil {
		return l.usage(ip)
	}
	return 0, 0
}
