package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"stockpot/internal/engine"
	"stockpot/internal/pipeline"
)

// fakeTok is a byte-level tokenizer: 0 = <s> (BOS), 1 = </s> (EOS), 2+b = byte b.
type fakeTok struct{}

const (
	fakeBOS   = 0
	fakeEOS   = 1
	fakeVocab = 258
)

func (fakeTok) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	var ids []int32
	if addSpecial {
		ids = append(ids, fakeBOS)
	}
	for i := 0; i < len(text); {
		if parseSpecial && strings.HasPrefix(text[i:], "<s>") {
			ids, i = append(ids, fakeBOS), i+3
			continue
		}
		if parseSpecial && strings.HasPrefix(text[i:], "</s>") {
			ids, i = append(ids, fakeEOS), i+4
			continue
		}
		ids, i = append(ids, int32(text[i])+2), i+1
	}
	return ids
}

func (fakeTok) bytes(ids []int32) []byte {
	var b []byte
	for _, id := range ids {
		if id >= 2 {
			b = append(b, byte(id-2))
		}
	}
	return b
}

func (t fakeTok) Decode(ids []int32) string {
	return strings.ToValidUTF8(string(t.bytes(ids)), "\uFFFD")
}

func (t fakeTok) DecodeChecked(ids []int32) (string, error) {
	for _, id := range ids {
		if id < 0 || id >= fakeVocab {
			return "", fmt.Errorf("token %d out of range", id)
		}
	}
	return t.Decode(ids), nil
}

func (fakeTok) NewStreamDecoder() pipeline.StreamDecoder { return &fakeStream{} }

// fakeTemplate is what fakeTok says its template is: enough for toolcall.Detect to see the
// Hermes syntax and for the server to see think blocks.
const fakeTemplate = "{%- if tools %}<tools>{{ tools | tojson }}</tools> <tool_call> {%- endif %}"

func (fakeTok) ChatTemplate(tools bool) string { return fakeTemplate }

func (fakeTok) Piece(id int32) []byte {
	switch {
	case id == fakeBOS:
		return []byte("<s>")
	case id == fakeEOS:
		return []byte("</s>")
	case id >= 2 && id < fakeVocab:
		return []byte{byte(id - 2)}
	}
	return nil
}

func (fakeTok) IsControl(id int32) bool { return id < 2 }
func (fakeTok) EOGs() []int32           { return []int32{fakeEOS} }

func (fakeTok) ApplyChatTemplate(msgs []pipeline.Message, opts pipeline.ChatOptions) (string, error) {
	var b strings.Builder
	b.WriteString("<s>")
	for _, t := range opts.Tools {
		fmt.Fprintf(&b, "<|tool|>%s\n", t)
	}
	for _, m := range msgs {
		if m.Content == "TEMPLATE_ERROR" {
			return "", errors.New("roles must alternate")
		}
		fmt.Fprintf(&b, "<|%s|>%s", m.Role, m.Content)
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, "<call %s %s %s>", c.ID, c.Function.Name, c.Function.Arguments)
		}
		if m.ToolCallID != "" {
			fmt.Fprintf(&b, "<result %s>", m.ToolCallID)
		}
		b.WriteString("\n")
	}
	if opts.AddGenerationPrompt {
		b.WriteString("<|assistant|>")
	}
	return b.String(), nil
}

func (fakeTok) VocabSize() int      { return fakeVocab }
func (fakeTok) IsEOG(id int32) bool { return id == fakeEOS }
func (fakeTok) AddBOS() bool        { return true }

// fakeStream emits complete UTF-8 only.
type fakeStream struct{ buf []byte }

func (s *fakeStream) Add(id int32) string {
	if id < 2 {
		return ""
	}
	s.buf = append(s.buf, byte(id-2))
	k := 0
	for k < len(s.buf) {
		r, n := utf8.DecodeRune(s.buf[k:])
		if r == utf8.RuneError && n <= 1 && !utf8.FullRune(s.buf[k:]) {
			break // incomplete character: hold it
		}
		k += n
	}
	out := strings.ToValidUTF8(string(s.buf[:k]), "\uFFFD")
	s.buf = s.buf[k:]
	return out
}

func (s *fakeStream) Flush() string {
	out := strings.ToValidUTF8(string(s.buf), "\uFFFD")
	s.buf = nil
	return out
}

// fakeGen is a deterministic engine. It emits the bytes of text (as fakeTok ids), perOutput
// tokens per message, then EOS; or, with block set, waits for cancellation after the text.
type fakeGen struct {
	text      string
	perOutput int
	block     bool
	delay     time.Duration
	ids       []int32 // when set, emitted instead of text's ids
	genErr    error   // returned by Generate
	streamErr error   // sent as Output.Err after the text
	stoppedBy string  // Usage.StoppedBy of a generation that ends with length

	mu        sync.Mutex
	reqs      []engine.Request
	cancelled atomic.Int32
	cancelCh  chan struct{} // gets a value each time a request ends by cancellation
	started   chan struct{} // gets a value (while it has room) each time Generate takes a request
}

func newFakeGen(text string) *fakeGen {
	return &fakeGen{text: text, perOutput: 1, cancelCh: make(chan struct{}, 16), started: make(chan struct{}, 16)}
}

func (g *fakeGen) Stats() engine.Stats {
	return engine.Stats{Running: 1, Waiting: 2, KVBlocksTotal: 100, KVBlocksUsed: 10, KVBlocksCached: 5, KVBlockBytes: 4096, Evictions: 7}
}

func (g *fakeGen) lastRequest() engine.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.reqs[len(g.reqs)-1]
}

func fakeUsage(n int) engine.Usage {
	dev, host := n/2, n/8
	return engine.Usage{PromptTokens: n, DeviceTokens: dev, HostTokens: host, ComputedTokens: n - dev - host,
		DiscardedTokens: n / 16, QueueMs: 0.25, RestoreMs: 0.5, PrefillMs: 2, TTFTMs: 3.125, DecodeMs: 10}
}

func (g *fakeGen) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Output, error) {
	if req.CacheSalt == "panic" {
		panic("fake engine panic")
	}
	if g.genErr != nil {
		return nil, g.genErr
	}
	g.mu.Lock()
	g.reqs = append(g.reqs, *req)
	g.mu.Unlock()
	select {
	case g.started <- struct{}{}:
	default:
	}
	ids := fakeTok{}.Encode(g.text, false, true)
	if g.ids != nil {
		ids = slices.Clone(g.ids)
	}
	if !g.block {
		ids = append(ids, fakeEOS)
	}
	ch := make(chan engine.Output, 1)
	go func() {
		defer close(ch)
		u := fakeUsage(len(req.Prompt))
		emitted := 0
		finish := func(reason string) {
			u.CompletionTokens = emitted
			if reason == engine.FinishLength {
				u.StoppedBy = g.stoppedBy
			}
			ch <- engine.Output{Done: true, FinishReason: reason, Usage: &u}
		}
		for i := 0; ; {
			var batch []engine.Token
			reason := ""
			for len(batch) < g.perOutput && (i < len(ids) || req.IgnoreEOS && len(ids) > 0) {
				id := ids[i%len(ids)]
				t := engine.Token{ID: id, Logprob: -0.25 * float32(i%4)}
				for j := 0; j < req.Logprobs; j++ {
					alt := id
					if j > 0 {
						alt = 2 + (id+int32(j))%256
					}
					t.Top = append(t.Top, engine.TokenLogprob{ID: alt, Logprob: -0.5 * float32(j)})
				}
				batch = append(batch, t)
				i++
				if id == fakeEOS && !req.IgnoreEOS || slices.Contains(req.StopTokens, id) {
					reason = engine.FinishStop
					break
				}
				if emitted+len(batch) >= req.MaxTokens {
					reason = engine.FinishLength
					break
				}
			}
			if g.delay > 0 {
				time.Sleep(g.delay)
			}
			if len(batch) == 0 {
				if g.streamErr != nil {
					ch <- engine.Output{Err: g.streamErr}
					return
				}
				<-ctx.Done() // block mode
				g.cancelled.Add(1)
				g.cancelCh <- struct{}{}
				finish(engine.FinishCancelled)
				return
			}
			select {
			case ch <- engine.Output{Tokens: batch}:
				emitted += len(batch)
				if ctx.Err() != nil { // noticed at the step boundary, as an engine would
					g.cancelled.Add(1)
					g.cancelCh <- struct{}{}
					finish(engine.FinishCancelled)
					return
				}
			case <-ctx.Done():
				g.cancelled.Add(1)
				g.cancelCh <- struct{}{}
				finish(engine.FinishCancelled)
				return
			}
			if reason != "" {
				finish(reason)
				return
			}
		}
	}()
	return ch, nil
}
