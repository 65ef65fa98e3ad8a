package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/datadriven"

	"stockpot/internal/api"
	"stockpot/internal/gguf"
	"stockpot/internal/llamaref"
	"stockpot/internal/tokenizer"
)

var (
	realMu   sync.Mutex
	realToks = map[string]*tokenizer.Tokenizer{}
)

// realTokenizer is a real model's vocabulary (models/ggml-vocab-VOCAB.gguf of the llama.cpp
// source bundle) with a real chat template (models/templates/TEMPLATE.jinja) as its own.
func realTokenizer(tb testing.TB, vocab, template string) *tokenizer.Tokenizer {
	tb.Helper()
	realMu.Lock()
	defer realMu.Unlock()
	key := vocab + "|" + template
	if t := realToks[key]; t != nil {
		return t
	}
	b, err := llamaref.SourceFile("models/ggml-vocab-" + vocab + ".gguf")
	if err != nil {
		tb.Fatal(err)
	}
	src, err := llamaref.SourceFile("models/templates/" + template + ".jinja")
	if err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Parse(b)
	if err != nil {
		tb.Fatal(err)
	}
	w := gguf.NewWriter()
	for _, k := range f.Keys() {
		if !strings.HasPrefix(k, tokenizer.KeyChatTemplate) {
			v, _ := f.Value(k)
			w.Set(k, v)
		}
	}
	w.Set(tokenizer.KeyChatTemplate, string(src))
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		tb.Fatal(err)
	}
	g, err := gguf.Parse(buf.Bytes())
	if err != nil {
		tb.Fatal(err)
	}
	t, err := tokenizer.FromGGUF(g)
	if err != nil {
		tb.Fatal(err)
	}
	realToks[key] = t
	return t
}

// TestPipelineScript steps requests through a pipeline over real vocabularies and templates
// (testdata/pipeline.txt), with no server:
//
//	model vocab=V template=T [context=N] [max-prompt=N]: a new pipeline
//	chat | completion | messages | responses  (the request body as input): what it builds
//	render path=P (the body as input): RenderRequest, as stockpot lint sees the body
func TestPipelineScript(t *testing.T) {
	var p *Pipeline
	var tok Tokenizer
	datadriven.RunTest(t, "testdata/pipeline.txt", func(t *testing.T, d *datadriven.TestData) string {
		body := []byte(d.Input)
		switch d.Cmd {
		case "model":
			var vocab, template string
			d.ScanArgs(t, "vocab", &vocab)
			d.ScanArgs(t, "template", &template)
			cfg := Config{ContextLength: 4096, MaxPromptTokens: 4095}
			if d.HasArg("context") {
				d.ScanArgs(t, "context", &cfg.ContextLength)
				cfg.MaxPromptTokens = cfg.ContextLength - 1
			}
			if d.HasArg("max-prompt") {
				d.ScanArgs(t, "max-prompt", &cfg.MaxPromptTokens)
			}
			tok = FromTokenizer(realTokenizer(t, vocab, template))
			p = New(tok, cfg)
			return fmt.Sprintf("bos %d, vocabulary %d", p.BOS(), tok.VocabSize())
		case "chat":
			req, err := api.ParseChatRequest(body)
			if err != nil {
				return "parse: " + err.Error()
			}
			spec, plan, err := p.ChatCompletion(context.Background(), req)
			return describe(tok, spec, plan, err)
		case "completion":
			req, err := api.ParseCompletionRequest(body)
			if err != nil {
				return "parse: " + err.Error()
			}
			spec, err := p.Completion(req)
			return describe(tok, spec, nil, err)
		case "messages":
			req, err := api.ParseMessagesRequest(body, false)
			if err != nil {
				return "parse: " + err.Error()
			}
			spec, plan, err := p.Messages(context.Background(), req)
			return describe(tok, spec, plan, err)
		case "responses":
			req, err := api.ParseResponsesRequest(body)
			if err != nil {
				return "parse: " + err.Error()
			}
			_, spec, plan, err := p.Responses(context.Background(), req, nil)
			return describe(tok, spec, plan, err)
		case "render":
			var path string
			d.ScanArgs(t, "path", &path)
			r, err := RenderRequest(tok, path, body)
			if err != nil {
				return "error: " + err.Error()
			}
			var b strings.Builder
			fmt.Fprintf(&b, "%d tokens, salt %q\n", len(r.Tokens), r.Salt)
			for _, s := range r.Segments {
				fmt.Fprintf(&b, "segment %s %d %s at token %d\n", s.Kind, s.Index, s.Role, s.Token)
			}
			return b.String()
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
}

// describe prints what a builder made: the prompt as the template wrote it (control tokens as
// their text), the engine request's limits, the plan, or the error as the client reads it.
func describe(tok Tokenizer, spec *Spec, plan *Plan, err error) string {
	if err != nil {
		e := api.AsError(err)
		return fmt.Sprintf("error %d %s: %s", e.Status, e.Param, e.Message)
	}
	var b strings.Builder
	var text strings.Builder
	for _, id := range spec.Req.Prompt {
		text.Write(tok.Piece(id))
	}
	fmt.Fprintf(&b, "prompt %d tokens, max_tokens %d, logprobs %d, salt %q\n", len(spec.Req.Prompt), spec.Req.MaxTokens, spec.Req.Logprobs, spec.Req.CacheSalt)
	fmt.Fprintf(&b, "text %q\n", text.String())
	if len(spec.Stops) > 0 {
		fmt.Fprintf(&b, "stops %q\n", spec.Stops)
	}
	if bs := spec.Req.Blend; bs != nil {
		fmt.Fprintf(&b, "blend recompute %v, policy %s\n", bs.Recompute, bs.Policy)
		for _, c := range bs.Chunks {
			part := ""
			for _, bp := range spec.BlendParts {
				if bp.Chunk == c {
					part = " " + bp.Param
				}
			}
			var ct strings.Builder
			for _, id := range spec.Req.Prompt[c.Start:c.End] {
				ct.Write(tok.Piece(id))
			}
			fmt.Fprintf(&b, "chunk [%d, %d)%s %q\n", c.Start, c.End, part, ct.String())
		}
	}
	for _, pin := range spec.Req.Pins {
		fmt.Fprintf(&b, "pin %d tokens for %v\n", pin.Tokens, pin.TTL)
	}
	if plan != nil {
		fmt.Fprintf(&b, "plan family %s, parse calls %v, forced %v, reasoning %v, control text %v, constrained %v\n",
			plan.Family, plan.ParseCalls, plan.ForcedCalls, plan.Reasoning, plan.ControlText, spec.Req.Sampling.Constraint != nil)
	}
	for _, s := range spec.Segments {
		fmt.Fprintf(&b, "segment %s %d %s at token %d\n", s.Kind, s.Index, s.Role, s.Token)
	}
	return b.String()
}
