package model_test

import (
	"math"
	"path/filepath"
	"testing"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

// TestDecodeStreamsBatch checks the determinism rule for continuous-batching decode: several
// streams decoding one token each in one Forward (their attention in one parallel loop, long
// and short contexts, and one stream's prefill chunk in the same step) give bitwise the logits
// each stream gets alone, whether the logits rows lie back to back in one buffer (written in
// place by the output head) or apart (copied out).
func TestDecodeStreamsBatch(t *testing.T) {
	for _, typ := range []gguf.Type{gguf.TypeQ8_0, gguf.TypeF16} {
		t.Run(typ.String(), func(t *testing.T) {
			for _, threads := range []int{1, 2, 3} {
				pool := kernels.NewPool(threads)
				defer pool.Close()
				w, err := synth.Build("tiny-kquant", synth.Options{Seed: 7, Type: typ})
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(t.TempDir(), "m.gguf")
				if err := w.WriteFile(path); err != nil {
					t.Fatal(err)
				}
				f, err := gguf.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				m, err := model.Load(f, pool)
				if err != nil {
					t.Fatal(err)
				}
				vocab := m.Config().Vocab
				prompt := func(n, salt int) []int32 {
					p := make([]int32, n)
					for i := range p {
						p[i] = int32((i*7919 + salt*131 + 13) % vocab)
					}
					return p
				}
				// Streams: prompt lengths, then 3 decode steps each.
				lens := []int{700, 5, 300, 640}
				const steps = 3
				maxTok := 720
				toks := make([][]int32, len(lens))
				want := make([][][]float32, len(lens)) // [stream][step] logits alone
				for s, n := range lens {
					toks[s] = prompt(n+steps, s)
					r := newRunner(t, m, maxTok, kvcache.F16)
					r.prefill(t, toks[s][:n], 256)
					for k := range steps {
						l := make([]float32, vocab)
						if err := m.Forward([]model.Sequence{{Tokens: toks[s][n+k : n+k+1], Pos: n + k, KV: r.kv, Logits: l}}); err != nil {
							t.Fatal(err)
						}
						want[s] = append(want[s], l)
					}
				}
				// Together. Stream 1's prompt is prefilled in the first step, beside the others'
				// decode tokens.
				rs := make([]*runner, len(lens))
				for s, n := range lens {
					rs[s] = newRunner(t, m, maxTok, kvcache.F16)
					if s != 1 {
						rs[s].prefill(t, toks[s][:n], 128)
					}
				}
				shared := make([]float32, len(lens)*vocab)
				for k := range steps {
					var seqs []model.Sequence
					var outs [][]float32
					for s, n := range lens {
						sq := model.Sequence{Tokens: toks[s][n+k : n+k+1], Pos: n + k, KV: rs[s].kv}
						if s == 1 && k == 0 {
							sq.Tokens, sq.Pos = toks[s][:n+1], 0
						}
						if k == 1 {
							sq.Logits = make([]float32, vocab) // apart: copied out
						} else {
							sq.Logits = shared[s*vocab : (s+1)*vocab] // back to back: in place
						}
						seqs = append(seqs, sq)
						outs = append(outs, sq.Logits)
					}
					if err := m.Forward(seqs); err != nil {
						t.Fatal(err)
					}
					for s := range lens {
						for i, v := range want[s][k] {
							if math.Float32bits(outs[s][i]) != math.Float32bits(v) {
								t.Fatalf("threads %d step %d stream %d logit %d: batched %v, alone %v (bitwise)", threads, k, s, i, outs[s][i], v)
							}
						}
					}
				}
			}
		})
	}
}
