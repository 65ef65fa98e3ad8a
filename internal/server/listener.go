package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"

	"stockpot/internal/api"
)

// limitListener accepts at most n connections at once. Accept takes a slot before accepting,
// so the connections over the cap wait in the kernel's backlog (the client sees a slow
// connect, not a reset) until one of the open ones closes.
type limitListener struct {
	net.Listener
	slots          chan struct{} // one value per open connection
	done           chan struct{} // closed by Close
	closeOnce      sync.Once
	maxHeaderBytes int // for serverConn
}

func newLimitListener(ln net.Listener, n, maxHeaderBytes int) *limitListener {
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{}), maxHeaderBytes: maxHeaderBytes}
}

func (l *limitListener) Accept() (net.Conn, error) {
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
	return &serverConn{Conn: c, maxHeaderBytes: l.maxHeaderBytes, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// serverConn is one accepted connection: it frees its listener slot once, when closed, and
// gives net/http's own error answers the API's error shape (see rewritePreHandlerError).
type serverConn struct {
	net.Conn
	maxHeaderBytes int
	release        func()
	once           sync.Once
}

func (c *serverConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
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
	if r, ok := rewritePreHandlerError(b, c.maxHeaderBytes); ok {
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
