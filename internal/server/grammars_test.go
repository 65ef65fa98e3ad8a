package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"stockpot/internal/api"
	"stockpot/internal/grammar"
)

// hostileSchema is issue 32's probe: an 800 KB-plus anyOf of 2,000 objects, past a million
// ops compiled.
func hostileSchema() string {
	var b strings.Builder
	b.WriteString(`{"anyOf":[`)
	for i := range 2000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"type":"object","properties":{`)
		for j := range 8 {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"field_%d_%d":{"type":"string","description":"x"}`, i, j)
		}
		fmt.Fprintf(&b, `},"required":["field_%d_0"]}`, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc: deterministic for
// one goroutine, unlike the heap's size).
func allocated(f func()) uint64 {
	var a, z runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&z)
	return z.TotalAlloc - a.TotalAlloc
}

// bigBodies lets an 800 KB schema reach planning: its body, and the tools rendered into the
// byte-level fake's prompt.
func bigBodies(c *Config) {
	c.ContextLength, c.MaxPromptTokens, c.MaxBodyBytes = 4<<20, 4<<20-1, 4<<20
}

// TestGrammarRefusedBeforeCompile: the hostile schema is answered 400 through every dialect
// that carries a schema, naming the field, stating the estimate and the bound, and the
// whole request (body, prompt, estimate) allocates little: the grammar is never built. The
// server then serves on.
func TestGrammarRefusedBeforeCompile(t *testing.T) {
	schema := hostileSchema()
	if len(schema) < 800<<10 {
		t.Fatalf("schema of %d bytes, want 800 KB or more", len(schema))
	}
	s, _ := newTestServer(t, newFakeGen(`{"a": 1}`), bigBodies)
	for _, tc := range []struct {
		name, path, body, param string
		parse                   func([]byte) (*api.ChatRequest, error)
	}{
		{"chat response_format", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"q"}],"max_tokens":5,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}}`,
			"response_format.json_schema.schema", api.ParseChatRequest},
		{"chat tools", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"q"}],"max_tokens":5,"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":` + schema + `}}]}`,
			"tools[0].function.parameters", api.ParseChatRequest},
		{"responses text.format", "/v1/responses",
			`{"input":"q","max_output_tokens":5,"text":{"format":{"type":"json_schema","name":"x","schema":` + schema + `}}}`,
			"text.format.schema", func(b []byte) (*api.ChatRequest, error) {
				rr, err := api.ParseResponsesRequest(b)
				if err != nil {
					return nil, err
				}
				return rr.ChatRequest(nil)
			}},
		{"messages tools", "/v1/messages",
			`{"max_tokens":5,"messages":[{"role":"user","content":"q"}],"tool_choice":{"type":"any"},"tools":[{"name":"f","input_schema":` + schema + `}]}`,
			"tools[0].input_schema", func(b []byte) (*api.ChatRequest, error) {
				mr, err := api.ParseMessagesRequest(b, false)
				if err != nil {
					return nil, err
				}
				return mr.Chat, nil
			}},
	} {
		// Planning alone (the estimate and its refusal) is what the grammar costs.
		req, err := tc.parse([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var perr error
		plan := allocated(func() { _, _, perr = s.planChat(context.Background(), req, "") })
		if !strings.Contains(fmt.Sprint(perr), "estimated at") {
			t.Errorf("%s: planChat: %v, want the estimate's refusal", tc.name, perr)
		}
		if plan > 50<<20 {
			t.Errorf("%s: planning the refusal allocated %d MB, want under 50", tc.name, plan>>20)
		}
		var rec *httptest.ResponseRecorder
		alloc := allocated(func() { rec = do(s.Handler(), "POST", tc.path, tc.body, "anthropic-version", "2023-06-01") })
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %.300s", tc.name, rec.Code, rec.Body)
			continue
		}
		var msg string
		if tc.path == "/v1/messages" {
			msg = decode[api.AnthropicErrorBody](t, rec).Error.Message
		} else {
			e := decode[api.ErrorBody](t, rec)
			msg = e.Error.Message
			if e.Error.Param == nil || *e.Error.Param != tc.param {
				t.Errorf("%s: param %v, want %q", tc.name, e.Error.Param, tc.param)
			}
		}
		if !strings.Contains(msg, tc.param) || !strings.Contains(msg, "estimated at") || !strings.Contains(msg, "over the bound of 64.0 MiB") {
			t.Errorf("%s: message %q does not name %s, the estimate and the bound", tc.name, msg, tc.param)
		}
		// The whole request parses its body, renders its prompt (tools included) and
		// tokenizes it before planning; a compile would add hundreds of MB.
		if alloc > 100<<20 {
			t.Errorf("%s: the request allocated %d MB, want under 100", tc.name, alloc>>20)
		}
		t.Logf("%s: planning %d MB, the whole request %d MB: %s", tc.name, plan>>20, alloc>>20, msg)
	}
	if n, _, compiles := s.grammars.stats(); n != 0 || compiles != 0 {
		t.Errorf("%d grammars kept, %d compiled, want none", n, compiles)
	}
	if rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"response_format":{"type":"json_object"}`)); rec.Code != 200 {
		t.Errorf("after refusals: %d %s", rec.Code, rec.Body)
	}
}

// TestGrammarCompileBudget: a schema whose estimate passes but whose compile does not (a
// bound set below what it takes) is answered 400, not compiled past the bound.
func TestGrammarCompileBudget(t *testing.T) {
	s, _ := newTestServer(t, newFakeGen("{}"), func(c *Config) {
		agentConfig(c)
		c.Grammar.MaxSteps = 2000 // a string schema's estimate passes; its compile takes more
	})
	props := make([]string, 10)
	for i := range props {
		props[i] = fmt.Sprintf(`"p%d":{"type":"string"}`, i)
	}
	rec := do(s.Handler(), "POST", "/v1/chat/completions", chatBody(`,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{`+strings.Join(props, ",")+`}}}}`))
	e := decode[api.ErrorBody](t, rec)
	if rec.Code != 400 || e.Error.Param == nil || !strings.Contains(e.Error.Message, "2000 steps") {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

// TestGrammarCacheShares: identical requests compile their grammar once, concurrent ones
// included, and get the same compiled grammar; a different schema is another grammar.
func TestGrammarCacheShares(t *testing.T) {
	gen := newFakeGen(`{"a": 1}`)
	s, _ := newTestServer(t, gen, agentConfig)
	body := chatBody(`,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}`)
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if rec := do(s.Handler(), "POST", "/v1/chat/completions", body); rec.Code != 200 {
				t.Errorf("%d %s", rec.Code, rec.Body)
			}
		})
	}
	wg.Wait()
	if entries, bytes, compiles := s.grammars.stats(); entries != 1 || compiles != 1 || bytes <= 0 {
		t.Errorf("after %d identical requests: %d grammars, %d bytes, %d compiles; want 1 compiled once", n, entries, bytes, compiles)
	}
	// The same key gives the very same grammar.
	key := grammarKey{kind: "json_schema", spec: "s"}
	builds := 0
	build := func() (*grammar.Grammar, error) { builds++; return grammar.Compile(grammar.JSONObject()) }
	none := func() error { return nil }
	g1, err1 := s.grammars.get(context.Background(), s.cfg.Grammar, key, none, build)
	g2, err2 := s.grammars.get(context.Background(), s.cfg.Grammar, key, none, build)
	if err1 != nil || err2 != nil || g1 != g2 || builds != 1 {
		t.Errorf("get twice: %p %p (%v %v), %d builds; want one grammar built once", g1, g2, err1, err2, builds)
	}
}

// TestGrammarSingleFlight: concurrent gets of one key share the leader's compile, which the
// test holds open until every follower is waiting on it.
func TestGrammarSingleFlight(t *testing.T) {
	var c grammarCache
	key := grammarKey{kind: "json_schema", spec: "one"}
	started, release := make(chan struct{}), make(chan struct{})
	builds := 0
	build := func() (*grammar.Grammar, error) {
		builds++
		close(started)
		<-release
		return grammar.Compile(grammar.JSONObject())
	}
	none := func() error { return nil }
	const n = 6
	got := make([]*grammar.Grammar, n)
	var wg sync.WaitGroup
	wg.Go(func() { got[0], _ = c.get(context.Background(), GrammarConfig{}, key, none, build) })
	<-started
	for i := 1; i < n; i++ {
		wg.Go(func() { got[i], _ = c.get(context.Background(), GrammarConfig{}, key, none, build) })
	}
	close(release)
	wg.Wait()
	for i, g := range got {
		if g == nil || g != got[0] {
			t.Fatalf("caller %d got %p, the leader %p", i, g, got[0])
		}
	}
	if builds != 1 {
		t.Errorf("%d builds, want 1", builds)
	}
}

// TestGrammarWaiterLeaves: with every compile slot taken, a request whose context ends
// while it waits gets a 503 and leaves; a full queue answers 429 at once. The slot's
// compile still completes and is kept.
func TestGrammarWaiterLeaves(t *testing.T) {
	var c grammarCache
	cfg := GrammarConfig{Compiles: 1, MaxWaiting: 1}
	started, release := make(chan struct{}), make(chan struct{})
	slow := func() (*grammar.Grammar, error) {
		close(started)
		<-release
		return grammar.Compile(grammar.JSONObject())
	}
	none := func() error { return nil }
	done := make(chan error)
	go func() {
		_, err := c.get(context.Background(), cfg, grammarKey{spec: "slow"}, none, slow)
		done <- err
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fast := func() (*grammar.Grammar, error) { return grammar.Compile(grammar.JSONObject()) }
	_, err := c.get(ctx, cfg, grammarKey{spec: "other"}, none, fast)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Errorf("a waiter whose context ended: %v, want a 503", err)
	}
	// The queue: one waiter fills it, the next is refused with a 429.
	waitCtx, stop := context.WithCancel(context.Background())
	waiting := make(chan error)
	go func() {
		_, err := c.get(waitCtx, cfg, grammarKey{spec: "waiter"}, none, fast)
		waiting <- err
	}()
	for {
		c.mu.Lock()
		w := c.mu.waiting
		c.mu.Unlock()
		if w == 1 {
			break
		}
		select {
		case err := <-waiting:
			t.Fatalf("the waiter returned without waiting: %v", err)
		default:
		}
		runtime.Gosched()
	}
	if _, err := c.get(context.Background(), cfg, grammarKey{spec: "third"}, none, fast); !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests {
		t.Errorf("past MaxWaiting: %v, want a 429", err)
	}
	stop()
	if err := <-waiting; !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Errorf("the waiter that gave up: %v, want a 503", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n, _, compiles := c.stats(); n != 1 || compiles != 1 {
		t.Errorf("%d kept, %d compiled; want the slow one alone", n, compiles)
	}
}

// TestGrammarCacheEvictsByBytes: the cache holds what fits in CacheBytes, dropping the least
// recently used; a grammar larger than the whole cache is served but not kept.
func TestGrammarCacheEvictsByBytes(t *testing.T) {
	one, err := grammar.Compile(grammar.JSONObject())
	if err != nil {
		t.Fatal(err)
	}
	size := one.Bytes()
	var c grammarCache
	cfg := GrammarConfig{CacheBytes: 2*size + size/2} // two fit, three do not
	none := func() error { return nil }
	get := func(spec string) {
		t.Helper()
		if _, err := c.get(context.Background(), cfg, grammarKey{spec: spec}, none, func() (*grammar.Grammar, error) {
			return grammar.Compile(grammar.JSONObject())
		}); err != nil {
			t.Fatal(err)
		}
	}
	get("a")
	get("b")
	get("a") // a is now the most recent
	get("c") // evicts b
	if n, bytes, compiles := c.stats(); n != 2 || bytes > cfg.CacheBytes || compiles != 3 {
		t.Errorf("%d kept, %d bytes, %d compiles; want 2 within %d, 3 compiles", n, bytes, compiles, cfg.CacheBytes)
	}
	get("a") // still kept
	if _, _, compiles := c.stats(); compiles != 3 {
		t.Errorf("a was evicted (%d compiles)", compiles)
	}
	get("b") // was evicted: compiled again
	if _, _, compiles := c.stats(); compiles != 4 {
		t.Errorf("b was kept (%d compiles)", compiles)
	}
	var tiny grammarCache
	if _, err := tiny.get(context.Background(), GrammarConfig{CacheBytes: 1}, grammarKey{spec: "big"}, none, func() (*grammar.Grammar, error) {
		return grammar.Compile(grammar.JSONObject())
	}); err != nil {
		t.Fatal(err)
	}
	if n, bytes, _ := tiny.stats(); n != 0 || bytes != 0 {
		t.Errorf("a grammar over the whole cache is kept: %d entries, %d bytes", n, bytes)
	}
}
