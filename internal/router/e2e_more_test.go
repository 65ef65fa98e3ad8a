package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"stockpot/internal/syncbuf"
)

// watchdog bounds a wait on a state that must come: it only turns a hang into a failure with
// a message, far beyond what the slowest machine needs (no outcome depends on it).
const watchdog = 3 * time.Minute

// testRemoteTimeout is the replicas' --remote-call-timeout where a test needs every Redis call
// to succeed: the default (250 ms) fails calls that a busy machine makes slow, and the tests
// that count restored tokens would then count fewer.
const testRemoteTimeout = "1m"

// waitUntil polls cond until it holds (or the watchdog fires).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(watchdog)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", watchdog, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mirrors reports whether b's index holds exactly the replica's snapshot.
func mirrors(b *Backend, replicaURL string) bool {
	resp, err := http.Get(replicaURL + "/v1/kv-events/snapshot")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var s struct {
		Seq    uint64 `json:"seq"`
		Blocks []struct {
			Hash string `json:"hash"`
		} `json:"blocks"`
	}
	if json.NewDecoder(resp.Body).Decode(&s) != nil {
		return false
	}
	if b.events.Stats().Seq != s.Seq || b.index.Len() != len(s.Blocks) {
		return false
	}
	b.index.mu.RLock()
	defer b.index.mu.RUnlock()
	for _, bl := range s.Blocks {
		found := false
		for h := range b.index.mu.blocks {
			if h.String() == bl.Hash {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// lineDropper drops the next `drop` event lines of an event stream.
type lineDropper struct {
	r       *bufio.Reader
	c       io.Closer
	drop    *atomic.Int64
	dropped *atomic.Int64
	pending []byte
}

func (l *lineDropper) Read(p []byte) (int, error) {
	for len(l.pending) == 0 {
		line, err := l.r.ReadBytes('\n')
		if len(line) > 0 && bytes.Contains(line, []byte(`"type":"event"`)) && l.drop.Load() > 0 {
			l.drop.Add(-1)
			l.dropped.Add(1)
			line = nil
		}
		l.pending = line
		if err != nil && len(l.pending) == 0 {
			return 0, err
		}
	}
	n := copy(p, l.pending)
	l.pending = l.pending[n:]
	return n, nil
}

func (l *lineDropper) Close() error { return l.c.Close() }

func postCompletion(t *testing.T, base, prompt string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 2})
	resp, err := http.Post(base+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
	}
}

// TestEventsDroppedRealReplica: events lost between a real replica and the
// router are detected (sequence gap), the router resyncs from the snapshot,
// and its index converges to the replica's block set.
func TestEventsDroppedRealReplica(t *testing.T) {
	rs := startReplicas(t, 1)
	u, _ := url.Parse(rs[0].url)
	var drop, dropped atomic.Int64
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.URL.Path == "/v1/kv-events" {
			resp.Body = &lineDropper{r: bufio.NewReader(resp.Body), c: resp.Body, drop: &drop, dropped: &dropped}
		}
		return nil
	}
	lossy := httptest.NewServer(rp)
	t.Cleanup(lossy.Close)
	rt, front := startRouter(t, "kv-aware", []*replica{{url: lossy.URL}}, nil)
	b := rt.backends()[0]
	rng := rand.New(rand.NewPCG(5, 5))
	postCompletion(t, front, "Dropped events one. "+words(rng, 80))
	waitUntil(t, "index to mirror the replica", func() bool { return mirrors(b, rs[0].url) })
	before := b.events.Stats()
	drop.Store(2)
	postCompletion(t, front, "Dropped events two. "+words(rng, 80))
	postCompletion(t, front, "Dropped events three. "+words(rng, 80))
	waitUntil(t, "resync after the gap", func() bool {
		return b.events.Stats().Resyncs > before.Resyncs && mirrors(b, rs[0].url)
	})
	st := b.events.Stats()
	t.Logf("dropped %d event lines: gaps %d, resyncs %d→%d, index %d blocks mirrors the replica",
		dropped.Load(), st.Gaps, before.Resyncs, st.Resyncs, b.index.Len())
	if st.Gaps == 0 || dropped.Load() == 0 {
		t.Fatalf("no gap detected: %+v (dropped %d)", st, dropped.Load())
	}
}

// TestRouteCommand runs `stockpot route` itself: env-backed flags,
// membership at run time over HTTP, health checks taking a dead backend out
// and bringing it back, and the pass-through endpoints.
func TestRouteCommand(t *testing.T) {
	rs := startReplicas(t, 2)
	addr := freeAddr(t)
	cmd := exec.Command(binPath, "route", "--backend", rs[0].url, "--addr", addr, "--health-interval", "200ms")
	cmd.Env = append(os.Environ(), "STOCKPOT_POLICY=prefix", "STOCKPOT_ADMIN_KEY="+adminKey)
	admin := []string{"Authorization", "Bearer " + adminKey}
	log := &syncbuf.Buffer{} // read while the process writes
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	waitUntil(t, "router health", func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	type backends struct {
		Policy   string          `json:"policy"`
		Backends []BackendStatus `json:"backends"`
	}
	get := func() backends {
		code, body := call(t, "GET", base+"/backends", "", admin...)
		var out backends
		if err := json.Unmarshal([]byte(body), &out); err != nil || code != 200 {
			t.Fatalf("GET /backends: HTTP %d %s", code, body)
		}
		return out
	}
	if code, body := call(t, "GET", base+"/backends", ""); code != http.StatusUnauthorized || strings.Contains(body, rs[0].url) {
		t.Fatalf("GET /backends without the admin key: HTTP %d %s", code, body)
	}
	if bs := get(); bs.Policy != "prefix" || len(bs.Backends) != 1 {
		t.Fatalf("GET /backends: %+v (want policy prefix from STOCKPOT_POLICY, 1 backend)\n%s", bs, log.String())
	}
	code, body := call(t, "POST", base+"/backends", fmt.Sprintf(`{"url":%q}`, rs[1].url), admin...)
	if code != http.StatusCreated {
		t.Fatalf("POST /backends: HTTP %d %s", code, body)
	}
	var added struct{ ID string }
	_ = json.Unmarshal([]byte(body), &added)
	if bs := get(); len(bs.Backends) != 2 {
		t.Fatalf("after add: %+v", bs)
	}
	// The API is open (no --api-key); /metrics takes the admin key once one is configured.
	if code, _ := call(t, "GET", base+"/v1/models", ""); code != 200 {
		t.Fatalf("GET /v1/models: HTTP %d", code)
	}
	if code, _ := call(t, "GET", base+"/metrics", "", admin...); code != 200 {
		t.Fatalf("GET /metrics with the admin key: HTTP %d", code)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	postCompletion(t, base, "Route command. "+words(rng, 30))

	// Health: a dead backend goes down, requests still succeed, and it
	// comes back when it returns.
	id0 := ""
	for _, b := range get().Backends {
		if b.URL == rs[0].url {
			id0 = b.ID
		}
	}
	rs[0].kill()
	waitUntil(t, "dead backend marked down", func() bool {
		for _, b := range get().Backends {
			if b.ID == id0 {
				return b.State == "down"
			}
		}
		return false
	})
	for i := range 4 {
		postCompletion(t, base, fmt.Sprintf("While down %d. %s", i, words(rng, 20)))
	}
	rs[0].start()
	rs[0].waitHealthy()
	waitUntil(t, "backend back up", func() bool {
		for _, b := range get().Backends {
			if b.ID == id0 {
				return b.State == "healthy"
			}
		}
		return false
	})
	if code, body := call(t, "DELETE", base+"/backends/"+added.ID, "", admin...); code != http.StatusNoContent {
		t.Fatalf("DELETE /backends/%s: HTTP %d %s", added.ID, code, body)
	}
	if bs := get(); len(bs.Backends) != 1 || bs.Backends[0].ID != id0 {
		t.Fatalf("after delete: %+v", bs)
	}
	if !strings.Contains(log.String(), "membership call accepted") || strings.Contains(log.String(), adminKey) {
		t.Fatalf("membership changes not logged, or logged with the key:\n%s", log.String())
	}
}

// TestBackendKeyRealReplica: replicas behind `serve --api-key --events-key`
// and a router that checks its own client keys. The kv-aware policy's event
// subscriptions (the replica's events key is the router's backend key, the
// default of --backend-events-key) and tokenize calls work with
// --backend-key, completions
// succeed with the client key (which the replica would refuse), and the
// health checks keep the replica up.
func TestBackendKeyRealReplica(t *testing.T) {
	rs := startReplicas(t, 2, "--api-key", backendKey, "--events-key", backendKey)
	if code, _ := call(t, "POST", rs[0].url+"/v1/completions", `{"prompt":"x","max_tokens":1}`, "Authorization", "Bearer "+clientKey); code != 401 {
		t.Fatalf("the replica takes the client key (HTTP %d): the test proves nothing", code)
	}
	rt, front := startRouter(t, "kv-aware", rs, func(c *Config) {
		c.APIKeys, c.BackendKey = []string{clientKey}, backendKey
	}) // waits for both event streams to sync: snapshot and stream carry the key
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 3 {
		prompt := fmt.Sprintf("Backend key %d. %s", i, words(rng, 40))
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 2})
		if code, b := call(t, "POST", front+"/v1/completions", string(body), "Authorization", "Bearer "+clientKey); code != 200 {
			t.Fatalf("completion %d: HTTP %d %s", i, code, b)
		}
		chat := `{"messages":[{"role":"user","content":` + strconv.Quote(prompt) + `}],"max_tokens":2}`
		if code, b := call(t, "POST", front+"/v1/chat/completions", chat, "X-Api-Key", clientKey); code != 200 {
			t.Fatalf("chat %d: HTTP %d %s", i, code, b)
		}
	}
	if code, _ := call(t, "POST", front+"/v1/completions", `{"prompt":"x"}`); code != 401 {
		t.Fatalf("no client key: HTTP %d, want 401", code)
	}
	ok, failed := 0.0, 0.0
	for _, mf := range mustGather(t, rt) {
		if mf.GetName() == "stockpot_router_tokenize_seconds" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					switch l.GetValue() {
					case "ok":
						ok += float64(m.GetHistogram().GetSampleCount())
					case "error":
						failed += float64(m.GetHistogram().GetSampleCount())
					}
				}
			}
		}
	}
	if ok == 0 || failed != 0 {
		t.Fatalf("router tokenize calls: %v ok, %v failed (want all ok behind --api-key)", ok, failed)
	}
	// Health checks and the event stream carry the backend key: every backend is (or
	// becomes) healthy and synced; with a wrong key it never would.
	waitUntil(t, "every backend healthy and synced behind --api-key", func() bool {
		for _, b := range rt.Backends() {
			if b.State != "healthy" || !b.Events.Synced {
				return false
			}
		}
		return true
	})
}

// TestRouteCommandKeys runs `stockpot route` with its key files in front of
// a replica behind --api-key: clients need the client key, the replica gets
// the backend key, membership needs the admin key, and the limit flags
// parse.
func TestRouteCommandKeys(t *testing.T) {
	rs := startReplicas(t, 1, "--api-key", backendKey)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	addr := freeAddr(t)
	cmd := exec.Command(binPath, "route", "--backend", rs[0].url, "--addr", addr, "--policy", "prefix",
		"--api-key-file", write("client", "\n"+clientKey+"\nsecond-client-key\n"),
		"--admin-key-file", write("admin", adminKey+"\n"),
		"--backend-key-file", write("backend", backendKey+"\n"),
		"--idle-timeout", "30s", "--read-timeout", "30s", "--max-connections", "64")
	log := &syncbuf.Buffer{} // read while the process writes
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	waitUntil(t, "router health", func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	for _, k := range []string{clientKey, "second-client-key"} {
		if code, b := call(t, "POST", base+"/v1/completions", `{"prompt":"route keys","max_tokens":2}`, "Authorization", "Bearer "+k); code != 200 {
			t.Fatalf("completion with a client key from the file: HTTP %d %s\n%s", code, b, log.String())
		}
	}
	if code, _ := call(t, "POST", base+"/v1/completions", `{"prompt":"x"}`, "Authorization", "Bearer "+backendKey); code != 401 {
		t.Fatalf("the backend key works as a client key on the router: HTTP %d", code)
	}
	if code, _ := call(t, "POST", base+"/backends", `{"url":"http://127.0.0.1:1"}`, "Authorization", "Bearer "+clientKey); code != 403 {
		t.Fatalf("POST /backends with a client key: HTTP %d, want 403", code)
	}
	if code, _ := call(t, "GET", base+"/backends", "", "Authorization", "Bearer "+adminKey); code != 200 {
		t.Fatalf("GET /backends with the admin key: HTTP %d", code)
	}
	if strings.Contains(log.String(), clientKey) || strings.Contains(log.String(), adminKey) || strings.Contains(log.String(), backendKey) {
		t.Fatalf("a key reached the log:\n%s", log.String())
	}
}
