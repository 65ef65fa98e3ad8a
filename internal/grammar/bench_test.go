package grammar

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"stockpot/internal/engine"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

// The peer for mask costs is one decode step of the model `stockpot serve` embeds (preset
// "default"), measured in the same run: a 64-token generation's decode time per token.
var (
	decodeOnce sync.Once
	decodeStep time.Duration
)

func measureDecodeStep(b *testing.B) time.Duration {
	decodeOnce.Do(func() {
		w, err := synth.Build("default", synth.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			b.Fatal(err)
		}
		f, err := gguf.Parse(buf.Bytes())
		if err != nil {
			b.Fatal(err)
		}
		m, err := model.Load(f, kernels.NewPool(0))
		if err != nil {
			b.Fatal(err)
		}
		cfg := engine.DefaultConfig()
		cfg.Identity = []byte("grammar-bench")
		cfg.KVMemory = 64 << 20
		e, err := engine.New(m, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer e.Close()
		best := time.Duration(1 << 62)
		for r := range 3 {
			prompt := []int32{1, 2, 3, 4, 5, 6, 7, int32(8 + r)}
			const n = 64
			ch, err := e.Generate(context.Background(), &engine.Request{Prompt: prompt, MaxTokens: n, IgnoreEOS: true})
			if err != nil {
				b.Fatal(err)
			}
			for o := range ch {
				if o.Done {
					best = min(best, time.Duration(o.Usage.DecodeMs*float64(time.Millisecond)/(n-1)))
				}
			}
		}
		decodeStep = best
	})
	return decodeStep
}

const benchSchema = `{"type":"object","properties":{"name":{"type":"string"},"bio":{"type":"string","maxLength":2000},"age":{"type":"integer","minimum":0,"maximum":150},"score":{"type":"number","minimum":-10.5,"maximum":99.25},"tags":{"type":"array","items":{"type":"string","maxLength":20},"maxItems":8}},"required":["name","bio","age","score","tags"]}`

// BenchmarkMask: FillMask on the 151,936-token Qwen2 vocabulary at several positions.
// "memo" is the steady state (the mask of an equivalent state was computed before: every
// position of a long string, every repeat of a request's schema); "scan" is the trie walk a
// new state costs (with the lazy DFA already built). mask/decode is the ratio to one decode
// step of the default model, measured in the same run.
func BenchmarkMask(b *testing.B) {
	v, _ := qwen2Vocab(b)
	step := measureDecodeStep(b)
	b.Logf("decode step of the default model: %v", step)
	g := mustCompile(b, mustSchema(b, benchSchema))
	for _, pos := range []struct{ name, prefix string }{
		{"object-start", ``},
		{"key", `{"name":"Ann",`},
		{"long-string", `{"name":"` + "lorem ipsum dolor sit amet, consectetur"},
		{"bounded-string", `{"name":"Ann","bio":"` + "lorem ipsum dolor sit amet"},
		{"number", `{"name":"Ann","bio":"","age":1`},
		{"fraction", `{"name":"Ann","bio":"","age":1,"score":12.`},
	} {
		m := g.NewMatcher(v)
		if err := m.AcceptBytes([]byte(pos.prefix)); err != nil {
			b.Fatalf("%s: %v", pos.name, err)
		}
		mask := make([]uint64, v.MaskWords())
		m.FillMask(mask)
		report := func(b *testing.B) {
			per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(per/float64(step.Nanoseconds()), "mask/decode")
		}
		b.Run(pos.name+"/memo", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m.FillMask(mask)
			}
			report(b)
		})
		b.Run(pos.name+"/scan", func(b *testing.B) {
			b.ReportAllocs()
			t := m.t
			for b.Loop() {
				t.mu.Lock()
				t.scan(m.state, mask)
				t.mu.Unlock()
			}
			report(b)
		})
	}
}

// BenchmarkGenerate: the grammar's whole cost per generated token over a random generation
// (FillMask, Accept, and picking a random allowed token), for a fresh schema each generation ("cold":
// compile and lazy DFA included) and for a schema seen before ("warm").
func BenchmarkGenerate(b *testing.B) {
	v, _ := qwen2Vocab(b)
	step := measureDecodeStep(b)
	schema := `{"type":"object","properties":{"name":{"type":"string","maxLength":40},"age":{"type":"integer","minimum":0,"maximum":150},"tags":{"type":"array","items":{"type":"string","maxLength":10},"maxItems":4},"ok":{"type":"boolean"}},"required":["name","age","tags","ok"]}`
	run := func(b *testing.B, fresh bool) {
		b.ReportAllocs()
		rnd := rand.New(rand.NewPCG(1, 2))
		mask := make([]uint64, v.MaskWords())
		var ids []int32
		tokens := 0
		var g *Grammar
		for b.Loop() {
			if g == nil || fresh {
				n, err := JSONSchema([]byte(schema))
				if err != nil {
					b.Fatal(err)
				}
				if g, err = Compile(n); err != nil {
					b.Fatal(err)
				}
			}
			m := g.NewMatcher(v)
			for !m.Done() {
				m.FillMask(mask)
				tok := pickAllowed(rnd, mask, v.n, &ids)
				if err := m.Accept(tok); err != nil {
					b.Fatal(err)
				}
				tokens++
				if v.isEOS[tok] {
					break
				}
			}
		}
		per := float64(b.Elapsed().Nanoseconds()) / float64(tokens)
		b.ReportMetric(per, "ns/token")
		b.ReportMetric(per/float64(step.Nanoseconds()), "token/decode")
	}
	b.Run("cold", func(b *testing.B) { run(b, true) })
	b.Run("warm", func(b *testing.B) { run(b, false) })
}

// pickAllowed draws a uniformly random allowed token: by rejection when many are allowed
// (so the benchmark measures the grammar, not listing 150K ids), else from the list.
func pickAllowed(rnd *rand.Rand, mask []uint64, n int, ids *[]int32) int32 {
	for range 64 {
		t := rnd.IntN(n)
		if mask[t/64]>>(t%64)&1 == 1 {
			return int32(t)
		}
	}
	*ids = allowedTokens(mask, *ids)
	return (*ids)[rnd.IntN(len(*ids))]
}

// BenchmarkCompile: schema to grammar (JSONSchema includes Compile).
func BenchmarkCompile(b *testing.B) {
	for _, s := range []struct{ name, schema string }{
		{"bench", benchSchema},
		{"bounded", boundedSchemas[1]},
		{"json-object", ""},
	} {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.schema == "" {
					if _, err := Compile(JSONObject()); err != nil {
						b.Fatal(err)
					}
					continue
				}
				if _, err := JSONSchema([]byte(s.schema)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNewVocab: building the trie of the Qwen2 vocabulary (once per model).
func BenchmarkNewVocab(b *testing.B) {
	_, tok := qwen2Vocab(b)
	b.ReportAllocs()
	for b.Loop() {
		VocabFromTokenizer(tok)
	}
}
