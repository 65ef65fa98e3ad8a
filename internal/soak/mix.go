package soak

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// Kind is what an op does.
type Kind uint8

const (
	Completion Kind = iota // POST /v1/completions
	Chat                   // POST /v1/chat/completions, one turn of a multi-turn session
	Stream                 // a chat or completion, streamed
	Tools                  // a chat with tools and a forced call
	Cancel                 // a request the client gives up on before it ends
	Disconnect             // a stream the client stops reading after a few chunks
	nKinds
)

var kindNames = [...]string{"completion", "chat", "stream", "tools", "cancel", "disconnect"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Op is one request of the mixture.
type Op struct {
	ID   int
	Kind Kind
	// Via is the replica the request goes to directly, or -1 for the router.
	Via  int
	Path string // /v1/completions or /v1/chat/completions
	// Body is the request as sent (with "stream" when streamed).
	Body []byte
	// OracleBody is the same request, not streamed: what the oracle answers. Ops whose
	// answers are not judged (cancels, disconnects) have none.
	OracleBody []byte
	Stream     bool
	// AbortAfterMillis (Cancel) is when the client gives up; AbortChunks (Disconnect) how
	// many chunks it reads first.
	AbortAfterMillis int
	AbortChunks      int
	// Handoff: the op is handed off as vLLM's proxy does it: the prefill request to replica
	// Prefill, then the same request with the prefill's kv_transfer_params to replica Via
	// (a decode replica).
	Handoff bool
	Prefill int
}

// Target names where op goes: "1" (a replica), "router", or "0>2" (prefill 0, decode 2).
func (op *Op) Target() string {
	switch {
	case op.Handoff:
		return fmt.Sprintf("%d>%d", op.Prefill, op.Via)
	case op.Via < 0:
		return "router"
	}
	return fmt.Sprint(op.Via)
}

// Key is the oracle's key for op: its path and non-streamed body.
func (op *Op) Key() string { return op.Path + "\x00" + string(op.OracleBody) }

// MixConfig shapes the mixture.
type MixConfig struct {
	Seed     uint64
	Replicas int  // replicas that take direct requests
	Router   bool // some requests go through the router
	// SharedPrompts is how many system prompts the shared requests draw from; PromptWords
	// bounds their length in words.
	SharedPrompts int
	PromptWords   int
	// MaxTokens bounds plain answers; tool calls get ToolMaxTokens (random weights need room
	// to close a constrained call).
	MaxTokens     int
	ToolMaxTokens int
	// Weights of the kinds, in Kind order; zero weights drop a kind.
	Weights [nKinds]int
	// Prefills and Decodes (a prefill/decode run): replicas [0, Prefills) are prefill
	// replicas and the next Decodes decode replicas; HandoffPercent of the judged ops are
	// handed off from a prefill to a decode. The other ops go to any replica (every role
	// serves a plain request) or the router.
	Prefills, Decodes, HandoffPercent int
}

// DefaultMix is the mixture `stockpot soak` runs.
func DefaultMix(seed uint64, replicas int, router bool) MixConfig {
	return MixConfig{
		Seed: seed, Replicas: replicas, Router: router,
		SharedPrompts: 6, PromptWords: 420, MaxTokens: 12, ToolMaxTokens: 96,
		Weights: [nKinds]int{Completion: 30, Chat: 25, Stream: 20, Tools: 10, Cancel: 8, Disconnect: 7},
	}
}

// words is the vocabulary prompts are drawn from: common words, so that the tokenizer makes
// ordinary tokens of them.
var words = strings.Fields(`the of and to in is was for on that with as by at from it his an were are which this be
or has had not first one their its new after who they have her she two been other when there all during into
school time may years more most only over city some world would where later up such used many can state about
national out known university united then made also system prompt tool answer question model cache block token
river music house water light paper garden window kitchen stock pot soup bread table chair market garden road
north south east west morning evening winter summer number letter voice story group point order office`)

// Generator makes the ops of one mixture, in order. It is deterministic in its config.
type Generator struct {
	cfg      MixConfig
	rng      *rand.Rand
	systems  []string
	sessions []*session
	next     int
	total    int
}

type session struct {
	system string
	msgs   []map[string]any
	turns  int
}

// NewGenerator returns the mixture's generator.
func NewGenerator(cfg MixConfig) *Generator {
	g := &Generator{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))}
	for i := range max(cfg.SharedPrompts, 1) {
		n := cfg.PromptWords/2 + g.rng.IntN(cfg.PromptWords/2+1)
		g.systems = append(g.systems, fmt.Sprintf("System prompt %d. ", i)+g.text(n))
	}
	for _, w := range cfg.Weights {
		g.total += w
	}
	return g
}

func (g *Generator) text(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(words[g.rng.IntN(len(words))])
	}
	return b.String()
}

// questions are the user turns shared prompts end with: few, so exact repeats happen.
var questions = []string{"Summarize the above.", "What is the first word?", "Name three things.", "Continue the story.", "Answer briefly."}

func (g *Generator) kind() Kind {
	r := g.rng.IntN(max(g.total, 1))
	for k, w := range g.cfg.Weights {
		if r < w {
			return Kind(k)
		}
		r -= w
	}
	return Completion
}

func (g *Generator) via() int {
	n := g.cfg.Replicas
	if g.cfg.Router {
		if g.rng.IntN(2) == 0 || n == 0 {
			return -1
		}
	}
	return g.rng.IntN(max(n, 1))
}

// prompt is a shared system prompt and a common question (most of the time), or a prompt
// nobody else sends.
func (g *Generator) prompt() string {
	if g.rng.IntN(4) == 0 {
		return fmt.Sprintf("Unshared %d. ", g.next) + g.text(20+g.rng.IntN(g.cfg.PromptWords))
	}
	return g.systems[g.rng.IntN(len(g.systems))] + "\n" + questions[g.rng.IntN(len(questions))]
}

// Next returns the next op.
func (g *Generator) Next() *Op {
	op := &Op{ID: g.next, Via: g.via()}
	g.next++
	op.Kind = g.kind()
	req := map[string]any{"temperature": 0, "max_tokens": g.cfg.MaxTokens}
	chat := g.rng.IntN(2) == 0
	switch op.Kind {
	case Chat:
		chat = true
		g.chatTurn(req)
	case Tools:
		chat = true
		g.toolTurn(req)
	case Completion:
		chat = false
	}
	if chat && req["messages"] == nil {
		req["messages"] = []map[string]any{{"role": "system", "content": g.prompt()}, {"role": "user", "content": questions[g.rng.IntN(len(questions))]}}
	}
	if !chat {
		req["prompt"] = g.prompt()
	}
	op.Path = "/v1/completions"
	if chat {
		op.Path = "/v1/chat/completions"
	}
	op.OracleBody = mustJSON(req)
	switch op.Kind {
	case Stream, Disconnect:
		op.Stream = true
	case Cancel:
		op.Stream = g.rng.IntN(2) == 0
		req["max_tokens"] = 64
		op.AbortAfterMillis = 1 + g.rng.IntN(60)
	}
	if op.Kind == Tools && g.rng.IntN(2) == 0 {
		op.Stream = true
	}
	if op.Kind == Disconnect {
		req["max_tokens"] = 64
		op.AbortChunks = 1 + g.rng.IntN(3)
	}
	if op.Stream {
		req["stream"] = true
		req["stream_options"] = map[string]any{"include_usage": true}
	}
	op.Body = mustJSON(req)
	if op.Kind == Cancel || op.Kind == Disconnect {
		op.OracleBody = nil
	}
	if c := g.cfg; c.Prefills > 0 && c.Decodes > 0 && op.OracleBody != nil && g.rng.IntN(100) < c.HandoffPercent {
		op.Handoff, op.Prefill, op.Via = true, g.rng.IntN(c.Prefills), c.Prefills+g.rng.IntN(c.Decodes)
	}
	return op
}

// chatTurn continues (or starts) a session: its history grows by a user turn each time, and
// the assistant turns in it are fixed texts, so the prompt extends the previous one.
func (g *Generator) chatTurn(req map[string]any) {
	var s *session
	if len(g.sessions) > 0 && g.rng.IntN(4) != 0 {
		s = g.sessions[g.rng.IntN(len(g.sessions))]
	} else {
		s = &session{system: g.systems[g.rng.IntN(len(g.systems))]}
		s.msgs = []map[string]any{{"role": "system", "content": s.system}}
		g.sessions = append(g.sessions, s)
		if len(g.sessions) > 12 {
			g.sessions = g.sessions[1:]
		}
	}
	if s.turns > 0 {
		s.msgs = append(s.msgs, map[string]any{"role": "assistant", "content": fmt.Sprintf("Turn %d answer: %s", s.turns, g.text(8))})
	}
	s.turns++
	s.msgs = append(s.msgs, map[string]any{"role": "user", "content": fmt.Sprintf("Turn %d: %s", s.turns, g.text(12))})
	req["messages"] = append([]map[string]any(nil), s.msgs...)
	if s.turns >= 8 { // a finished session makes room for a new one
		for i, x := range g.sessions {
			if x == s {
				g.sessions = append(g.sessions[:i], g.sessions[i+1:]...)
				break
			}
		}
	}
}

// toolSchemas bound their instances, so a constrained call ends.
var toolSchemas = []string{
	`{"type":"object","properties":{"unit":{"enum":["celsius","fahrenheit"]},"ok":{"type":"boolean"}},"required":["unit","ok"],"additionalProperties":false}`,
	`{"type":"object","properties":{"days":{"type":"integer","minimum":1,"maximum":9}},"required":["days"],"additionalProperties":false}`,
}

func (g *Generator) toolTurn(req map[string]any) {
	var tools []any
	for i, s := range toolSchemas {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
			"name": fmt.Sprintf("tool_%d", i), "description": "A tool the model may call.", "parameters": json.RawMessage(s)}})
	}
	req["tools"] = tools
	req["messages"] = []map[string]any{{"role": "system", "content": g.systems[g.rng.IntN(len(g.systems))]}, {"role": "user", "content": "Use a tool."}}
	req["max_tokens"] = g.cfg.ToolMaxTokens
	if g.rng.IntN(2) == 0 {
		req["tool_choice"] = "required"
	} else {
		req["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": fmt.Sprintf("tool_%d", g.rng.IntN(len(toolSchemas)))}}
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the mixture's own values always marshal
	}
	return b
}
