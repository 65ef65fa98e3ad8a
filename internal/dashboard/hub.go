package dashboard

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Event is one SSE message: Kind is its event name, Data its JSON (one line).
type Event struct {
	Kind string
	Data []byte
}

// Config configures a Hub.
type Config struct {
	// Interval is how often Sample runs while a browser listens. Default 1 s.
	Interval time.Duration
	// Sample, when set, makes the periodic event (usually a "snapshot"). It runs on the hub's
	// one sampling goroutine, never concurrently with itself.
	Sample func() Event
	// Hello, when set, gives the events a new browser gets first (the current snapshot and
	// the recent requests), before anything published after it subscribed.
	Hello func() []Event
	// ClientBuffer is the most events one browser's ring holds; past it the oldest is
	// dropped. Default 64: a minute of snapshots at the default interval, or a burst of
	// requests finishing together.
	ClientBuffer int
	// WriteTimeout bounds each write to a browser; a connection that takes nothing for this
	// long is closed. Default 10 s.
	WriteTimeout time.Duration
	// MaxClients caps the browsers streaming at once (more get a 503). Default 64.
	MaxClients int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Interval: time.Second, ClientBuffer: 64, WriteTimeout: 10 * time.Second, MaxClients: 64}
}

func (c Config) validate() Config {
	d := DefaultConfig()
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.ClientBuffer <= 0 {
		c.ClientBuffer = d.ClientBuffer
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.MaxClients <= 0 {
		c.MaxClients = d.MaxClients
	}
	return c
}

// Hub fans events out to the browsers streaming /dashboard/events.
type Hub struct {
	cfg     Config
	dropped atomic.Uint64
	sent    atomic.Uint64
	mu      struct {
		sync.Mutex
		clients map[*client]struct{} // protected by mu
		stop    chan struct{}        // closes the sampler; nil while none runs
	}
	closed chan struct{}
	once   sync.Once
}

// client is one browser's ring. The hub appends (dropping the oldest when full); the
// browser's handler takes everything queued and writes it.
type client struct {
	notify chan struct{} // capacity 1: "there is something in ring"
	mu     struct {
		sync.Mutex
		ring []Event // protected by mu; len <= cap, the oldest first
	}
}

// HubStats counts the hub's work.
type HubStats struct {
	Clients int
	Sent    uint64 // events written to browsers
	Dropped uint64 // events dropped from full rings (slow browsers)
}

// NewHub returns a hub; Close stops its sampler.
func NewHub(cfg Config) *Hub {
	h := &Hub{cfg: cfg.validate(), closed: make(chan struct{})}
	h.mu.clients = map[*client]struct{}{}
	return h
}

// Close ends every stream and the sampler.
func (h *Hub) Close() { h.once.Do(func() { close(h.closed) }) }

// Stats returns the counters.
func (h *Hub) Stats() HubStats {
	h.mu.Lock()
	n := len(h.mu.clients)
	h.mu.Unlock()
	return HubStats{Clients: n, Sent: h.sent.Load(), Dropped: h.dropped.Load()}
}

// Publish queues ev for every browser. It never blocks: a full ring drops its oldest event.
func (h *Hub) Publish(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.mu.clients {
		h.pushLocked(c, ev)
	}
}

// pushLocked appends ev to c's ring. REQUIRES: h.mu held (so that the ring's order is the
// publish order).
func (h *Hub) pushLocked(c *client, ev Event) {
	c.mu.Lock()
	if len(c.mu.ring) == h.cfg.ClientBuffer {
		// Drop the oldest: shift instead of a circular index, since the handler takes the
		// whole ring at once and ClientBuffer is small.
		copy(c.mu.ring, c.mu.ring[1:])
		c.mu.ring = c.mu.ring[:len(c.mu.ring)-1]
		h.dropped.Add(1)
	}
	c.mu.ring = append(c.mu.ring, ev)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// ErrTooManyClients is the answer past Config.MaxClients.
var ErrTooManyClients = errors.New("dashboard: too many browsers streaming")

// subscribe registers a browser, then puts the hello events ahead of whatever was published
// since. The client is registered before Hello runs, so nothing published while Hello
// gathers its events is lost (it may be in both: the page drops a request it has already
// shown, by its seq); Hello runs outside mu, since it may gather metrics and take its
// owner's locks, which may be held around Publish.
func (h *Hub) subscribe() (*client, error) {
	c := &client{notify: make(chan struct{}, 1)}
	c.mu.ring = make([]Event, 0, h.cfg.ClientBuffer)
	h.mu.Lock()
	if len(h.mu.clients) >= h.cfg.MaxClients {
		h.mu.Unlock()
		return nil, ErrTooManyClients
	}
	h.mu.clients[c] = struct{}{}
	if h.mu.stop == nil && h.cfg.Sample != nil {
		h.mu.stop = make(chan struct{})
		go h.sample(h.mu.stop)
	}
	h.mu.Unlock()
	if h.cfg.Hello != nil {
		hello := h.cfg.Hello()
		c.mu.Lock()
		ring := append(hello, c.mu.ring...)
		if drop := len(ring) - h.cfg.ClientBuffer; drop > 0 {
			ring = ring[drop:] // the oldest go first, as in pushLocked
			h.dropped.Add(uint64(drop))
		}
		c.mu.ring = append(c.mu.ring[:0], ring...)
		c.mu.Unlock()
		if len(ring) > 0 {
			select {
			case c.notify <- struct{}{}:
			default:
			}
		}
	}
	return c, nil
}

func (h *Hub) unsubscribe(c *client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.mu.clients, c)
	if len(h.mu.clients) == 0 && h.mu.stop != nil {
		close(h.mu.stop)
		h.mu.stop = nil
	}
}

// sample runs Config.Sample every Interval until stop (the last browser left) or Close.
func (h *Hub) sample(stop chan struct{}) {
	t := time.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			h.Publish(h.cfg.Sample())
		case <-stop:
			return
		case <-h.closed:
			return
		}
	}
}

// ServeHTTP streams events to one browser until it goes away, a write times out, or the hub
// closes.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	c, err := h.subscribe()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer h.unsubscribe(c)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A comment first, so the browser's EventSource opens at once.
	if !h.write(rc, w, []byte(": stockpot dashboard\n\n")) {
		return
	}
	var buf bytes.Buffer
	var batch []Event
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.closed:
			return
		case <-c.notify:
		}
		c.mu.Lock()
		batch = append(batch[:0], c.mu.ring...)
		clear(c.mu.ring) // hold no event data for a browser beyond its ring
		c.mu.ring = c.mu.ring[:0]
		c.mu.Unlock()
		buf.Reset()
		for _, ev := range batch {
			writeEvent(&buf, ev)
		}
		clear(batch)
		if !h.write(rc, w, buf.Bytes()) {
			return
		}
		h.sent.Add(uint64(len(batch)))
	}
}

// write writes b and flushes it under the write deadline; false: the browser is gone or stuck.
func (h *Hub) write(rc *http.ResponseController, w http.ResponseWriter, b []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// writeEvent writes ev in SSE framing. Data is one line of JSON; any newline in it is split
// into data lines, as the format asks.
func writeEvent(buf *bytes.Buffer, ev Event) {
	if ev.Kind != "" {
		fmt.Fprintf(buf, "event: %s\n", ev.Kind)
	}
	for line := range bytes.SplitSeq(ev.Data, []byte("\n")) {
		buf.WriteString("data: ")
		buf.Write(line)
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
}
