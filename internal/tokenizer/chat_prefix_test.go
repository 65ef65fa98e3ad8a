package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
)

// agentSession is a multi-turn tool session as an agent sends it: each
// request repeats the whole history and appends what happened since. The
// generation points are the histories that end where the model speaks next
// (after a user message or a tool result).
func agentSession() (msgs []ChatMessage, points []int) {
	add := func(m ChatMessage, point bool) {
		msgs = append(msgs, m)
		if point {
			points = append(points, len(msgs))
		}
	}
	add(ChatMessage{Role: "system", Content: "You are a helpful agent. Use tools when needed."}, false)
	add(ChatMessage{Role: "user", Content: "What's the weather in Paris?"}, true)
	// Ids of 9 letters and digits and one call per turn: Mistral's and
	// Llama 3.x's templates refuse anything else.
	add(ChatMessage{Role: "assistant", Content: "", ReasoningContent: "I should call get_weather.", ToolCalls: []ToolCall{{ID: "Wx1Paris0", Name: "get_weather", Arguments: `{"city":"Paris"}`}}}, false)
	add(ChatMessage{Role: "tool", ToolCallID: "Wx1Paris0", Name: "get_weather", Content: `{"temperature":21}`}, true)
	add(ChatMessage{Role: "assistant", Content: "It is 21 °C in Paris.", ReasoningContent: "The tool says 21."}, false)
	add(ChatMessage{Role: "user", Content: "And Rome? Also search for events there."}, true)
	add(ChatMessage{Role: "assistant", Content: "", ReasoningContent: "Weather first.", ToolCalls: []ToolCall{{ID: "Wx2Rome00", Name: "get_weather", Arguments: `{"city":"Rome"}`}}}, false)
	add(ChatMessage{Role: "tool", ToolCallID: "Wx2Rome00", Name: "get_weather", Content: `{"temperature":25}`}, true)
	add(ChatMessage{Role: "assistant", Content: "", ReasoningContent: "Now events.", ToolCalls: []ToolCall{{ID: "Se3Rome00", Name: "search", Arguments: `{"query":"Rome events"}`}}}, false)
	add(ChatMessage{Role: "tool", ToolCallID: "Se3Rome00", Name: "search", Content: "A jazz festival."}, true)
	add(ChatMessage{Role: "assistant", Content: "25 °C, and there is a jazz festival.", ReasoningContent: "Summarise."}, false)
	add(ChatMessage{Role: "user", Content: "Thanks!"}, true)
	return msgs, points
}

// prefixResult is how a template's prompts grow over agentSession.
type prefixResult struct {
	// strict: each prompt (with its generation prompt) is a byte prefix of
	// the next: the whole previous prompt's KV cache is reused.
	strict bool
	// history: each history rendered without the generation prompt is a
	// prefix of the next prompt: all but the generation prompt is reused.
	history bool
	where   string // the first break, for the log
}

func prefixStable(src string) (prefixResult, error) {
	msgs, points := agentSession()
	p := prepareTemplate(src)
	opts := RenderOptions{AddGenerationPrompt: true, Tools: []json.RawMessage{weatherTool, searchTool}, Now: refNow}
	noGen := opts
	noGen.AddGenerationPrompt = false
	r := prefixResult{strict: true, history: true}
	prev, prevHist := "", ""
	for i, n := range points {
		out, err := render(p, msgs[:n], opts, "<|bos|>", "<|eos|>")
		if err != nil {
			return r, err
		}
		hist, err := render(p, msgs[:n], noGen, "<|bos|>", "<|eos|>")
		if err != nil {
			return r, err
		}
		if i > 0 && r.strict && !strings.HasPrefix(out, prev) {
			r.strict = false
			r.where = fmt.Sprintf("point %d (after message %d): %s", i, n, firstDiff(out, prev))
		}
		if i > 0 && r.history && !strings.HasPrefix(out, prevHist) {
			r.history = false
			r.where = fmt.Sprintf("point %d (after message %d), history: %s", i, n, firstDiff(out, prevHist))
		}
		prev, prevHist = out, hist
	}
	return r, nil
}

// TestChatPrefixStability checks what makes the prefix cache hit for
// agents: over a tool session, each request's rendered prompt starts with the
// previous request's prompt. That holds for templates that render history
// as it was (Qwen2.5, Qwen3-Coder, Llama 3.x, SmolLM3, DeepSeek-V3.1, ...)
// and not for those that rewrite earlier turns: Qwen3-style templates drop
// the reasoning of turns before the last user message, Mistral's move the
// system prompt or the tools to the last user turn, Hermes closes the last
// tool response differently. The expectations pin the families the server
// cares about; every template's result is logged.
func TestChatPrefixStability(t *testing.T) {
	// want: strict, history.
	want := map[string][2]bool{
		"Qwen-Qwen2.5-7B-Instruct":          {true, true},
		"Qwen3-Coder":                       {true, true},
		"meta-llama-Llama-3.1-8B-Instruct":  {true, true},
		"meta-llama-Llama-3.2-3B-Instruct":  {true, true},
		"meta-llama-Llama-3.3-70B-Instruct": {true, true},
		"HuggingFaceTB-SmolLM3-3B":          {true, true},
		"deepseek-ai-DeepSeek-V3.1":         {true, true},
		"moonshotai-Kimi-K2":                {true, true},
		"ibm-granite-granite-4.0":           {true, true},
		// Without a generation prompt it ends the text with eos_token.
		"microsoft-Phi-3.5-mini-instruct": {true, false},
		// The generation prompt opens a think block that the history
		// writes differently once the turn is done.
		"deepseek-ai-DeepSeek-R1-Distill-Llama-8B": {false, true},
		// Drop the reasoning of turns before the last user message.
		"Qwen-Qwen3-0.6B": {false, false},
		"GLM-4.6":         {false, false},
		// The last tool response has no newline before <|im_end|>; one
		// that is followed by another message has.
		"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": {false, false},
		"NousResearch-Hermes-3-Llama-3.1-8B-tool_use":   {false, false},
		// Put the system prompt (Nemo) or the tools (Small 3.2) in the last
		// user turn.
		"mistralai-Mistral-Nemo-Instruct-2407": {false, false},
		"Mistral-Small-3.2-24B-Instruct-2506":  {false, false},
	}
	templates := refTemplates(t)
	names := make([]string, 0, len(templates))
	for n := range templates {
		names = append(names, n)
	}
	sort.Strings(names)
	var strict, history, neither []string
	for _, n := range names {
		r, err := prefixStable(templates[n])
		switch {
		case err != nil:
			t.Logf("%s: renders no session (%v)", n, clip(err.Error(), 160))
		case r.strict:
			strict = append(strict, n)
		case r.history:
			history = append(history, n)
			t.Logf("%s: history-stable only: %s", n, r.where)
		default:
			neither = append(neither, n)
			t.Logf("%s: not prefix-stable: %s", n, r.where)
		}
		if w, pinned := want[n]; pinned && (err != nil || r.strict != w[0] || r.history != w[1]) {
			t.Errorf("%s: strict %v, history %v (err %v), want %v, %v", n, r.strict, r.history, err, w[0], w[1])
		}
	}
	for n := range want {
		if _, ok := templates[n]; !ok {
			t.Errorf("template %s is not in the llama.cpp source", n)
		}
	}
	t.Logf("prefix-stable with the generation prompt (%d): %s", len(strict), strings.Join(strict, ", "))
	t.Logf("prefix-stable without the generation prompt only (%d): %s", len(history), strings.Join(history, ", "))
	t.Logf("not prefix-stable (%d): %s", len(neither), strings.Join(neither, ", "))
}
