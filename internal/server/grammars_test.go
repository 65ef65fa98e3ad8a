package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"stockpot/internal/api"
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
		plan := allocated(func() { _, _, perr = s.pipe.PlanChat(context.Background(), req, "") })
		if !strings.Contains(fmt.Sprint(perr), "estimated at") {
			t.Errorf("%s: PlanChat: %v, want the estimate's refusal", tc.name, perr)
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
	if n, _, compiles := s.pipe.GrammarStats(); n != 0 || compiles != 0 {
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
	if entries, bytes, compiles := s.pipe.GrammarStats(); entries != 1 || compiles != 1 || bytes <= 0 {
		t.Errorf("after %d identical requests: %d grammars, %d bytes, %d compiles; want 1 compiled once", n, entries, bytes, compiles)
	}
}
