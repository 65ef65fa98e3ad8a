package clienttest

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// nodeSummary is the JSON line a tools/agentclients script prints.
type nodeSummary struct {
	Client    string            `json:"client"`
	Mode      string            `json:"mode"`
	OK        bool              `json:"ok"`
	Error     string            `json:"error"`
	Versions  map[string]string `json:"versions"`
	ToolRuns  []toolRun         `json:"tool_runs"`
	Exchanges []*exchange       `json:"exchanges"`

	// @openai/agents: one entry per agent run.
	Runs []struct {
		Input       string          `json:"input"`
		ToolChoice  *string         `json:"tool_choice"`
		Stream      bool            `json:"stream"`
		ToolRuns    int             `json:"tool_runs"`
		ModelCalls  int             `json:"model_calls"`
		FinalOutput json.RawMessage `json:"final_output"`
		// CachedTokens is what the SDK's usage says for each model call of the run.
		CachedTokens []int `json:"cached_tokens"`
	} `json:"runs"`
	StreamEvents int `json:"stream_events"`

	// @langchain/openai: one entry per question.
	Rounds []struct {
		Question  string `json:"question"`
		Stream    bool   `json:"stream"`
		ToolCalls []struct {
			ID   string         `json:"id"`
			Name string         `json:"name"`
			Args map[string]any `json:"args"`
		} `json:"tool_calls"`
		InvalidToolCalls []json.RawMessage `json:"invalid_tool_calls"`
		ToolMessage      *struct {
			ToolCallID string `json:"tool_call_id"`
		} `json:"tool_message"`
		Usage *lcUsage `json:"usage"`
		Final *struct {
			Content   json.RawMessage   `json:"content"`
			ToolCalls []json.RawMessage `json:"tool_calls"`
			Usage     *lcUsage          `json:"usage"`
		} `json:"final"`
	} `json:"rounds"`
}

// lcUsage is LangChain's usage_metadata; cache_read is its name for cached_tokens.
type lcUsage struct {
	InputTokens       int `json:"input_tokens"`
	InputTokenDetails struct {
		CacheRead *int `json:"cache_read"`
	} `json:"input_token_details"`
}

func (u *lcUsage) cacheRead() int {
	if u == nil || u.InputTokenDetails.CacheRead == nil {
		return -1
	}
	return *u.InputTokenDetails.CacheRead
}

// checkLibraryCached: the library reports the same cached_tokens as the wire, turn by turn.
func checkLibraryCached(t *testing.T, library []int, turns []*turn) {
	t.Helper()
	var wire []int
	for _, tr := range turns {
		wire = append(wire, tr.usage.cached())
	}
	if !slices.Equal(library, wire) {
		t.Errorf("the library reports cached tokens %v, the wire said %v", library, wire)
	}
}

// toolRun is one call of a tool function inside the script, with the arguments the library
// handed it.
type toolRun struct {
	Tool string         `json:"tool"`
	Args map[string]any `json:"args"`
}

func (r toolRun) key() string { return r.Tool + jsonText(r.Args) }

// agentClientsDir is where scripts/install-agentclients.sh installed the node packages.
func agentClientsDir(t *testing.T) (root, dir string) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found from the test's directory: %v", err)
	}
	dir = os.Getenv("STOCKPOT_AGENTCLIENTS_DIR")
	if dir == "" {
		dir = filepath.Join(root, ".cache", "agentclients")
	}
	return root, dir
}

// runNode runs tools/agentclients/SCRIPT MODE against the server and returns its summary.
// Missing node, a missing or stale install, or a script that fails are test failures: the
// install is part of `make deps`, which CI runs.
func runNode(t *testing.T, s *server, script, mode string) *nodeSummary {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node not found (install Node.js >= 20, then make deps): %v", err)
	}
	root, dir := agentClientsDir(t)
	src := filepath.Join(root, "tools", "agentclients")
	want, err := os.ReadFile(filepath.Join(src, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil || !bytes.Equal(want, have) {
		t.Fatalf("the agent clients are not installed in %s, or not from tools/agentclients/package-lock.json: run make deps (scripts/install-agentclients.sh)", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join(src, script), mode)
	cmd.Env = append(os.Environ(),
		"STOCKPOT_BASE_URL="+s.url+"/v1",
		"STOCKPOT_AGENTCLIENTS_DIR="+dir,
		// Loopback only: no trace exporter may post anywhere.
		"OPENAI_AGENTS_DISABLE_TRACING=1",
		"LANGSMITH_TRACING=false",
		"LANGCHAIN_TRACING_V2=false",
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var sum nodeSummary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatalf("node %s %s: %v; no JSON summary (%v)\nstdout:\n%s\nstderr:\n%s", script, mode, runErr, err, stdout.String(), stderr.String())
	}
	t.Logf("%s %s: versions %v", script, mode, sum.Versions)
	if runErr != nil || !sum.OK {
		for i, ex := range sum.Exchanges {
			t.Logf("exchange %d: %s %s → %d\n  request:  %s\n  response: %s", i, ex.Method, ex.Path, ex.Status, clip(ex.Request), clip(responseText(ex)))
		}
		t.Fatalf("node %s %s failed (%v): %s\nstderr:\n%s", script, mode, runErr, sum.Error, stderr.String())
	}
	return &sum
}

func chatOnly(exs []*exchange) []*exchange {
	var out []*exchange
	for _, ex := range exs {
		if strings.HasSuffix(ex.Path, "/chat/completions") {
			out = append(out, ex)
		}
	}
	return out
}

// wireCalls are the tool calls the server sent, as tool runs (name and parsed arguments).
func wireCalls(t *testing.T, turns []*turn) []string {
	t.Helper()
	var out []string
	for _, tr := range turns {
		for _, c := range tr.toolCalls {
			var args map[string]any
			if err := json.Unmarshal([]byte(c.Function.Arguments), &args); err != nil {
				continue // checkTurn reported it
			}
			out = append(out, toolRun{Tool: c.Function.Name, Args: args}.key())
		}
	}
	slices.Sort(out)
	return out
}

// checkToolRuns: the library ran exactly the calls the server sent, each once, with the
// arguments as sent; and it ran every tool in want at least once.
func checkToolRuns(t *testing.T, sum *nodeSummary, turns []*turn, want ...string) {
	t.Helper()
	var ran []string
	count := map[string]int{}
	for _, r := range sum.ToolRuns {
		ran = append(ran, r.key())
		count[r.Tool]++
	}
	slices.Sort(ran)
	if sent := wireCalls(t, turns); !slices.Equal(ran, sent) {
		t.Errorf("the tools ran with\n  %v\nthe server sent the calls\n  %v", ran, sent)
	}
	for _, name := range want {
		if count[name] == 0 {
			t.Errorf("tool %s never ran (runs %v)", name, sum.ToolRuns)
		}
	}
	t.Logf("tools ran: %v", sum.ToolRuns)
}

// TestAgentsSDK: the OpenAI Agents SDK runs an agent with two tools over three runs of one
// conversation (the second streamed); each run's forced call is executed by the SDK and
// answered, and the conversation's later requests reuse the earlier prompts' blocks.
func TestAgentsSDK(t *testing.T) {
	s := startServer(t)
	sum := runNode(t, s, "agents.mjs", "tools")
	turns := checkExchanges(t, chatOnly(sum.Exchanges))
	checkToolRuns(t, sum, turns, "get_weather", "convert_temperature")
	if len(sum.Runs) != 3 {
		t.Fatalf("%d agent runs, want 3", len(sum.Runs))
	}
	for i, r := range sum.Runs {
		var out string
		if err := json.Unmarshal(r.FinalOutput, &out); err != nil {
			t.Errorf("run %d: final output %s is not a string", i, r.FinalOutput)
		}
		if r.ToolRuns == 0 || r.ModelCalls < 2 {
			t.Errorf("run %d (tool_choice %s): %d tool runs over %d model calls, want a tool run and then an answer", i, deref(r.ToolChoice), r.ToolRuns, r.ModelCalls)
		}
		t.Logf("run %d: %q tool_choice=%s stream=%v: %d tool runs, %d model calls", i, r.Input, deref(r.ToolChoice), r.Stream, r.ToolRuns, r.ModelCalls)
	}
	if sum.StreamEvents == 0 {
		t.Error("the streamed run produced no events")
	}
	var cached []int
	for _, r := range sum.Runs {
		cached = append(cached, r.CachedTokens...)
	}
	checkLibraryCached(t, cached, turns)
}

// TestLangChain: ChatOpenAI with bindTools gets parsed tool_calls on its AIMessage, runs the
// tool into a ToolMessage and gets the answer; once plain, once streamed.
func TestLangChain(t *testing.T) {
	s := startServer(t)
	sum := runNode(t, s, "langchain.mjs", "tools")
	turns := checkExchanges(t, chatOnly(sum.Exchanges))
	checkToolRuns(t, sum, turns, "reorder")
	if len(sum.Rounds) != 2 {
		t.Fatalf("%d rounds, want 2", len(sum.Rounds))
	}
	for i, r := range sum.Rounds {
		if len(r.ToolCalls) == 0 || len(r.InvalidToolCalls) != 0 {
			t.Errorf("round %d (stream=%v): %d parsed tool calls, %d invalid: %s", i, r.Stream, len(r.ToolCalls), len(r.InvalidToolCalls), r.InvalidToolCalls)
			continue
		}
		for _, c := range r.ToolCalls {
			if c.ID == "" || (c.Name != "lookup_stock" && c.Name != "reorder") || c.Args == nil {
				t.Errorf("round %d: tool call %+v", i, c)
			}
		}
		if last := r.ToolCalls[len(r.ToolCalls)-1]; r.ToolMessage == nil || r.ToolMessage.ToolCallID != last.ID {
			t.Errorf("round %d: tool message %+v does not answer call %q", i, r.ToolMessage, last.ID)
		}
		if r.Final == nil || len(r.Final.ToolCalls) != 0 {
			t.Errorf("round %d: final answer %+v, want text without tool calls", i, r.Final)
		}
	}
	var cached []int
	for _, r := range sum.Rounds {
		cached = append(cached, r.Usage.cacheRead())
		if r.Final != nil {
			cached = append(cached, r.Final.Usage.cacheRead())
		}
	}
	checkLibraryCached(t, cached, turns)
}

// TestNodeClientsPlainChat runs both node clients through plain chat (no tools): the harness
// against any server.
func TestNodeClientsPlainChat(t *testing.T) {
	for _, script := range []string{"agents.mjs", "langchain.mjs"} {
		t.Run(script, func(t *testing.T) {
			s := startServer(t)
			sum := runNode(t, s, script, "plain")
			turns := checkExchanges(t, chatOnly(sum.Exchanges))
			if len(turns) < 2 {
				t.Errorf("%d chat turns, want at least 2", len(turns))
			}
			if len(sum.ToolRuns) != 0 {
				t.Errorf("tools ran in plain chat: %v", sum.ToolRuns)
			}
			var cached []int
			for _, r := range sum.Runs {
				cached = append(cached, r.CachedTokens...)
			}
			for _, r := range sum.Rounds {
				cached = append(cached, r.Usage.cacheRead())
			}
			checkLibraryCached(t, cached, turns)
		})
	}
}
