package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"

	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/grammar"
	"stockpot/internal/kernels"
	"stockpot/internal/model"
	"stockpot/internal/synth"
	"stockpot/internal/tokenizer"
)

var (
	qwenOnce  sync.Once
	qwenModel *model.Model
	qwenTok   *tokenizer.Tokenizer
	qwenErr   error
)

// tinyQwen2 is a random-weight model with a byte-level BPE vocabulary, and its tokenizer.
func tinyQwen2(t testing.TB) (*model.Model, *tokenizer.Tokenizer) {
	t.Helper()
	qwenOnce.Do(func() {
		w, err := synth.Build("tiny-qwen2", synth.Options{Seed: 5})
		if err != nil {
			qwenErr = err
			return
		}
		var buf bytes.Buffer
		if _, err = w.WriteTo(&buf); err != nil {
			qwenErr = err
			return
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			qwenErr = err
			return
		}
		if qwenTok, err = tokenizer.FromGGUF(f); err != nil {
			qwenErr = err
			return
		}
		qwenModel, qwenErr = model.Load(f, kernels.NewPool(2))
	})
	if qwenErr != nil {
		t.Fatal(qwenErr)
	}
	return qwenModel, qwenTok
}

// constrainSetup is tinyQwen2 with constrainSchema compiled over its vocabulary.
func constrainSetup(t *testing.T) (*model.Model, *tokenizer.Tokenizer, *grammar.Vocab, *grammar.Grammar) {
	t.Helper()
	m, tok := tinyQwen2(t)
	n, err := grammar.JSONSchema([]byte(constrainSchema))
	if err != nil {
		t.Fatal(err)
	}
	g, err := grammar.Compile(n)
	if err != nil {
		t.Fatal(err)
	}
	return m, tok, grammar.VocabFromTokenizer(tok), g
}

const constrainSchema = `{"type":"object","properties":{"name":{"type":"string","maxLength":8},"n":{"type":"integer","minimum":-5,"maximum":500},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","b",null]},"maxItems":3}},"required":["name","n","tags"]}`

// TestConstrainedOutputIsValid: a random-weight model under a bounded schema ends with
// FinishStop and valid JSON in the schema's shape, greedy and seeded, and the outputs are
// bitwise the same with the prefix cache on and off (twice on, so the second run hits).
func TestConstrainedOutputIsValid(t *testing.T) {
	m, tok, vocab, g := constrainSetup(t)
	build := func(cache bool) *engine.Engine {
		cfg := engine.DefaultConfig()
		cfg.Identity = []byte("constrain-test")
		cfg.KVMemory = 8 << 20
		cfg.PrefixCache = cache
		cfg.EOG = tok.EOGs()
		e, err := engine.New(m, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		return e
	}
	prompt := tok.Encode("Answer in JSON: who are you? Answer in JSON: who are you? Answer in JSON.", true, false)
	type out struct {
		ids      []int32
		logprobs []float32
		finish   string
	}
	run := func(e *engine.Engine, sp engine.SamplingParams) out {
		sp.Constraint = g.NewMatcher(vocab)
		ch, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt, MaxTokens: 400, Sampling: sp, Logprobs: 3})
		if err != nil {
			t.Fatal(err)
		}
		var o out
		for x := range ch {
			if x.Err != nil {
				t.Fatal(x.Err)
			}
			for _, tk := range x.Tokens {
				o.ids = append(o.ids, tk.ID)
				o.logprobs = append(o.logprobs, tk.Logprob)
				if math.IsInf(float64(tk.Logprob), 0) || math.IsNaN(float64(tk.Logprob)) || tk.Logprob > 0 {
					t.Errorf("token %d logprob %v", tk.ID, tk.Logprob)
				}
				for _, alt := range tk.Top {
					if math.IsInf(float64(alt.Logprob), 0) {
						t.Errorf("masked token %d listed among alternatives", alt.ID)
					}
				}
			}
			if x.Done {
				o.finish = x.FinishReason
			}
		}
		return o
	}
	off, on := build(false), build(true)
	for _, sp := range []engine.SamplingParams{
		{},
		{Temperature: 1, Seed: 3, HasSeed: true},
		{Temperature: 0.7, TopK: 50, TopP: 0.9, Seed: 9, HasSeed: true},
	} {
		want := run(off, sp)
		if want.finish != engine.FinishStop {
			t.Fatalf("%+v: finish %q after %d tokens, want stop", sp, want.finish, len(want.ids))
		}
		text := tok.Decode(want.ids)
		var v struct {
			Name *string `json:"name"`
			N    *int    `json:"n"`
			Tags []any   `json:"tags"`
		}
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatalf("%+v: output %q is not JSON: %v", sp, text, err)
		}
		if v.Name == nil || v.N == nil || v.Tags == nil || *v.N < -5 || *v.N > 500 || len([]rune(*v.Name)) > 8 || len(v.Tags) > 3 {
			t.Errorf("%+v: output %s breaks the schema", sp, text)
		}
		t.Logf("%+v: %d tokens: %s", sp, len(want.ids), text)
		for pass := range 2 {
			got := run(on, sp)
			if fmt.Sprint(got.ids) != fmt.Sprint(want.ids) || got.finish != want.finish {
				t.Errorf("%+v pass %d: cache on %v %s, off %v %s", sp, pass, got.ids, got.finish, want.ids, want.finish)
			}
			for i := range min(len(got.logprobs), len(want.logprobs)) {
				if math.Float32bits(got.logprobs[i]) != math.Float32bits(want.logprobs[i]) {
					t.Errorf("%+v pass %d token %d: logprob %v vs %v", sp, pass, i, got.logprobs[i], want.logprobs[i])
				}
			}
		}
	}
}

// stuck allows one token and then nothing.
type stuck struct{ steps int }

func (s *stuck) FillMask(mask []uint64) {
	if s.steps == 0 {
		mask[0] |= 1 << 40
	}
}
func (s *stuck) Accept(int32) error { s.steps++; return nil }
func (s *stuck) Complete() bool     { return false }
func (s *stuck) Done() bool         { return false }

// TestConstraintAllowsNothing: a constraint that allows no token ends the request with an
// error wrapping ErrConstraint, after the tokens it did allow.
func TestConstraintAllowsNothing(t *testing.T) {
	e := newEngine(t, nil)
	ch, err := e.Generate(context.Background(), &engine.Request{Prompt: seqPrompt(1, 5), MaxTokens: 10, Sampling: engine.SamplingParams{Constraint: &stuck{}}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	var last engine.Output
	for o := range ch {
		for _, tk := range o.Tokens {
			ids = append(ids, tk.ID)
		}
		last = o
	}
	if fmt.Sprint(ids) != "[40]" || !errors.Is(last.Err, engine.ErrConstraint) || last.FinishReason != engine.FinishStop {
		t.Errorf("tokens %v, final %+v; want [40] then an ErrConstraint error", ids, last)
	}
}
