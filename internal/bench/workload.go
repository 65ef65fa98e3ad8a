package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"time"
)

// Message is one chat message. An assistant message with ToolCalls and no text goes out with
// "content": null, as OpenAI clients send it; a tool message names the call it answers.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

func msg(role, content string) Message { return Message{Role: role, Content: content} }

// MarshalJSON writes content as null for an assistant turn that only calls tools.
func (m Message) MarshalJSON() ([]byte, error) {
	w := struct {
		Role       string     `json:"role"`
		Content    *string    `json:"content"`
		ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
		ToolCallID string     `json:"tool_call_id,omitempty"`
	}{m.Role, &m.Content, m.ToolCalls, m.ToolCallID}
	if len(m.ToolCalls) > 0 && m.Content == "" {
		w.Content = nil
	}
	return json.Marshal(w)
}

// Step is one request of a script: the messages it adds.
type Step struct {
	Messages []Message
	// Reply, when set, is what an appending script adds to the transcript after this step in
	// place of the model's answer (the agent's tools mode: a tool call and its result), so the
	// next prompt does not depend on what was generated.
	Reply []Message
}

// Script is one session: steps run one after another, each starting when the previous ended.
// With Append, each step's request carries every earlier message and the actual answers (an
// append-only agent transcript), or each step's Reply where it has one; without it, each step
// is sent on its own.
type Script struct {
	Session int
	Append  bool
	Steps   []Step
	// Tools go in every request of the script, the same bytes each time (chat only).
	Tools []Tool
	// Trace replay: the raw request, sent at Offset after the run began.
	Raw    *TraceRecord
	Offset time.Duration
}

// TraceRecord is one line of a --trace file.
type TraceRecord struct {
	Timestamp float64         `json:"timestamp"` // seconds after the start of the trace
	Endpoint  string          `json:"endpoint"`  // "/v1/completions" or "/v1/chat/completions"
	Body      json.RawMessage `json:"body"`      // an OpenAI request body
}

// Workloads lists the workload names.
var Workloads = []string{"agent", "docqa", "sysprompt", "rag", "random", "trace", "longctx"}

// textGen makes word-list text of a roughly controlled token length. tokensPerWord is
// calibrated against the target's tokenizer when it has /tokenize.
type textGen struct {
	rng           *rand.Rand
	tokensPerWord float64
}

func (g *textGen) words(tokens int) string {
	n := max(1, int(math.Round(float64(tokens)/g.tokensPerWord)))
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			if i%12 == 0 {
				b.WriteString(". ")
			} else {
				b.WriteByte(' ')
			}
		}
		b.WriteString(wordList[g.rng.IntN(len(wordList))])
	}
	b.WriteByte('.')
	return b.String()
}

// BuildScripts returns the workload's scripts, a pure function of cfg (seed included) and the
// calibration tokensPerWord. Trace reads cfg.TraceFile.
func BuildScripts(cfg Config, tokensPerWord float64) ([]Script, error) {
	if tokensPerWord <= 0 {
		tokensPerWord = defaultTokensPerWord
	}
	g := &textGen{rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed_b0a7)), tokensPerWord: tokensPerWord}
	var out []Script
	switch cfg.Workload {
	case "agent":
		if cfg.Tools > 0 {
			out = agentToolScripts(cfg, g)
			break
		}
		// One tool schema shared by every session; each session then appends user messages
		// and the model's answers.
		schema := "You are a coding agent. Tools: " + g.words(cfg.PrefixTokens)
		for s := 0; s < cfg.Sessions; s++ {
			sc := Script{Session: s, Append: true}
			for t := 0; t < cfg.Turns; t++ {
				var msgs []Message
				if t == 0 {
					msgs = append(msgs, msg("system", schema))
				}
				msgs = append(msgs, msg("user", fmt.Sprintf("Task %d.%d: %s", s, t, g.words(cfg.TurnTokens))))
				sc.Steps = append(sc.Steps, Step{Messages: msgs})
			}
			out = append(out, sc)
		}
	case "docqa":
		// Sessions documents, Turns questions about each, asked one after another.
		for d := 0; d < cfg.Sessions; d++ {
			doc := fmt.Sprintf("Document %d. %s", d, g.words(cfg.DocTokens))
			sc := Script{Session: d}
			for q := 0; q < cfg.Turns; q++ {
				sc.Steps = append(sc.Steps, Step{Messages: []Message{
					msg("system", "Answer questions about the document.\n\n"+doc),
					msg("user", fmt.Sprintf("Question %d: %s", q, g.words(cfg.QuestionTokens))),
				}})
			}
			out = append(out, sc)
		}
	case "sysprompt":
		sys := "You are a helpful assistant. " + g.words(cfg.PrefixTokens)
		for s := 0; s < cfg.Sessions; s++ {
			sc := Script{Session: s}
			for q := 0; q < cfg.Turns; q++ {
				sc.Steps = append(sc.Steps, Step{Messages: []Message{
					msg("system", sys),
					msg("user", fmt.Sprintf("Question %d.%d: %s", s, q, g.words(cfg.QuestionTokens))),
				}})
			}
			out = append(out, sc)
		}
	case "rag":
		// A corpus of chunks; each request retrieves k of them by Zipf popularity (s = 1.1),
		// so a few chunks come back often. Chunks are ordered by id, so a popular first chunk
		// makes a shared prefix.
		const corpus, perRequest = 32, 3
		chunks := make([]string, corpus)
		for i := range chunks {
			chunks[i] = fmt.Sprintf("[chunk %d] %s", i, g.words(cfg.DocTokens/perRequest))
		}
		zipf := rand.NewZipf(g.rng, 1.1, 1, corpus-1)
		for s := 0; s < cfg.Sessions; s++ {
			sc := Script{Session: s}
			for q := 0; q < cfg.Turns; q++ {
				picked := map[uint64]bool{}
				for len(picked) < perRequest {
					picked[zipf.Uint64()] = true
				}
				var ctx strings.Builder
				for i := 0; i < corpus; i++ {
					if picked[uint64(i)] {
						ctx.WriteString(chunks[i])
						ctx.WriteString("\n\n")
					}
				}
				sc.Steps = append(sc.Steps, Step{Messages: []Message{
					msg("system", "Use the context to answer.\n\n"+ctx.String()),
					msg("user", fmt.Sprintf("Question %d.%d: %s", s, q, g.words(cfg.QuestionTokens))),
				}})
			}
			out = append(out, sc)
		}
	case "random":
		// Nothing shared: a random nonce leads every prompt. The control for cache overhead.
		for s := 0; s < cfg.Sessions; s++ {
			sc := Script{Session: s}
			for q := 0; q < cfg.Turns; q++ {
				sc.Steps = append(sc.Steps, Step{Messages: []Message{
					msg("user", fmt.Sprintf("%016x %s", g.rng.Uint64(), g.words(cfg.PrefixTokens+cfg.TurnTokens))),
				}})
			}
			out = append(out, sc)
		}
	case "longctx":
		// Not scripts: runLongCtx drives the server's cache admin API between its requests,
		// and each prompt's text is sized against the target's tokenizer as it goes.
		return nil, fmt.Errorf("workload longctx has no scripts: bench.Run runs it step by step")
	case "trace":
		recs, err := readTrace(cfg.TraceFile)
		if err != nil {
			return nil, err
		}
		for i := range recs {
			out = append(out, Script{Session: i, Raw: &recs[i], Offset: time.Duration(recs[i].Timestamp * float64(time.Second))})
		}
	default:
		return nil, fmt.Errorf("unknown workload %q (want one of %s)", cfg.Workload, strings.Join(Workloads, ", "))
	}
	return out, nil
}

// readTrace reads a JSONL trace: one {"timestamp", "endpoint", "body"} object a line.
func readTrace(path string) ([]TraceRecord, error) {
	if path == "" {
		return nil, fmt.Errorf("workload trace needs --trace FILE.jsonl")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []TraceRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		var r TraceRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if r.Endpoint == "" {
			r.Endpoint = "/v1/completions"
		}
		if r.Endpoint != "/v1/completions" && r.Endpoint != "/v1/chat/completions" {
			return nil, fmt.Errorf("%s:%d: endpoint %q: want /v1/completions or /v1/chat/completions", path, line, r.Endpoint)
		}
		if len(r.Body) == 0 || r.Body[0] != '{' {
			return nil, fmt.Errorf("%s:%d: body must be a JSON object", path, line)
		}
		if r.Timestamp < 0 {
			return nil, fmt.Errorf("%s:%d: negative timestamp %v", path, line, r.Timestamp)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no requests", path)
	}
	return out, nil
}

// agentToolScripts is the agent's tools mode: one system prompt and one tool list shared by
// every session, then per turn a user message, and after the answer a synthetic assistant turn
// calling one of the tools and the tool's result. The tools come from their own generator, so
// --tools does not change the text the other workloads get for a seed.
func agentToolScripts(cfg Config, g *textGen) []Script {
	ts := pickTools(newRand(cfg.Seed^0x7001), cfg.Tools)
	sys := "You are a coding agent working in the user's repository. Call the tools to inspect and " +
		"change the code; answer in plain text when the task is done. " + g.words(cfg.PrefixTokens)
	var out []Script
	for s := 0; s < cfg.Sessions; s++ {
		sc := Script{Session: s, Append: true, Tools: ts.tools}
		for t := 0; t < cfg.Turns; t++ {
			var st Step
			if t == 0 {
				st.Messages = append(st.Messages, msg("system", sys))
			}
			st.Messages = append(st.Messages, msg("user", fmt.Sprintf("Task %d.%d: %s", s, t, g.words(cfg.TurnTokens))))
			call := ts.call(g)
			st.Reply = []Message{
				{Role: "assistant", ToolCalls: []ToolCall{call}},
				{Role: "tool", ToolCallID: call.ID, Content: toolResult(g, call, cfg.ToolResultTokens)},
			}
			sc.Steps = append(sc.Steps, st)
		}
		out = append(out, sc)
	}
	return out
}

// renderCompletion turns messages into one completion prompt. It is append-only: the prompt
// for a longer transcript starts with the prompt for any shorter one plus its answer, which is
// what lets a prefix cache reuse it. An answer follows "Assistant:" with nothing added, as the
// generated text did; a tool call follows it as JSON, and a tool result is its own block.
func renderCompletion(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		switch m.Role {
		case "system":
			b.WriteString(m.Content)
			b.WriteString("\n\n")
		case "user":
			b.WriteString("User: ")
			b.WriteString(m.Content)
			b.WriteString("\n\nAssistant:")
		case "assistant":
			b.WriteString(m.Content)
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, " <tool_call>{\"name\": %q, \"arguments\": %s}</tool_call>", c.Function.Name, c.Function.Arguments)
			}
			b.WriteString("\n\n")
		case "tool":
			b.WriteString("Tool result: ")
			b.WriteString(m.Content)
			b.WriteString("\n\n")
		}
	}
	return b.String()
}

// renderTools is the tool list as the character-based prediction sees it: in front of the
// rendered messages, the same every turn.
func renderTools(tools []Tool) string {
	if len(tools) == 0 {
		return ""
	}
	b, err := json.Marshal(tools)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return "Tools: " + string(b) + "\n\n"
}

// wordList is plain English, so real tokenizers give about 1.3 tokens a word.
var wordList = strings.Fields(`the of and to in is that for it as with was on be by at this
from have or an are not but which all can will one they has more their were been would there
about if into time only other new some could these two may first then do any like my now over
such our man me even most made after also did many before must through back years where much
your way well down should because each just those people how too little state good very make
world still own see men work long get here between both life being under never day same
another know while last might us great old year off come since against go came right used
take three states himself few house use during without again place around however home small
found mrs thought went say part once general high upon school every does got united left
number course war until always away something fact though water less public put think almost
hand enough far took head yet government system better set told nothing night end why called
didn't eyes find going look asked later knew point next program city business give group
toward young days let room president side social given present several order national
possible rather second face per among form important often things looking early white case
john become large big need four within felt along children saw best church ever least power
development light thing seemed family interest want members mind country area others done
turned although open god service problem certain kind different thus began door help means
sense whole matter perhaps itself york times law human line above name example action company
hands local show whether five history gave today either act feet across taken past quite
anything having seen death experience body word half really week car field information
tool schema function argument parameter returns string integer boolean array object
request response error retry cache block prefix token model server client query index`)
