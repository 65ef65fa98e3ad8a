package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const okChunk = "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n"

// slowStreamBackend streams n events, one per every, then [DONE].
func slowStreamBackend(t *testing.T, n int, every time.Duration) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range n {
			io.WriteString(w, okChunk)
			w.(http.Flusher).Flush()
			time.Sleep(every)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	return s
}

// dyingStreamBackend writes the given stream bytes, then ends by mode:
// "close" (close the TCP connection mid-body), "reset" (RST), "nodone"
// (end the body cleanly without [DONE]). It dies when die is closed (so a
// test can first see the events reach the client).
func dyingStreamBackend(t *testing.T, written, mode string, die <-chan struct{}) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, written)
		w.(http.Flusher).Flush()
		if mode == "nodone" {
			return
		}
		<-die
		c, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			panic(err)
		}
		if mode == "reset" {
			_ = c.(*net.TCPConn).SetLinger(0)
		}
		c.Close()
	}))
	t.Cleanup(s.Close)
	return s
}

// sseEvents splits a stream into its data payloads, and reports whether it
// ended exactly at an event boundary.
func sseEvents(b string) (data []string, clean bool) {
	for _, ev := range strings.SplitAfter(b, "\n\n") {
		if ev == "" {
			continue
		}
		if !strings.HasSuffix(ev, "\n\n") {
			return data, false
		}
		data = append(data, strings.TrimPrefix(strings.TrimSuffix(ev, "\n\n"), "data: "))
	}
	return data, true
}

// TestStreamFailsCleanly: a backend that dies mid-stream, after the first
// bytes reached the client, leaves the client a clean end: the complete
// events so far, an OpenAI error event, [DONE]; never half an event. The
// failure is counted by backend and reason.
func TestStreamFailsCleanly(t *testing.T) {
	for _, c := range []struct {
		mode, written, reason string
		events                int // complete events the client gets before the error
	}{
		{"close", okChunk + okChunk, "cut", 2},
		{"reset", okChunk + okChunk, "cut", 2},
		{"close", okChunk + okChunk + "data: {\"choices\":[{\"ind", "cut", 2}, // died mid-event
		{"nodone", okChunk + okChunk, "incomplete", 2},
	} {
		t.Run(fmt.Sprintf("%s/%d", c.mode, len(c.written)), func(t *testing.T) {
			die := make(chan struct{})
			be := dyingStreamBackend(t, c.written, c.mode, die)
			rt, front, _ := authRouter(t, nil, be.URL)
			resp, err := http.Post(front+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			// The complete events reach the client before the backend dies.
			first := make([]byte, c.events*len(okChunk))
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != strings.Repeat(okChunk, c.events) {
				t.Fatalf("first events: %q, %v", first, err)
			}
			close(die)
			rest, err := io.ReadAll(resp.Body)
			b := append(first, rest...)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("HTTP %d, read error %v (want a stream that ends cleanly): %q", resp.StatusCode, err, b)
			}
			data, clean := sseEvents(string(b))
			if !clean || len(data) != c.events+2 || data[len(data)-1] != "[DONE]" {
				t.Fatalf("stream %q: want %d events, an error event and [DONE], ending at an event boundary", b, c.events)
			}
			for _, d := range data[:c.events] {
				if !json.Valid([]byte(d)) {
					t.Fatalf("half an event reached the client: %q", d)
				}
			}
			var e struct {
				Error struct{ Message, Type string } `json:"error"`
			}
			if json.Unmarshal([]byte(data[c.events]), &e) != nil || e.Error.Type != "server_error" || !strings.Contains(e.Error.Message, "mid-stream") {
				t.Fatalf("error event %q", data[c.events])
			}
			id := rt.Backends()[0].ID
			if n := counter(t, rt, "stockpot_router_stream_failures_total", map[string]string{"backend": id, "reason": c.reason}); n != 1 {
				t.Fatalf("stockpot_router_stream_failures_total{backend=%s,reason=%s} = %v, want 1", id, c.reason, n)
			}
		})
	}
}

// TestStreamRetriedBeforeFirstEvent: a backend that dies inside its first
// event sent the client nothing yet, so the request is retried elsewhere.
func TestStreamRetriedBeforeFirstEvent(t *testing.T) {
	dead := make(chan struct{})
	close(dead)
	bad := dyingStreamBackend(t, "data: {\"choices\":[{\"ind", "close", dead)
	good := slowStreamBackend(t, 2, 0)
	rt, front, _ := authRouter(t, nil, bad.URL, good.URL)
	for i := range 4 { // round-robin: the bad one comes up first at least once
		resp, err := http.Post(front+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if data, clean := sseEvents(string(b)); !clean || len(data) != 3 || data[2] != "[DONE]" {
			t.Fatalf("request %d: %q, want the good backend's whole stream", i, b)
		}
	}
	if n := counter(t, rt, "stockpot_router_retries_total", map[string]string{"reason": "connect"}); n < 1 {
		t.Fatalf("no retry counted (%v)", n)
	}
	if n := counter(t, rt, "stockpot_router_stream_failures_total", nil); n != 0 {
		t.Fatalf("stream failures %v, want 0: the retry hid it", n)
	}
}

// counter sums the series of name whose labels include want.
func counter(t *testing.T, rt *Router, name string, want map[string]string) float64 {
	t.Helper()
	sum := 0.0
	for _, mf := range mustGather(t, rt) {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// FuzzSSEBoundary checks sseBoundary against its definition: p[:k] ends an
// event (or k is 0) and no event ends in p[k:].
func FuzzSSEBoundary(f *testing.F) {
	for _, s := range []string{"", okChunk, okChunk + "data: {\"x", "data: a\r\n\r\ndata: b\n", "\n\n\r\n", "\n\r\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		k := sseBoundary(p)
		ends := func(b []byte) bool {
			return strings.HasSuffix(string(b), "\n\n") || strings.HasSuffix(string(b), "\n\r\n")
		}
		if k < 0 || k > len(p) || k > 0 && !ends(p[:k]) {
			t.Fatalf("sseBoundary(%q) = %d: not the end of an event", p, k)
		}
		for j := k + 1; j <= len(p); j++ {
			if ends(p[:j]) {
				t.Fatalf("sseBoundary(%q) = %d, but an event ends at %d", p, k, j)
			}
		}
	})
}
