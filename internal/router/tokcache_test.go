package router

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTokenCache: an exact body hits, another misses, a generation turnover keeps the
// recent entries, and oversized prompts are not kept.
func TestTokenCache(t *testing.T) {
	c := newTokenCache()
	c.put([]byte(`{"prompt":"a"}`), []int32{1, 2})
	if ids, ok := c.get([]byte(`{"prompt":"a"}`)); !ok || len(ids) != 2 {
		t.Fatalf("exact body: %v %v", ids, ok)
	}
	if _, ok := c.get([]byte(`{"prompt":"b"}`)); ok {
		t.Fatal("another body hit")
	}
	c.put([]byte("big"), make([]int32, tokCacheMaxPrompt+1))
	if _, ok := c.get([]byte("big")); ok {
		t.Fatal("an oversized prompt was kept")
	}
	half := make([]int32, tokCacheTokens/2)
	c.put([]byte("h1"), half)
	c.put([]byte("h2"), half) // turns the generation over: "a" and "h1" are now the previous one
	if _, ok := c.get([]byte(`{"prompt":"a"}`)); !ok {
		t.Fatal("an entry of the previous generation was lost")
	}
	c.put([]byte("h3"), half)
	c.put([]byte("h4"), half) // another turnover drops h1 (not used since); a was carried forward
	if _, ok := c.get([]byte("h1")); ok {
		t.Error("an entry two generations old is still there")
	}
	if _, ok := c.get([]byte(`{"prompt":"a"}`)); !ok {
		t.Error("a recently used entry was dropped")
	}
}

// TestTokenizeOncePerPrompt: the router asks a replica's /tokenize once per distinct text
// prompt; a repeat is routed on the remembered tokens.
func TestTokenizeOncePerPrompt(t *testing.T) {
	var calls atomic.Int32
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/tokenize":
			calls.Add(1)
			_, _ = io.WriteString(w, `{"tokens":[1,2,3,4,5,6,7,8]}`)
		case "/v1/completions":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, cannedCompletion)
		default:
			http.NotFound(w, r)
		}
	}))
	defer stub.Close()
	cfg := DefaultConfig()
	cfg.Policy, cfg.Backends = "kv-aware", []string{stub.URL}
	reg := prometheus.NewRegistry()
	cfg.Registerer, cfg.Gatherer = reg, reg
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	h := rt.Handler()
	post := func(prompt string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/completions", strings.NewReader(`{"prompt":"`+prompt+`","max_tokens":1}`)))
		if rec.Code != 200 {
			t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
		}
	}
	post("hello")
	post("hello")
	if n := calls.Load(); n != 1 {
		t.Errorf("two identical prompts: %d /tokenize calls, want 1", n)
	}
	post("hello again")
	if n := calls.Load(); n != 2 {
		t.Errorf("a new prompt: %d /tokenize calls in all, want 2", n)
	}
}
