package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

func toolsConfig(seed uint64, tools, sessions, turns int) Config {
	c := DefaultConfig()
	c.Workload, c.Seed, c.Tools, c.Sessions, c.Turns = "agent", seed, tools, sessions, turns
	c.PrefixTokens, c.TurnTokens, c.ToolResultTokens = 40, 12, 24
	return c
}

func buildTools(t *testing.T, cfg Config) []Script {
	t.Helper()
	v, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	scripts, err := BuildScripts(v, 1.3)
	if err != nil {
		t.Fatal(err)
	}
	return scripts
}

// transcript returns the messages of each request of sc, as runSteps sends them.
func transcript(sc Script) [][]Message {
	var out [][]Message
	var history []Message
	for _, st := range sc.Steps {
		msgs := append(append([]Message(nil), history...), st.Messages...)
		out = append(out, msgs)
		history = append(msgs, st.Reply...)
	}
	return out
}

// TestToolsWorkload is the generator step by step (testdata/tools.txt):
//
//	tools seed=S n=N             -> each tool's signature: name(param: type, ...), * = required
//	session seed=S n=N turns=T   -> session 0's requests: the messages each adds, in order
func TestToolsWorkload(t *testing.T) {
	datadriven.RunTest(t, "testdata/tools.txt", func(t *testing.T, d *datadriven.TestData) string {
		var seed uint64
		var n int
		d.ScanArgs(t, "seed", &seed)
		d.ScanArgs(t, "n", &n)
		var b strings.Builder
		switch d.Cmd {
		case "tools":
			for _, tl := range pickTools(newRand(seed^0x7001), n).tools {
				fmt.Fprintln(&b, signature(tl))
			}
		case "session":
			var turns int
			d.ScanArgs(t, "turns", &turns)
			sc := buildTools(t, toolsConfig(seed, n, 1, turns))[0]
			fmt.Fprintf(&b, "tools: %d\n", len(sc.Tools))
			for i, st := range sc.Steps {
				fmt.Fprintf(&b, "turn %d\n", i)
				for _, m := range append(append([]Message(nil), st.Messages...), st.Reply...) {
					fmt.Fprintf(&b, "  %s\n", describe(m))
				}
			}
		default:
			t.Fatalf("unknown command %q", d.Cmd)
		}
		return b.String()
	})
}

func signature(tl Tool) string {
	p := tl.Function.Parameters
	var names []string
	for k := range p.Properties {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		s := p.Properties[k]
		typ := s.Type
		switch {
		case len(s.Enum) > 0:
			typ = strings.Join(s.Enum, "|")
		case s.Minimum != nil:
			typ = fmt.Sprintf("integer %d..%d", *s.Minimum, *s.Maximum)
		case s.Items != nil:
			typ = "[]" + s.Items.Type
		}
		req := ""
		if slices.Contains(p.Required, k) {
			req = "*"
		}
		parts = append(parts, fmt.Sprintf("%s%s: %s", k, req, typ))
	}
	return fmt.Sprintf("%s(%s)", tl.Function.Name, strings.Join(parts, ", "))
}

// describe prints a message short: text as its first words and length, calls in full.
func describe(m Message) string {
	short := func(s string) string {
		f := strings.Fields(s)
		if len(f) > 4 {
			f = f[:4]
		}
		return fmt.Sprintf("%q… (%d bytes)", strings.Join(f, " "), len(s))
	}
	switch {
	case len(m.ToolCalls) > 0:
		c := m.ToolCalls[0]
		return fmt.Sprintf("assistant content=null call %s %s(%s)", c.ID, c.Function.Name, c.Function.Arguments)
	case m.Role == "tool":
		return fmt.Sprintf("tool %s %s", m.ToolCallID, short(m.Content))
	default:
		return m.Role + " " + short(m.Content)
	}
}

// TestToolsDeterministic: the same seed gives the same bytes, another seed other tools.
func TestToolsDeterministic(t *testing.T) {
	a := buildTools(t, toolsConfig(7, 12, 3, 4))
	b := buildTools(t, toolsConfig(7, 12, 3, 4))
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) || !reflect.DeepEqual(a, b) {
		t.Error("same seed: scripts differ")
	}
	c := buildTools(t, toolsConfig(8, 12, 3, 4))
	if reflect.DeepEqual(a[0].Tools, c[0].Tools) {
		t.Error("seeds 7 and 8: same tools")
	}
	// Tools mode leaves the text of the plain agent alone: its generator has its own stream.
	plain := toolsConfig(7, 0, 3, 4)
	p1, p2 := buildTools(t, plain), buildTools(t, plain)
	if !reflect.DeepEqual(p1, p2) || p1[0].Tools != nil || p1[0].Steps[0].Reply != nil {
		t.Error("--tools 0: want the plain agent (no tools, no replies)")
	}
}

// TestToolsStableAcrossTurns: every session sends the same tool list, the same bytes, every
// turn, and each request's messages extend the previous request's messages and reply.
func TestToolsStableAcrossTurns(t *testing.T) {
	for _, n := range []int{8, 13, 20} {
		scripts := buildTools(t, toolsConfig(3, n, 3, 5))
		first, _ := json.Marshal(scripts[0].Tools)
		names := map[string]bool{}
		for _, tl := range scripts[0].Tools {
			names[tl.Function.Name] = true
		}
		if len(scripts[0].Tools) != n || len(names) != n {
			t.Errorf("--tools %d: have %d tools with %d distinct names", n, len(scripts[0].Tools), len(names))
		}
		for _, sc := range scripts {
			if b, _ := json.Marshal(sc.Tools); !bytes.Equal(b, first) {
				t.Errorf("--tools %d: session %d sends other tools than session 0", n, sc.Session)
			}
			reqs := transcript(sc)
			for i := 1; i < len(reqs); i++ {
				prev, _ := json.Marshal(append(append([]Message(nil), reqs[i-1]...), sc.Steps[i-1].Reply...))
				cur, _ := json.Marshal(reqs[i])
				// The JSON arrays agree up to the previous one's closing bracket.
				if !bytes.HasPrefix(cur, prev[:len(prev)-1]) {
					t.Errorf("--tools %d session %d turn %d: messages do not extend the previous request's", n, sc.Session, i)
				}
			}
			if reqs[0][0].Role != "system" || !reflect.DeepEqual(reqs[0][0], scripts[0].Steps[0].Messages[0]) {
				t.Errorf("session %d: does not start with the shared system prompt", sc.Session)
			}
		}
		// The completion rendering (the character-based prediction's view) is append-only too.
		prev := ""
		for i, msgs := range transcript(scripts[0]) {
			p := renderTools(scripts[0].Tools) + renderCompletion(msgs)
			if !strings.HasPrefix(p, prev) {
				t.Fatalf("turn %d: rendered prompt does not extend the previous one", i)
			}
			prev = renderTools(scripts[0].Tools) + renderCompletion(append(msgs, scripts[0].Steps[i].Reply...))
		}
	}
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`) // OpenAI's rule for function names

// checkSchema checks s is a well-formed schema of the kinds the generator may make.
func checkSchema(s *Schema, top bool) error {
	if s == nil {
		return fmt.Errorf("nil schema")
	}
	if top {
		if s.Type != "object" || len(s.Properties) == 0 || s.AdditionalProperties == nil || *s.AdditionalProperties {
			return fmt.Errorf("parameters: want an object with properties and additionalProperties false, have %+v", s)
		}
		for _, r := range s.Required {
			if s.Properties[r] == nil {
				return fmt.Errorf("required %q is not a property", r)
			}
		}
		if len(slices.Compact(slices.Sorted(slices.Values(s.Required)))) != len(s.Required) {
			return fmt.Errorf("required has duplicates: %v", s.Required)
		}
		for k, p := range s.Properties {
			if !toolName.MatchString(k) {
				return fmt.Errorf("property name %q", k)
			}
			if p.Description == "" {
				return fmt.Errorf("property %q has no description", k)
			}
			if err := checkSchema(p, false); err != nil {
				return fmt.Errorf("property %q: %w", k, err)
			}
		}
		return nil
	}
	switch s.Type {
	case "string":
		if s.Enum != nil && (len(s.Enum) == 0 || len(slices.Compact(slices.Sorted(slices.Values(s.Enum)))) != len(s.Enum)) {
			return fmt.Errorf("enum %v: want distinct values", s.Enum)
		}
	case "integer":
		if s.Minimum == nil || s.Maximum == nil || *s.Minimum > *s.Maximum {
			return fmt.Errorf("integer bounds %v..%v", s.Minimum, s.Maximum)
		}
	case "boolean":
	case "array":
		if s.Items == nil {
			return fmt.Errorf("array without items")
		}
		return checkSchema(s.Items, false)
	default:
		return fmt.Errorf("type %q", s.Type)
	}
	if s.Properties != nil || s.Required != nil {
		return fmt.Errorf("%s with object keywords", s.Type)
	}
	return nil
}

// compileSchema compiles s with a full JSON Schema (draft 2020-12) implementation, which also
// checks s against the metaschema.
func compileSchema(t *testing.T, s any) (*jsonschema.Schema, error) {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tool.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("tool.json")
}

func validateArgs(sch *jsonschema.Schema, args string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}

// TestToolSchemasValid checks every tool of the catalogue, as several seeds declare it.
func TestToolSchemasValid(t *testing.T) {
	if _, err := compileSchema(t, map[string]any{"type": "strin"}); err == nil {
		t.Fatal("the metaschema check lets a bad type through")
	}
	for seed := uint64(1); seed <= 5; seed++ {
		for _, tl := range pickTools(newRand(seed), MaxTools).tools {
			f := tl.Function
			if tl.Type != "function" || !toolName.MatchString(f.Name) || len(f.Description) < 20 {
				t.Errorf("seed %d: tool %q: type %q, description %q", seed, f.Name, tl.Type, f.Description)
			}
			if err := checkSchema(f.Parameters, true); err != nil {
				t.Errorf("seed %d: tool %s: %v", seed, f.Name, err)
			}
			sch, err := compileSchema(t, f.Parameters)
			if err != nil {
				t.Errorf("seed %d: tool %s: not a valid JSON schema: %v", seed, f.Name, err)
				continue
			}
			// The validator is strict where the schema says so: no unknown arguments, no
			// missing required ones.
			if validateArgs(sch, `{"no_such_argument": 1}`) == nil {
				t.Errorf("seed %d: tool %s accepts unknown or missing arguments", seed, f.Name)
			}
			// The schema survives a round trip through JSON (what the server parses).
			b, _ := json.Marshal(tl)
			var back Tool
			if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, tl) {
				t.Errorf("seed %d: tool %s does not round-trip through JSON: %v", seed, f.Name, err)
			}
		}
	}
}

// TestToolCallsValid: each reply is one call of a declared tool with arguments valid against
// its schema, sent with content null, then a tool message answering that call id.
func TestToolCallsValid(t *testing.T) {
	cfg := toolsConfig(11, 20, 4, 12)
	scripts := buildTools(t, cfg)
	schemas := map[string]*jsonschema.Schema{}
	for _, tl := range scripts[0].Tools {
		sch, err := compileSchema(t, tl.Function.Parameters)
		if err != nil {
			t.Fatalf("tool %s: %v", tl.Function.Name, err)
		}
		schemas[tl.Function.Name] = sch
	}
	ids := map[string]bool{}
	called := map[string]bool{}
	for _, sc := range scripts {
		for i, st := range sc.Steps {
			if len(st.Reply) != 2 || len(st.Reply[0].ToolCalls) != 1 || st.Reply[1].Role != "tool" {
				t.Fatalf("session %d turn %d: reply %+v, want an assistant tool call and a tool result", sc.Session, i, st.Reply)
			}
			a, res := st.Reply[0], st.Reply[1]
			c := a.ToolCalls[0]
			var wire map[string]json.RawMessage
			b, _ := json.Marshal(a)
			json.Unmarshal(b, &wire)
			if a.Role != "assistant" || string(wire["content"]) != "null" || c.Type != "function" {
				t.Errorf("assistant turn %s: want role assistant, content null, type function", b)
			}
			if ids[c.ID] || !strings.HasPrefix(c.ID, "call_") {
				t.Errorf("call id %q: want a fresh call_ id", c.ID)
			}
			ids[c.ID] = true
			s := schemas[c.Function.Name]
			if s == nil {
				t.Errorf("call of %q, which is not among the tools", c.Function.Name)
				continue
			}
			called[c.Function.Name] = true
			if err := validateArgs(s, c.Function.Arguments); err != nil {
				t.Errorf("%s arguments %s: %v", c.Function.Name, c.Function.Arguments, err)
			}
			var out struct{ Status, Tool, Output string }
			if res.ToolCallID != c.ID || json.Unmarshal([]byte(res.Content), &out) != nil || out.Tool != c.Function.Name {
				t.Errorf("tool result %+v does not answer call %s", res, c.ID)
			}
			if n := len(strings.Fields(out.Output)); n < cfg.ToolResultTokens/2 || n > cfg.ToolResultTokens {
				t.Errorf("tool result of %d words, want about %d tokens' worth", n, cfg.ToolResultTokens)
			}
		}
	}
	if len(called) < 10 {
		t.Errorf("48 calls reached only %d of 20 tools", len(called))
	}
}

func TestToolsConfig(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.Tools = -1 }, "--tools"},
		{func(c *Config) { c.Tools = MaxTools + 1 }, "--tools"},
		{func(c *Config) { c.Workload, c.Tools = "docqa", 8 }, "only --workload agent"},
		{func(c *Config) { c.ToolResultTokens = -1 }, "--tool-result-tokens"},
	} {
		c := DefaultConfig()
		tc.mut(&c)
		if _, err := c.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("have %v, want an error naming %s", err, tc.want)
		}
	}
	c := DefaultConfig()
	c.Tools = 8
	v, err := c.validate()
	if err != nil || !v.Chat || c.Chat {
		t.Errorf("--tools 8: have chat=%v, %v; want chat implied (in the copy)", v.Chat, err)
	}
}

// TestAgentToolsRequests runs tools mode against a fake chat server that answers with text on
// some turns and a streamed tool call on others, and checks what went over the wire: the same
// tools bytes in every request, each transcript extending the previous one with the synthetic
// reply, and nothing of the model's answers in it.
func TestAgentToolsRequests(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]json.RawMessage
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		mu.Lock()
		bodies = append(bodies, body)
		n := len(bodies)
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		if n%2 == 0 {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_MODEL\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\\\"MODEL\\\"}\"}}]},\"finish_reason\":null}]}\n\n")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n")
		} else {
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" MODEL TEXT\"},\"finish_reason\":null}]}\n\n")
			fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n")
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":2,\"total_tokens\":102}}\n\n")
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)

	cfg := toolsConfig(5, 8, 2, 4)
	cfg.Target, cfg.Concurrency, cfg.ScrapeInterval = s.URL, 1, -1
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 8 || rep.Errors != 0 {
		t.Fatalf("requests/errors: have %d/%d, want 8/0: %v", rep.Requests, rep.Errors, rep.ErrorSample)
	}
	if rep.Mode != "tools" || rep.Tools != 8 || rep.Endpoint != "/v1/chat/completions" || rep.ToolCallAnswers != 4 {
		t.Errorf("report: mode %q, tools %d, endpoint %s, tool-call answers %d; want tools, 8, chat, 4",
			rep.Mode, rep.Tools, rep.Endpoint, rep.ToolCallAnswers)
	}
	if rep.TTFT == nil || rep.TTFT.Count != 8 {
		t.Errorf("ttft %+v: want one per request, tool-call answers included", rep.TTFT)
	}
	want, _ := json.Marshal(buildTools(t, cfg)[0].Tools)
	for i, b := range bodies {
		if !bytes.Equal(b["tools"], want) {
			t.Errorf("request %d: tools differ from the generated ones", i)
		}
		if bytes.Contains(b["messages"], []byte("MODEL")) {
			t.Errorf("request %d: the transcript holds the model's answer: %s", i, b["messages"])
		}
		if i%4 == 0 {
			continue // a session's first turn
		}
		var prev, cur []json.RawMessage
		json.Unmarshal(bodies[i-1]["messages"], &prev)
		json.Unmarshal(b["messages"], &cur)
		if len(cur) != len(prev)+3 || !reflect.DeepEqual(cur[:len(prev)], prev) {
			t.Errorf("request %d: %d messages, want the %d before it and call, result, user", i, len(cur), len(prev))
			continue
		}
		var call struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []ToolCall      `json:"tool_calls"`
		}
		var result struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
		}
		json.Unmarshal(cur[len(prev)], &call)
		json.Unmarshal(cur[len(prev)+1], &result)
		if call.Role != "assistant" || string(call.Content) != "null" || len(call.ToolCalls) != 1 ||
			result.Role != "tool" || result.ToolCallID != call.ToolCalls[0].ID {
			t.Errorf("request %d: appended %s and %s, want a tool call with content null and its result", i, cur[len(prev)], cur[len(prev)+1])
		}
	}
	if rep.PredictedHitRate == nil || !strings.Contains(rep.PredictionBasis, "characters") {
		t.Errorf("prediction %v (%s): want the character-based estimate on a server without token ids", rep.PredictedHitRate, rep.PredictionBasis)
	}
	var tbl strings.Builder
	rep.WriteTable(&tbl)
	if !strings.Contains(tbl.String(), "tools: 8 tool schemas") {
		t.Errorf("table lacks the mode line:\n%s", tbl.String())
	}
}
