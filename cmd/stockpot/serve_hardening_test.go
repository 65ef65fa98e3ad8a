package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serveReal runs inst's server the way cmdServe does (Serve on a TCP listener, with its
// timeouts, connection limit and drain), on a loopback port, and returns the base URL.
func serveReal(t *testing.T, inst *instance) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- inst.server.ServeHandler(ctx, ln, inst.handler(ctx)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// rawPost writes one HTTP/1.1 POST with a JSON body on conn.
func rawPost(conn net.Conn, path string, body any, hdr ...string) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: stockpot\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, len(b))
	for i := 0; i+1 < len(hdr); i += 2 {
		req += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	_, err = conn.Write(append([]byte(req+"\r\n"), b...))
	return err
}

// requestsTotal sums stockpot_requests_total over its status labels.
func requestsTotal(m map[string]float64) float64 {
	n := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, "stockpot_requests_total{") {
			n += v
		}
	}
	return n
}

// waitIdle polls /metrics until want more requests have ended than in before, none runs or
// waits, and no KV block is referenced (cached blocks, unreferenced, do not count). Its
// deadline is a watchdog only: the caller checks how the requests ended (cancelled by the
// engine, not run to their 1500 tokens), which does not depend on how long it took.
func waitIdle(t *testing.T, base string, before map[string]float64, want int, what string) map[string]float64 {
	t.Helper()
	const watchdog = 3 * time.Minute
	deadline := time.Now().Add(watchdog)
	for {
		m := scrape(t, base)
		ended := requestsTotal(m) - requestsTotal(before)
		running, waiting := m["stockpot_requests_running"], m["stockpot_requests_waiting"]
		used := m[`stockpot_kv_cache_usage_bytes{tier="device"}`]
		if ended == float64(want) && running == 0 && waiting == 0 && used == 0 {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v later %v of %d requests ended, %v running, %v waiting, %v KV bytes in use",
				what, watchdog, ended, want, running, waiting, used)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeDisconnectBurst: streaming clients that all hang up right after sending their
// request, 10 and then 64 at once, with one shared prompt and with distinct prompts. Every
// request must be cancelled and free its blocks; left running, each would generate 1500 tokens
// for nobody (issue 17, defect 3).
func TestServeDisconnectBurst(t *testing.T) {
	inst, _ := newTestInstance(t, func(o *serveOptions) { o.engine.KVMemory = 64 << 20 })
	base := serveReal(t, inst)
	for _, n := range []int{10, 64} {
		for _, shared := range []bool{true, false} {
			name := fmt.Sprintf("%d clients, shared prompt %v", n, shared)
			conns := make([]net.Conn, n)
			for i := range conns {
				c, err := net.Dial("tcp", base[len("http://"):])
				if err != nil {
					t.Fatal(err)
				}
				conns[i] = c
			}
			before := scrape(t, base)
			errs := make(chan error, n)
			for i, c := range conns {
				prompt := longText(1200)
				if !shared {
					prompt = fmt.Sprintf("Client %d of %d. %s", i, n, prompt)
				}
				go func() {
					err := rawPost(c, "/v1/completions", map[string]any{
						"prompt": prompt, "max_tokens": 1500, "ignore_eos": true, "stream": true,
					})
					c.Close()
					errs <- err
				}()
			}
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			after := waitIdle(t, base, before, n, name)
			if d := after[`stockpot_requests_total{status="499"}`] - before[`stockpot_requests_total{status="499"}`]; d != float64(n) {
				t.Errorf("%s: %v requests counted as client gone (499), want %d", name, d, n)
			}
			// Every one was cancelled by the engine: none ran on to its 1500 tokens for nobody.
			const cancelled = "stockpot_engine_requests_cancelled_total"
			if d := after[cancelled] - before[cancelled]; d != float64(n) {
				t.Errorf("%s: the engine cancelled %v requests, want %d", name, d, n)
			}
			if d := after[`stockpot_requests_total{status="200"}`] - before[`stockpot_requests_total{status="200"}`]; d != 0 {
				t.Errorf("%s: %v requests answered 200 to clients that were gone", name, d)
			}
		}
	}
	// The server still serves, and the cache is intact.
	if code, out := post(t, base+"/v1/completions", map[string]any{"prompt": "after the burst", "max_tokens": 2}); code != 200 {
		t.Errorf("after the burst: %d %s", code, out)
	}
}

// TestServeKVEventsNeedKey: the block events (every block hash of every tenant) need the
// events key, as a bearer token (the router's --backend-events-key) or x-api-key, and an API
// key gets a 403; with --metrics-key, /metrics needs it.
func TestServeKVEventsNeedKey(t *testing.T) {
	_, ts := newTestInstance(t, func(o *serveOptions) {
		o.server.APIKeys, o.server.EventsKeys = []string{"sekrit"}, []string{"ev"}
		o.server.MetricsKey = "scrape"
	})
	get := func(path string, hdr ...string) (int, string) {
		req, err := http.NewRequest("GET", ts.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/v1/kv-events/snapshot", "/v1/kv-events?since=0"} {
		if code, body := get(path); code != 401 || !strings.Contains(body, `"type":"authentication_error"`) {
			t.Errorf("%s without a key: %d %s", path, code, body)
		}
		if code, _ := get(path, "Authorization", "Bearer wrong"); code != 401 {
			t.Errorf("%s with a wrong key: %d", path, code)
		}
	}
	if code, body := get("/v1/kv-events/snapshot", "Authorization", "Bearer sekrit"); code != 403 || !strings.Contains(body, `"type":"permission_error"`) {
		t.Errorf("snapshot with the API key: %d %s, want 403", code, body)
	}
	if code, body := get("/v1/kv-events/snapshot", "Authorization", "Bearer ev"); code != 200 || !strings.Contains(body, `"identity"`) {
		t.Errorf("snapshot with the key: %d %s", code, body)
	}
	if code, _ := get("/v1/kv-events/snapshot", "X-Api-Key", "ev"); code != 200 {
		t.Errorf("snapshot with x-api-key: %d", code)
	}
	if code, _ := get("/metrics"); code != 401 {
		t.Errorf("/metrics without the metrics key: %d", code)
	}
	if code, body := get("/metrics", "Authorization", "Bearer scrape"); code != 200 || !strings.Contains(body, "stockpot_requests_running") {
		t.Errorf("/metrics with the metrics key: %d", code)
	}
}

// TestServeBadInputKeepsCache: each absurd input is a 400 (431 for the header) in the API's
// error shape naming the field; a huge prompt is refused without being tokenized to the end;
// the server keeps serving and the cache is intact (issue 17, defect 7).
func TestServeBadInputKeepsCache(t *testing.T) {
	inst, _ := newTestInstance(t, nil)
	base := serveReal(t, inst)
	warm := map[string]any{"prompt": longText(2000), "max_tokens": 2, "temperature": 0}
	cachedTokens := func() int {
		code, out := post(t, base+"/v1/completions", warm)
		var r struct{ Usage apiUsage }
		if code != 200 || json.Unmarshal(out, &r) != nil || r.Usage.PromptTokensDetails == nil {
			t.Fatalf("warm prompt: %d %s", code, out)
		}
		return *r.Usage.PromptTokensDetails.CachedTokens
	}
	cachedTokens()
	want := cachedTokens()
	if want == 0 {
		t.Fatal("the warm prompt is not cached")
	}
	huge := strings.Repeat("stock ", 15<<20/6) // 15 MiB
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		param      string
	}{
		{"15 MiB prompt", "/v1/completions", map[string]any{"prompt": huge}, "prompt"},
		{"15 MiB chat", "/v1/chat/completions", map[string]any{"messages": []map[string]any{{"role": "user", "content": huge}}}, "messages"},
		{"8 MiB tokenize", "/tokenize", map[string]any{"prompt": huge[:8<<20]}, "prompt"},
		{"empty stop", "/v1/completions", map[string]any{"prompt": "x", "stop": []string{""}}, "stop"},
		{"top_k 1e12", "/v1/completions", map[string]any{"prompt": "x", "top_k": int64(1e12)}, "top_k"},
		{"1 MB cache_salt", "/v1/completions", map[string]any{"prompt": "x", "cache_salt": strings.Repeat("s", 1<<20)}, "cache_salt"},
	} {
		code, out := post(t, base+tc.path, tc.body)
		var e struct {
			Error struct {
				Message, Type string
				Param         *string
			}
		}
		if err := json.Unmarshal(out, &e); code != 400 || err != nil || e.Error.Param == nil || *e.Error.Param != tc.param {
			t.Errorf("%s: %d %.300s, want 400 naming %s", tc.name, code, out, tc.param)
		}
	}
	c, err := net.Dial("tcp", base[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("h", 2<<20))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 431 || !strings.Contains(string(b), `"code":"request_header_fields_too_large"`) {
		t.Errorf("2 MB header: %d %s", resp.StatusCode, b)
	}
	if got := cachedTokens(); got != want {
		t.Errorf("after the bad inputs the warm prompt has %d cached tokens, want %d", got, want)
	}
}
