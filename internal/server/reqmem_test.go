package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"stockpot/internal/pipeline"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRequestMemoryBudget: requests whose bodies are still arriving hold their reservation;
// while they hold the whole budget the next request waits, then gets a 503 with Retry-After in
// its dialect's shape; once they finish, the budget is whole again and requests are served.
func TestRequestMemoryBudget(t *testing.T) {
	s, reg := newTestServer(t, newFakeGen("ok"), func(c *Config) {
		c.RequestMemoryBytes = 2 * requestCost(-1, c.MaxBodyBytes)
		c.ReadTimeout = 50 * time.Millisecond // how long the third request waits: no assertion on it
	})
	body := `{"model":"` + testModel + `","prompt":"hi","max_tokens":1}`
	type held struct {
		w    *io.PipeWriter
		done chan int
	}
	var hold []held
	for range 2 { // two chunked bodies (no Content-Length): each reserves the largest body's cost
		pr, pw := io.Pipe()
		req := httptest.NewRequest(http.MethodPost, "/v1/completions", pr)
		req.ContentLength = -1
		req.Header.Set("Content-Type", "application/json")
		h := held{w: pw, done: make(chan int, 1)}
		go func() {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			h.done <- rec.Code
		}()
		hold = append(hold, h)
	}
	for s.reqmem.InUse() != s.reqmem.Capacity() {
		runtime.Gosched()
	}
	for _, path := range []string{"/v1/completions", "/v1/messages"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		want503 := http.StatusServiceUnavailable
		if path == "/v1/messages" {
			want503 = 529 // Anthropic's overloaded_error
		}
		if rec.Code != want503 || rec.Header().Get("Retry-After") == "" {
			t.Fatalf("%s while the budget is held: %d %q (Retry-After %q)", path, rec.Code, rec.Body, rec.Header().Get("Retry-After"))
		}
		want := `"code":"overloaded"`
		if path == "/v1/messages" {
			want = `"type":"overloaded_error"`
		}
		if !strings.Contains(rec.Body.String(), want) || !strings.Contains(rec.Body.String(), "--request-memory") {
			t.Fatalf("%s: body %s, want %s and the flag named", path, rec.Body, want)
		}
	}
	// Requests without a body reserve nothing, so they never queue behind the bodies: with
	// the budget held and a waiter queued, /health and /v1/models answer at once (a GET that
	// waited would time out into a 503 here).
	waiting := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body)))
		waiting <- rec.Code
	}()
	for s.reqmem.Waiting() == 0 {
		runtime.Gosched()
	}
	for _, path := range []string{"/health", "/v1/models"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s while bodies wait for the budget: %d %s", path, rec.Code, rec.Body)
		}
	}
	if code := <-waiting; code != http.StatusServiceUnavailable {
		t.Fatalf("the queued body: %d", code)
	}
	if got := testutil.ToFloat64(s.reqmemMetrics.refused); got != 3 {
		t.Fatalf("refused counter %v, want 3", got)
	}
	for _, h := range hold {
		_, _ = io.WriteString(h.w, body)
		_ = h.w.Close()
		if code := <-h.done; code != http.StatusOK {
			t.Fatalf("held request: %d", code)
		}
	}
	if s.reqmem.InUse() != 0 {
		t.Fatalf("budget not returned: %d in use", s.reqmem.InUse())
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("after release: %d %s", rec.Code, rec.Body)
	}
	if n, err := testutil.GatherAndCount(reg, "stockpot_request_memory_bytes", "stockpot_request_memory_capacity_bytes"); err != nil || n != 2 {
		t.Fatalf("gauges: %d %v", n, err)
	}
}

func TestRequestCost(t *testing.T) {
	for _, c := range []struct{ n, max, want int64 }{
		{0, 4096, requestBase},
		{100, 4096, 100*requestExpansion + requestBase},
		{-1, 4096, 4096*requestExpansion + requestBase},
		{1 << 30, 4096, 4096*requestExpansion + requestBase}, // a lying Content-Length is cut by MaxBytesReader
	} {
		if got := requestCost(c.n, c.max); got != c.want {
			t.Errorf("requestCost(%d, %d) = %d, want %d", c.n, c.max, got, c.want)
		}
	}
	if _, err := (Config{ModelName: "m", ContextLength: 8, MaxBodyBytes: 1 << 20, RequestMemoryBytes: 1 << 20}).validate(); err == nil {
		t.Fatal("a budget below one body's cost was accepted")
	}
}

// TestBodyNotUTF8: a body that is not UTF-8 is a 400 in each dialect's shape (json.Unmarshal
// would make each bad byte a U+FFFD of three byte-level characters), and the server goes on
// serving.
func TestBodyNotUTF8(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("ok"), nil)
	bad := "{\"model\":\"" + testModel + "\",\"prompt\":\"a\xffb\",\"max_tokens\":1}"
	for _, path := range []string{"/v1/completions", "/v1/messages", "/tokenize"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(bad)))
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "UTF-8") {
			t.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	good := strings.Replace(bad, "\xff", "\u00ff", 1)
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(good)))
	if rec.Code != http.StatusOK {
		t.Fatalf("valid body after: %d %s", rec.Code, rec.Body)
	}
}

// countingTok is fakeTok that records how many Encode calls run at once, holding each big one
// until released, so the test sees every concurrent caller that got past the server's slots.
type countingTok struct {
	fakeTok
	mu       *sync.Mutex
	running  *int
	worst    *int
	entered  chan struct{}
	proceeds chan struct{}
}

func (c countingTok) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	if len(text) >= pipeline.BigTokenizeBytes {
		c.mu.Lock()
		*c.running++
		*c.worst = max(*c.worst, *c.running)
		c.mu.Unlock()
		c.entered <- struct{}{}
		<-c.proceeds
		c.mu.Lock()
		*c.running--
		c.mu.Unlock()
	}
	return c.fakeTok.Encode(text[:min(len(text), 8)], addSpecial, parseSpecial)
}

// TestBigTokenizeSlots: big texts are tokenized at most pipeline.BigTokenizeSlots() at a time, the
// others waiting their turn (not refused), and every request is answered.
func TestBigTokenizeSlots(t *testing.T) {
	var mu sync.Mutex
	var running, worst int
	tok := countingTok{mu: &mu, running: &running, worst: &worst, entered: make(chan struct{}, 64), proceeds: make(chan struct{})}
	s, _ := newTestServerTok(t, newFakeGen("ok"), tok, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
	body := `{"prompt":"` + strings.Repeat("a", pipeline.BigTokenizeBytes) + `"}`
	const n = 6
	codes := make(chan int, n)
	for range n {
		go func() {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/tokenize", strings.NewReader(body)))
			codes <- rec.Code
		}()
	}
	slots := pipeline.BigTokenizeSlots()
	for done := 0; done < n; {
		// Let in the callers that hold a slot, then check nobody else got past.
		for range min(slots, n-done) {
			<-tok.entered
		}
		mu.Lock()
		if running > slots {
			mu.Unlock()
			t.Fatalf("%d big texts tokenized at once, %d slots", running, slots)
		}
		mu.Unlock()
		for range min(slots, n-done) {
			tok.proceeds <- struct{}{}
			done++
		}
	}
	for range n {
		if c := <-codes; c != http.StatusOK {
			t.Fatalf("tokenize answered %d", c)
		}
	}
	if worst > slots {
		t.Fatalf("at worst %d at once, %d slots", worst, slots)
	}
}

// TestChunkedBodyReservesAsItArrives: a body sent chunked reserves for what has arrived, a
// grain ahead, not the largest body's cost; one that outgrows what the budget can give is
// answered 503 in the API's shape, and everything comes back.
func TestChunkedBodyReservesAsItArrives(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("ok"), func(c *Config) {
		c.MaxBodyBytes = 8 << 20
		c.RequestMemoryBytes = requestCost(8<<20, 8<<20) // one largest body
		c.ReadTimeout = 50 * time.Millisecond
	})
	body := `{"model":"` + testModel + `","prompt":"hi","max_tokens":1}`
	// A small chunked body: served, and while it is read it holds a grain's cost, not 8 MiB's.
	pr, pw := io.Pipe()
	req := httptest.NewRequest(http.MethodPost, "/v1/completions", pr)
	req.ContentLength = -1
	done := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		done <- rec.Code
	}()
	for s.reqmem.InUse() == 0 {
		runtime.Gosched()
	}
	if got, want := s.reqmem.InUse(), requestCost(chunkedGrain, 8<<20); got != want {
		t.Fatalf("a chunked body holds %d before any byte, want one grain's cost %d", got, want)
	}
	_, _ = io.WriteString(pw, body)
	_ = pw.Close()
	if code := <-done; code != http.StatusOK {
		t.Fatalf("small chunked body: %d", code)
	}
	// Another holds most of the budget; a chunked body that grows past what is left is a 503.
	hold := s.reqmem.Capacity() - requestCost(2*chunkedGrain, 8<<20)
	if !s.reqmem.TryAcquire(hold) {
		t.Fatal("could not hold the budget")
	}
	big := `{"model":"` + testModel + `","prompt":"` + strings.Repeat("a", 3*chunkedGrain) + `","max_tokens":1}`
	req = httptest.NewRequest(http.MethodPost, "/v1/completions", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "--request-memory") {
		t.Fatalf("chunked body past the budget: %d %s", rec.Code, rec.Body)
	}
	s.reqmem.Release(hold)
	if s.reqmem.InUse() != 0 {
		t.Fatalf("%d bytes still held", s.reqmem.InUse())
	}
}
