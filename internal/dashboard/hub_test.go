package dashboard

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// waitFor polls cond until it holds or a generous deadline passes (no timed assertion: the
// deadline only turns a hang into a failure).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (h *Hub) ringLens() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for c := range h.mu.clients {
		c.mu.Lock()
		out = append(out, len(c.mu.ring))
		c.mu.Unlock()
	}
	return out
}

func sumRings(h *Hub) int {
	n := 0
	for _, l := range h.ringLens() {
		n += l
	}
	return n
}

// rawGET opens a connection and sends a GET for the stream without reading anything back: a
// browser that stopped reading (or vanished without a FIN).
func rawGET(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096) // a small window, so the server's writes back up soon
	}
	fmt.Fprintf(c, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
	return c
}

// TestSlowBrowserHoldsNoMemory: a browser that never reads gets at most ClientBuffer events
// held for it, the oldest dropped and counted, while a live browser beside it keeps getting
// the newest; once the stuck connection's write deadline passes its handler ends and
// unsubscribes, and when the last browser leaves the sampler stops.
func TestSlowBrowserHoldsNoMemory(t *testing.T) {
	const buffer = 8
	h := NewHub(Config{ClientBuffer: buffer, WriteTimeout: 300 * time.Millisecond, Interval: time.Hour,
		Sample: func() Event { return Event{Kind: "snapshot", Data: []byte(`{}`)} }})
	defer h.Close()
	mux := http.NewServeMux()
	mux.Handle("/events", h)
	ts := httptest.NewServer(mux)
	defer ts.Close()

	stuck := rawGET(t, ts.Listener.Addr().String())
	defer stuck.Close()
	waitFor(t, "the stuck browser to subscribe", func() bool { return h.Stats().Clients == 1 })
	var stuckClient *client
	h.mu.Lock()
	for c := range h.mu.clients {
		stuckClient = c
	}
	h.mu.Unlock()
	subscribed := func(c *client) bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		_, ok := h.mu.clients[c]
		return ok
	}

	live, err := http.Get(ts.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Body.Close()
	waitFor(t, "the live browser to subscribe", func() bool { return h.Stats().Clients == 2 })
	liveEvents := make(chan int, 1)
	go func() { // the live browser reads everything, as fast as it comes
		lines := bufio.NewScanner(live.Body)
		lines.Buffer(make([]byte, 1<<20), 1<<20)
		n := 0
		for lines.Scan() {
			if strings.HasPrefix(lines.Text(), "event: request") {
				n++
			}
		}
		liveEvents <- n
	}()

	big := []byte(`"` + strings.Repeat("x", 16<<10) + `"`) // 16 KiB: the socket buffers fill fast
	for i := range 2000 {
		h.Publish(Event{Kind: "request", Data: big})
		for _, n := range h.ringLens() {
			if n > buffer {
				t.Fatalf("after %d publishes a ring holds %d events, the bound is %d", i+1, n, buffer)
			}
		}
	}
	if h.Stats().Dropped == 0 {
		t.Error("no event was dropped for the browser that never reads")
	}
	// Once the kernel's socket buffers are full too, the stuck browser's handler blocks in a
	// write until the deadline, then leaves. (Until then it holds nothing: its ring empties
	// into the socket.)
	waitFor(t, "the stuck browser to be dropped", func() bool {
		h.Publish(Event{Kind: "request", Data: big})
		for _, n := range h.ringLens() {
			if n > buffer {
				t.Fatalf("a ring holds %d events, the bound is %d", n, buffer)
			}
		}
		// The stuck one, by identity: on a busy machine the live reader may be descheduled
		// past the write deadline too, and be dropped as well.
		return !subscribed(stuckClient)
	})
	h.Publish(Event{Kind: "request", Data: []byte(`"last"`)})
	waitFor(t, "the live browser to get the last event", func() bool { return h.Stats().Sent > 0 && sumRings(h) == 0 })
	live.Body.Close()
	if n := <-liveEvents; n == 0 {
		t.Error("the live browser got no event")
	}
	waitFor(t, "the live browser to leave", func() bool { return h.Stats().Clients == 0 })
	h.mu.Lock()
	sampling := h.mu.stop != nil
	h.mu.Unlock()
	if sampling {
		t.Error("the sampler still runs with no browser")
	}
}

// TestHelloThenLive: a browser gets the hello events first, then what is published, in SSE
// framing.
func TestHelloThenLive(t *testing.T) {
	h := NewHub(Config{Hello: func() []Event { return []Event{{Kind: "snapshot", Data: []byte(`{"n":1}`)}} }})
	defer h.Close()
	ts := httptest.NewServer(h)
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	waitFor(t, "subscription", func() bool { return h.Stats().Clients == 1 })
	h.Publish(Event{Kind: "request", Data: []byte("{\"a\":\n2}")})
	sc := bufio.NewScanner(resp.Body)
	var got []string
	for len(got) < 6 && sc.Scan() {
		if sc.Text() != "" {
			got = append(got, sc.Text())
		}
	}
	want := []string{": stockpot dashboard", "event: snapshot", `data: {"n":1}`, "event: request", `data: {"a":`, "data: 2}"}
	if strings.Join(got[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Errorf("stream:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestTooManyBrowsers: past MaxClients the answer is a 503, and nothing is held.
func TestTooManyBrowsers(t *testing.T) {
	h := NewHub(Config{MaxClients: 1})
	defer h.Close()
	ts := httptest.NewServer(h)
	defer ts.Close()
	a, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Body.Close()
	waitFor(t, "subscription", func() bool { return h.Stats().Clients == 1 })
	b, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	b.Body.Close()
	if b.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("second browser: status %d, want 503", b.StatusCode)
	}
}
