package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ardanlabs/jinja"

	"stockpot/internal/llamaref"
)

// The chat-template reference is @huggingface/jinja (the JavaScript engine
// transformers.js and the Hub use for chat templates), pinned by
// tools/jinjaref/package-lock.json and installed by `make deps`
// (scripts/install-jinjaref.sh) into .cache/jinjaref or
// $STOCKPOT_JINJAREF_DIR. Tests that need it fail when it is missing.

// refNow is the instant strftime_now formats on both sides.
var refNow = time.Date(2026, time.July, 26, 9, 30, 0, 0, time.UTC)

type refCase struct {
	Template string          `json:"template"`
	Context  json.RawMessage `json:"context"`
	Now      string          `json:"now,omitempty"`
}

type refResult struct {
	Text  *string `json:"text"`
	Error string  `json:"error"`
}

func repoRootForTest(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	d := filepath.Dir(file)
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(b, []byte("module stockpot\n")) {
			return d
		}
		up := filepath.Dir(d)
		if up == d {
			t.Fatal("cannot find the stockpot checkout")
		}
		d = up
	}
}

// renderReference renders the cases with @huggingface/jinja.
func renderReference(t testing.TB, cases []refCase) []refResult {
	t.Helper()
	root := repoRootForTest(t)
	dir := os.Getenv("STOCKPOT_JINJAREF_DIR")
	if dir == "" {
		dir = filepath.Join(root, ".cache", "jinjaref")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@huggingface", "jinja", "package.json")); err != nil {
		t.Fatalf("the chat-template reference (@huggingface/jinja) is not installed in %s: run `make deps` (scripts/install-jinjaref.sh): %v", dir, err)
	}
	cmd := exec.Command("node", filepath.Join(root, "tools", "jinjaref", "render.mjs"))
	cmd.Env = append(os.Environ(), "STOCKPOT_JINJAREF_DIR="+dir)
	return runReference(t, cmd, cases)
}

// renderJinja2 renders the cases with Python's Jinja2 set up as
// transformers sets it up (tools/jinjaref/render.py).
func renderJinja2(t testing.TB, cases []refCase) []refResult {
	t.Helper()
	root := repoRootForTest(t)
	if err := exec.Command("python3", "-c", "import jinja2").Run(); err != nil {
		t.Fatalf("the chat-template reference Jinja2 is missing (python3 -c 'import jinja2': %v): run `make deps` (scripts/install-jinjaref.sh)", err)
	}
	return runReference(t, exec.Command("python3", filepath.Join(root, "tools", "jinjaref", "render.py")), cases)
}

func runReference(t testing.TB, cmd *exec.Cmd, cases []refCase) []refResult {
	t.Helper()
	in, err := json.Marshal(map[string]any{"cases": cases})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v: %s %s", cmd, err, clip(string(out), 2000), stderr.String())
	}
	var reply struct {
		Version string      `json:"version"`
		Results []refResult `json:"results"`
		Error   string      `json:"error"`
	}
	if err := json.Unmarshal(out, &reply); err != nil || reply.Error != "" || len(reply.Results) != len(cases) {
		t.Fatalf("%s: bad reply (%v, %q, %d results for %d cases)", cmd, err, reply.Error, len(reply.Results), len(cases))
	}
	return reply.Results
}

// refContext is the JSON of the variables render gives the template, so
// that the reference renders exactly the values Stockpot does (same dicts,
// same key order, arguments as dicts or strings).
func refContext(t testing.TB, ctx map[string]jinja.Value) json.RawMessage {
	t.Helper()
	keys := make([]string, 0, len(ctx))
	for k, v := range ctx {
		if v.IsCallable() {
			continue
		}
		keys = append(keys, k)
	}
	d := jinja.NewDict()
	for _, k := range sortedStrings(keys) {
		d.AsDict().Set(k, ctx[k])
	}
	var b strings.Builder
	if err := (pyJSON{indent: -1, item: ",", key: ":"}).encode(&b, d, 0); err != nil {
		t.Fatal(err)
	}
	return json.RawMessage(b.String())
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// refConversation is one chat of the comparison.
type refConversation struct {
	name string
	msgs []ChatMessage
	opts RenderOptions
}

var weatherTool = json.RawMessage(`{"type":"function","function":{"name":"get_weather","description":"Get the current weather in a city.","parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name, e.g. Paris"},"unit":{"type":"string","description":"Temperature unit","enum":["celsius","fahrenheit"]}},"required":["city"]}}}`)
var searchTool = json.RawMessage(`{"type":"function","function":{"name":"search","description":"Search the web & return <b>snippets</b>.","parameters":{"type":"object","properties":{"query":{"type":"string","description":"What to look for"},"max_results":{"type":"integer","description":"At most this many","default":3}},"required":["query"]}}}`)

func refConversations() []refConversation {
	sys := ChatMessage{Role: "system", Content: "You are a concise assistant."}
	user := ChatMessage{Role: "user", Content: "What is the capital of France?"}
	answer := ChatMessage{Role: "assistant", Content: "Paris."}
	user2 := ChatMessage{Role: "user", Content: "And of Italy? Answer in one word, ünïcödé ok."}
	wUser := ChatMessage{Role: "user", Content: "What's the weather in Paris?"}
	call := ChatMessage{Role: "assistant", Content: nil, ToolCalls: []ToolCall{{ID: "call_1", Type: "function", Name: "get_weather", Arguments: `{"city": "Paris", "unit": "celsius"}`}}}
	result := ChatMessage{Role: "tool", ToolCallID: "call_1", Name: "get_weather", Content: `{"temperature": 21, "condition": "sunny"}`}
	wAnswer := ChatMessage{Role: "assistant", Content: "It is 21 °C and sunny in Paris."}
	wUser2 := ChatMessage{Role: "user", Content: "Thanks! And in Rome?"}
	call2 := ChatMessage{Role: "assistant", Content: "Let me check both.", ToolCalls: []ToolCall{
		{ID: "call_2", Type: "function", Name: "get_weather", Arguments: `{"city": "Rome"}`},
		{ID: "call_3", Type: "function", Name: "search", Arguments: `{"query": "Rome weather tomorrow", "max_results": 2}`},
	}}
	result2 := ChatMessage{Role: "tool", ToolCallID: "call_2", Name: "get_weather", Content: `{"temperature": 25}`}
	result3 := ChatMessage{Role: "tool", ToolCallID: "call_3", Name: "search", Content: "Sunny all week."}
	tools := []json.RawMessage{weatherTool, searchTool}
	gen := RenderOptions{AddGenerationPrompt: true}
	withTools := RenderOptions{AddGenerationPrompt: true, Tools: tools}
	return []refConversation{
		{"user", []ChatMessage{user}, gen},
		{"user-nogen", []ChatMessage{user}, RenderOptions{}},
		{"system-user", []ChatMessage{sys, user}, gen},
		{"multi-turn", []ChatMessage{sys, user, answer, user2}, gen},
		{"multi-turn-closed", []ChatMessage{sys, user, answer, user2, {Role: "assistant", Content: "Rome."}}, RenderOptions{}},
		{"tools", []ChatMessage{sys, wUser}, withTools},
		{"tools-nosystem", []ChatMessage{wUser}, withTools},
		{"tool-call", []ChatMessage{sys, wUser, call}, RenderOptions{Tools: tools}},
		{"tool-result", []ChatMessage{sys, wUser, call, result}, withTools},
		{"tool-session", []ChatMessage{sys, wUser, call, result, wAnswer, wUser2, call2, result2, result3}, withTools},
		{"tool-session-answered", []ChatMessage{sys, wUser, call, result, wAnswer, wUser2}, withTools},
		{"content-parts", []ChatMessage{
			{Role: "system", Content: []ContentPart{{Type: "text", Text: "You are a concise assistant."}}},
			{Role: "user", Content: []ContentPart{{Type: "text", Text: "Describe"}, {Type: "text", Text: "this in two parts."}}},
		}, gen},
		{"reasoning", []ChatMessage{user, {Role: "assistant", Content: "Paris.", ReasoningContent: "The user asks about France. Its capital is Paris."}, user2}, gen},
		{"think-in-content", []ChatMessage{user, {Role: "assistant", Content: "<think>\nFrance's capital.\n</think>\n\nParis."}, user2}, gen},
		{"tools-sparse-schema", []ChatMessage{wUser}, RenderOptions{AddGenerationPrompt: true, Tools: []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{"host":{"type":"string"}}}}}`)}}},
		{"thinking-off", []ChatMessage{user}, RenderOptions{AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": false}}},
	}
}

// refTemplates are the llama.cpp templates of the comparison: every
// models/templates/*.jinja of the llama.cpp source bundle.
func refTemplates(t testing.TB) map[string]string {
	t.Helper()
	files, err := llamaref.SourceFiles("models/templates")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, f := range files {
		if !strings.HasSuffix(f, ".jinja") {
			continue
		}
		b, err := llamaref.SourceFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(path.Base(f), ".jinja")] = string(b)
	}
	return out
}

// rendering is one engine's answer: text, or an error.
type rendering struct {
	text string
	err  string
}

func (r rendering) same(o rendering) bool {
	if r.err != "" || o.err != "" {
		return r.err != "" && o.err != ""
	}
	return r.text == o.text
}

func (r rendering) String() string {
	if r.err != "" {
		return "error: " + clip(r.err, 160)
	}
	return fmt.Sprintf("%d bytes", len(r.text))
}

func fromRef(r refResult) rendering {
	if r.Text != nil {
		return rendering{text: *r.Text}
	}
	if r.Error == "" {
		return rendering{err: "error"}
	}
	return rendering{err: r.Error}
}

type refOutcome struct {
	template, conv string
	got            rendering // Stockpot
	hf             rendering // @huggingface/jinja
	py             rendering // Jinja2 as transformers sets it up
}

// compareWithReference renders every conversation with every template with
// Stockpot and both references.
func compareWithReference(t *testing.T, templates map[string]string, convs []refConversation) []refOutcome {
	var cases []refCase
	var outs []refOutcome
	names := make([]string, 0, len(templates))
	for n := range templates {
		names = append(names, n)
	}
	for _, name := range sortedStrings(names) {
		src := templates[name]
		p := prepareTemplate(src)
		for _, c := range convs {
			o := refOutcome{template: name, conv: c.name}
			opts := c.opts
			opts.Now = refNow
			got, ctx, err := renderCtx(p, c.msgs, opts, "<|bos|>", "<|eos|>")
			o.got.text = got
			if err != nil {
				o.got.err = err.Error()
			}
			if ctx == nil {
				t.Fatalf("%s/%s: %v", name, c.name, err)
			}
			cases = append(cases, refCase{Template: src, Context: refContext(t, ctx), Now: refNow.Format(time.RFC3339)})
			outs = append(outs, o)
		}
	}
	hf := renderReference(t, cases)
	py := renderJinja2(t, cases)
	for i := range outs {
		outs[i].hf = fromRef(hf[i])
		outs[i].py = fromRef(py[i])
	}
	return outs
}

// TestChatTemplatesMatchReference renders the conversations of
// refConversations with every template llama.cpp ships and compares the text
// with Jinja2 (what transformers renders) and @huggingface/jinja. Stockpot
// must render what Jinja2 renders; where the JavaScript reference differs
// from Jinja2 the case is logged, not failed (its own deviation).
func TestChatTemplatesMatchReference(t *testing.T) {
	outs := compareWithReference(t, refTemplates(t), refConversations())
	type tally struct{ cases, hfAgree, pyAgree int }
	byTmpl := map[string]*tally{}
	var order []string
	for _, o := range outs {
		tl := byTmpl[o.template]
		if tl == nil {
			tl = &tally{}
			byTmpl[o.template] = tl
			order = append(order, o.template)
		}
		tl.cases++
		if o.got.same(o.hf) {
			tl.hfAgree++
		}
		if o.got.same(o.py) {
			tl.pyAgree++
			if !o.got.same(o.hf) {
				t.Logf("%s/%s: @huggingface/jinja differs from Jinja2 and Stockpot: %s", o.template, o.conv, describe(o.got, o.hf))
			}
			continue
		}
		if known := knownDifference(o.got, o.py); known != "" {
			t.Logf("%s/%s: known difference (%s): %s", o.template, o.conv, known, describe(o.got, o.py))
			continue
		}
		t.Errorf("%s/%s: Stockpot differs from Jinja2 (@huggingface/jinja %s): %s", o.template, o.conv, agreeWord(o.got.same(o.hf)), describe(o.got, o.py))
	}
	for _, n := range order {
		tl := byTmpl[n]
		t.Logf("%-50s %2d cases: Jinja2 %2d equal, @huggingface/jinja %2d equal", n, tl.cases, tl.pyAgree, tl.hfAgree)
	}
}

func agreeWord(b bool) string {
	if b {
		return "agrees with Stockpot"
	}
	return "differs too"
}

func describe(got, want rendering) string {
	if got.err != "" || want.err != "" {
		return fmt.Sprintf("got %s, want %s", got, want)
	}
	return firstDiff(got.text, want.text)
}

// jinja2Strictness are Jinja2 failures that Stockpot's engine does not
// share: where transformers raises on a template's sloppiness, Stockpot
// renders what the template plainly means (an empty loop over None, "" for
// an undefined attribute, a list append, tojson of a generator).
var jinja2Strictness = []struct{ pattern, why string }{
	{"TypeError: 'NoneType' object is not iterable", "Jinja2 raises on a for loop over None (a tool_use template given no tools); Stockpot loops zero times"},
	{"UndefinedError: ", "Jinja2 raises when an undefined value (a missing attribute or variable) is concatenated or printed in some positions; Stockpot uses \"\""},
	{"SecurityError: access to attribute 'append' of 'list' object is unsafe", "transformers' immutable sandbox forbids list.append; Stockpot allows it"},
	{"is not JSON serializable", "Jinja2's json.dumps cannot write a generator or Undefined; Stockpot writes the list or null"},
}

// knownDifference says why got may differ from Jinja2's rendering py, or "".
func knownDifference(got, py rendering) string {
	if got.err == "" && py.err != "" {
		for _, s := range jinja2Strictness {
			if strings.Contains(py.err, s.pattern) {
				return s.why
			}
		}
	}
	if got.err == "" && py.err == "" && strings.Contains(py.text, "&#34;") && html.UnescapeString(py.text) == got.text {
		// "text"|safe + x: Jinja2's Markup.__add__ HTML-escapes x
		// (functionary v3.1 writes its tools that way).
		return "Jinja2 HTML-escapes a string added to a |safe Markup string; Stockpot concatenates plainly"
	}
	return ""
}

// firstDiff shows where two renderings part.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-40)
	return fmt.Sprintf("at byte %d: got %q, want %q", i, clip(got[lo:], 120), clip(want[lo:], 120))
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
