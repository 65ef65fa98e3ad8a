package soak

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TCPProxy forwards loopback TCP connections to a target, optionally delaying every chunk
// the target sends back: a slow Redis, as the replicas see it.
type TCPProxy struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds added before each chunk from the target
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// NewTCPProxy listens on a free loopback port and forwards to target.
func NewTCPProxy(target string) (*TCPProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &TCPProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *TCPProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay sets the delay added before each chunk from the target (0: none).
func (p *TCPProxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *TCPProxy) track(c net.Conn, add bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		if p.conns == nil {
			return false
		}
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *TCPProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c, true) {
			c.Close()
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *TCPProxy) serve(c net.Conn) {
	defer p.wg.Done()
	defer p.track(c, false)
	defer c.Close()
	t, err := net.DialTimeout("tcp", p.target, 2*time.Second)
	if err != nil {
		return
	}
	if !p.track(t, true) {
		t.Close()
		return
	}
	defer p.track(t, false)
	defer t.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(t, c); t.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := t.Read(buf)
			if n > 0 {
				if d := time.Duration(p.delay.Load()); d > 0 {
					time.Sleep(d)
				}
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		c.(*net.TCPConn).CloseWrite()
		done <- struct{}{}
	}()
	<-done
	<-done
}

// Close stops the proxy and closes every connection through it.
func (p *TCPProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// EventsProxy is an HTTP reverse proxy in front of one replica, for the router: requests
// pass through, and DropEvents cuts every block-event stream (/v1/kv-events) open through
// it, as a network blip between router and replica would.
type EventsProxy struct {
	srv     *http.Server
	ln      net.Listener
	mu      sync.Mutex
	streams map[*context.CancelFunc]struct{}
	dropped atomic.Int64
}

// NewEventsProxy listens on a free loopback port and forwards to the replica at target
// (a base URL).
func NewEventsProxy(target string) (*EventsProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &EventsProxy{ln: ln, streams: map[*context.CancelFunc]struct{}{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // streams pass as they come
	rp.ErrorLog = discardLogger
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/v1/kv-events") {
			rp.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		p.mu.Lock()
		p.streams[&cancel] = struct{}{}
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			delete(p.streams, &cancel)
			p.mu.Unlock()
			cancel()
		}()
		rp.ServeHTTP(w, r.WithContext(ctx))
	}), ErrorLog: discardLogger}
	go p.srv.Serve(ln)
	return p, nil
}

// URL is the proxy's base URL.
func (p *EventsProxy) URL() string { return "http://" + p.ln.Addr().String() }

// DropEvents cuts the event streams open now and returns how many.
func (p *EventsProxy) DropEvents() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.streams {
		(*c)()
		n++
	}
	p.dropped.Add(int64(n))
	return n
}

// Close stops the proxy.
func (p *EventsProxy) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	p.srv.Shutdown(ctx)
	p.srv.Close()
}
