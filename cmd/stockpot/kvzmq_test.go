package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"stockpot/internal/router"
	"stockpot/internal/vllmevents"
)

// TestServeVLLMEventsPython: a live replica's --kv-events-zmq stream, read by Debian's
// python3-zmq and python3-msgpack as vLLM's dataclasses define it (maps tagged by type, every
// field, unsigned 64-bit hashes, token_ids of len(block_hashes)×block_size, parents stored
// before), the topic and sequence frames, and the replay socket (testdata/vllm_kv_events_check.py).
func TestServeVLLMEventsPython(t *testing.T) {
	const py = "/usr/bin/python3" // Debian's own, with python3-zmq and python3-msgpack
	if err := exec.Command(py, "-c", "import zmq, msgpack").Run(); err != nil {
		t.Fatalf("Debian's python3-zmq and python3-msgpack are needed (`make test` installs them): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topic := "kv@127.0.0.1:8000@tiny"
	replay := "tcp://" + freePort(t)
	cmd := exec.CommandContext(ctx, py, "testdata/vllm_kv_events_check.py", topic, replay)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	var port int
	if !lines.Scan() {
		t.Fatalf("no port from the checker: %s", stderr.String())
	}
	if _, err := fmt.Sscanf(lines.Text(), "PORT %d", &port); err != nil {
		t.Fatalf("checker said %q", lines.Text())
	}
	// The replica connects to the checker's SUB (endpoint without a wildcard: connect).
	_, ts := newTestInstance(t, func(o *serveOptions) {
		o.kvZMQ = vllmevents.PublisherConfig{Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port), Replay: replay, Topic: topic}
	})
	done := make(chan string, 1)
	go func() {
		var last string
		for lines.Scan() {
			last = lines.Text()
		}
		done <- last
	}()
	// A PUB drops what it sends before the subscriber is connected: new prompts until the
	// checker has what it needs.
	for i := 0; ; i++ {
		select {
		case last := <-done:
			err := cmd.Wait()
			if err != nil || !strings.HasPrefix(last, "OK ") {
				t.Fatalf("checker: %q, %v; %s", last, err, stderr.String())
			}
			t.Log(last)
			return
		default:
		}
		completion(t, ts, map[string]any{"prompt": fmt.Sprintf("request %d: %s", i, longText(100+i%7)), "max_tokens": 1})
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRouteVLLMEventsFromServe: two replicas publishing with --kv-events-zmq to a router's
// --kv-events-listen; a prompt warmed on one replica directly is routed to it by its events
// alone (kv-aware), and the replica's usage shows the hit.
func TestRouteVLLMEventsFromServe(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := router.DefaultConfig()
	cfg.Registerer, cfg.Gatherer, cfg.KVEventsListen = reg, reg, "tcp://127.0.0.1:0"
	rt, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	var urls []string
	for i := range 2 {
		addr := freePort(t) // the replica's address, named in its topic before it listens
		_, ts := newTestInstance(t, func(o *serveOptions) {
			o.kvZMQ = vllmevents.PublisherConfig{Endpoint: "tcp://" + rt.KVEventsAddr(), Topic: "kv@" + addr + "@tiny"}
		})
		front := &http.Server{Handler: httputil.NewSingleHostReverseProxy(mustURL(t, ts.URL))}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		go front.Serve(ln)
		t.Cleanup(func() { front.Close() })
		urls = append(urls, "http://"+addr)
		if _, err := rt.AddBackend(urls[i]); err != nil {
			t.Fatal(err)
		}
	}
	rts := httptest.NewServer(rt.Handler())
	defer rts.Close()
	long := longText(300)
	indexed := func(u string) int {
		for _, b := range rt.Backends() {
			if b.URL == u {
				return b.IndexBlocks
			}
		}
		return -1
	}
	// A PUB drops what it sends before the router's SUB is connected: warm until indexed.
	deadline := time.Now().Add(time.Minute)
	for i := 0; indexed(urls[1]) == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatal("replica 1's blocks never reached the router")
		}
		postRaw(t, urls[1], map[string]any{"prompt": fmt.Sprintf("%d %s", i, long), "max_tokens": 1})
		time.Sleep(50 * time.Millisecond)
	}
	snap := func() int {
		resp, err := http.Get(urls[1] + "/v1/kv-events/snapshot")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sn struct{ Blocks []any }
		if err := json.NewDecoder(resp.Body).Decode(&sn); err != nil {
			t.Fatal(err)
		}
		return len(sn.Blocks)
	}
	s0, n0 := snap(), indexed(urls[1])
	postRaw(t, urls[1], map[string]any{"prompt": long + " warm", "max_tokens": 1})
	s1 := snap()
	if s1-s0 < 4 {
		t.Fatalf("warming stored %d blocks", s1-s0)
	}
	for indexed(urls[1])-n0 < s1-s0 {
		if time.Now().After(deadline) {
			t.Fatalf("router indexed %d of the %d warmed blocks", indexed(urls[1])-n0, s1-s0)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 3 {
		u := completion(t, rts, map[string]any{"prompt": long + " warm and then some", "max_tokens": 1})
		if u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens == nil || *u.PromptTokensDetails.CachedTokens < 64 {
			t.Fatalf("routed request missed the warmed replica: usage %+v", u)
		}
	}
	for _, b := range rt.Backends() {
		if want := map[bool]uint64{true: 3, false: 0}[b.URL == urls[1]]; b.Requests != want {
			t.Fatalf("backend %s took %d routed requests, want %d", b.URL, b.Requests, want)
		}
	}
}

func postRaw(t *testing.T, base string, body map[string]any) {
	t.Helper()
	if code, b := post(t, base+"/v1/completions", body); code != http.StatusOK {
		t.Fatalf("%d: %s", code, b)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
