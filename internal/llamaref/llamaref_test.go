package llamaref

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyModel is written once by TestMain; every test that runs llama.cpp uses it.
var tinyModel string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "llamaref-test-")
	if err != nil {
		panic(err)
	}
	tinyModel, err = writeTinyLlama(dir)
	if err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestNotInstalled(t *testing.T) {
	t.Setenv("STOCKPOT_LLAMAREF_DIR", t.TempDir())
	_, err := Tokenize(tinyModel, []string{"x"}, true, false)
	if !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Tokenize without an install: err = %v, want ErrNotInstalled", err)
	}
	if !strings.Contains(err.Error(), `run "make deps"`) {
		t.Errorf("error %q does not say run \"make deps\"", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		in      Options
		want    Options
		wantErr bool
	}{
		{in: Options{}, want: Options{Threads: 2, KVType: "F32", BatchSize: 512}},
		{in: Options{KVType: "f16", ContextSize: 256}, want: Options{Threads: 2, KVType: "F16", BatchSize: 256, ContextSize: 256}},
		{in: Options{KVType: "q8_0"}, want: Options{Threads: 2, KVType: "Q8_0", BatchSize: 512}},
		{in: Options{KVType: "q4_0"}, wantErr: true},
		{in: Options{TopK: -1}, wantErr: true},
	} {
		have, err := tc.in.validate()
		if (err != nil) != tc.wantErr {
			t.Errorf("%+v.validate(): err = %v, wantErr %v", tc.in, err, tc.wantErr)
			continue
		}
		if err == nil && have != tc.want {
			t.Errorf("%+v.validate() = %+v, want %+v", tc.in, have, tc.want)
		}
	}
}

// TestReference runs one llama.cpp process (one model load) for most checks:
// each process costs seconds on a busy machine.
func TestReference(t *testing.T) {
	b := NewBatch(tinyModel)
	mi := b.Metadata()
	texts := []string{"hello world", "the <s>cat", ""}
	plain := b.Tokenize(texts, false, false)
	special := b.Tokenize(texts, true, true)
	p := []int32{1, 262, 271, 272, 290, 281, 282, 263}
	prompts := [][]int32{p, p[:3], p, {1}}
	const nGen = 6
	ev := b.Evaluate(prompts, nGen, Options{TopK: 5, AllPositions: true})
	long := append(slices.Clone(p), 270, 300)
	base := b.Evaluate([][]int32{long}, 4, Options{})
	chunked := b.Evaluate([][]int32{long}, 4, Options{BatchSize: 3, KVType: "F16", Threads: 1})
	// One thread: 2 threads on a busy 2-core machine measure scheduling, not llama.cpp.
	speed := b.Speed(64, 8, 1)
	if err := b.Run(); err != nil {
		t.Fatal(err)
	}
	vocab := 3 + 256 + len(tinyPieces)

	t.Run("Metadata", func(t *testing.T) {
		if mi.Architecture != "llama" || mi.VocabSize != vocab || mi.NCtxTrain != tinyLlama.ctx ||
			mi.NEmbd != tinyLlama.embd || mi.NLayer != tinyLlama.layers || !mi.AddBOS || mi.BOS == nil || *mi.BOS != 1 {
			t.Errorf("Metadata = %+v, want llama, vocab %d, n_ctx_train %d, n_embd %d, %d layers, BOS 1 added",
				mi, vocab, tinyLlama.ctx, tinyLlama.embd, tinyLlama.layers)
		}
		if mi.NodeLlamaCpp != Version || mi.LlamaCppRelease == "" {
			t.Errorf("reference build: node-llama-cpp %q llama.cpp %q, want %s and a release", mi.NodeLlamaCpp, mi.LlamaCppRelease, Version)
		}
	})
	t.Run("Tokenize", func(t *testing.T) {
		plain, special := *plain, *special
		// add_special prepends BOS (1); parse_special turns "<s>" into BOS too.
		for i := range texts {
			if len(special[i]) == 0 || special[i][0] != 1 {
				t.Errorf("Tokenize(%q, addSpecial) = %v, want a leading BOS", texts[i], special[i])
			}
		}
		if slices.Contains(plain[1], 1) || !slices.Contains(special[1][1:], 1) {
			t.Errorf("%q: without parse_special %v (want no BOS), with it %v (want BOS inside)", texts[1], plain[1], special[1])
		}
		if len(plain[2]) != 0 || !slices.Equal(special[2], []int32{1}) {
			t.Errorf("empty text: %v and %v, want [] and [1]", plain[2], special[2])
		}
		db := NewBatch(tinyModel)
		back := db.Detokenize([][]int32{plain[0], special[1]}, false)
		backSpecial := db.Detokenize([][]int32{special[1]}, true)
		if err := db.Run(); err != nil {
			t.Fatal(err)
		}
		if (*back)[0] != "hello world" || strings.Contains((*back)[1], "<s>") || !strings.Contains((*back)[1], "cat") {
			t.Errorf("Detokenize = %q, want \"hello world\" and text with no <s>", *back)
		}
		if strings.Count((*backSpecial)[0], "<s>") != 2 {
			t.Errorf("Detokenize(special) = %q, want both <s> rendered", (*backSpecial)[0])
		}
	})
	t.Run("Evaluate", func(t *testing.T) { checkEvaluate(t, prompts, nGen, vocab, *ev) })
	t.Run("ChunkedF16", func(t *testing.T) {
		if d := maxAbsDiff((*base)[0].LastLogprobs, (*chunked)[0].LastLogprobs); d > 1e-2 {
			t.Errorf("batch 3 + f16 K/V vs batch 512 + f32 K/V: logprobs differ by %g", d)
		}
	})
	t.Run("Speed", func(t *testing.T) {
		s := *speed
		if s.PromptTokens != 64 || s.GenTokens != 8 || s.Threads != 1 || !(s.PromptTokensPerSec > 0) || !(s.GenTokensPerSec > 0) {
			t.Errorf("Speed = %+v", s)
		}
		t.Logf("prebuilt llama.cpp, tiny model: prompt %.0f tok/s, decode %.0f tok/s", s.PromptTokensPerSec, s.GenTokensPerSec)
	})
}

func argmax(v []float32) int32 {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return int32(best)
}

func maxAbsDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		if math.IsInf(float64(a[i]), -1) && math.IsInf(float64(b[i]), -1) {
			continue
		}
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// checkEvaluate checks prompts {p, p[:3], p, [BOS]} evaluated with TopK 5 and AllPositions.
func checkEvaluate(t *testing.T, prompts [][]int32, nGen, vocab int, rs []Result) {
	for i, r := range rs {
		if len(r.Continuation) != nGen || len(r.LastLogprobs) != vocab || len(r.Top) != 5 || len(r.AllLogprobs) != len(prompts[i]) {
			t.Fatalf("prompt %d: %d continuation tokens, %d logprobs, top %d, %d position vectors; want %d, %d, 5, %d",
				i, len(r.Continuation), len(r.LastLogprobs), len(r.Top), len(r.AllLogprobs), nGen, vocab, len(prompts[i]))
		}
		sum := 0.0
		for _, lp := range r.LastLogprobs {
			sum += math.Exp(float64(lp))
		}
		if math.Abs(sum-1) > 1e-5 {
			t.Errorf("prompt %d: probabilities sum to %v", i, sum)
		}
		if top := argmax(r.LastLogprobs); r.Continuation[0] != top || r.Top[0].Token != top || r.Top[0].Logprob != r.LastLogprobs[top] {
			t.Errorf("prompt %d: greedy %d, top-1 %+v, argmax %d: want all equal", i, r.Continuation[0], r.Top[0], top)
		}
		if !slices.Equal(r.AllLogprobs[len(r.AllLogprobs)-1], r.LastLogprobs) {
			t.Errorf("prompt %d: last AllLogprobs vector differs from LastLogprobs", i)
		}
	}
	// Same prompt, same call: bitwise the same (each prompt starts from an empty cache).
	if !slices.Equal(rs[0].LastLogprobs, rs[2].LastLogprobs) || !slices.Equal(rs[0].Continuation, rs[2].Continuation) {
		t.Errorf("prompt evaluated twice gives different results")
	}
	// The log-probabilities after p[:3] inside the long prompt are those of prompt p[:3],
	// up to batch-shape rounding.
	if d := maxAbsDiff(rs[0].AllLogprobs[2], rs[1].LastLogprobs); d > 1e-4 {
		t.Errorf("logprobs after p[:3]: within p and alone differ by %g", d)
	}
	if d := maxAbsDiff(rs[0].AllLogprobs[0], rs[3].LastLogprobs); d > 1e-4 {
		t.Errorf("logprobs after [BOS]: within p and alone differ by %g", d)
	}
}

func TestEvaluateErrors(t *testing.T) {
	// Two bad requests in one process: Run reports both.
	b := NewBatch(tinyModel)
	b.Evaluate([][]int32{{1, 99999}}, 1, Options{})
	b.Evaluate([][]int32{{1}}, 1000, Options{ContextSize: 256})
	err := b.Run()
	if err == nil || !strings.Contains(err.Error(), "out of range") || !strings.Contains(err.Error(), "needs 1001 positions") {
		t.Errorf("bad token id and prompt past the context: err = %v, want both reported", err)
	}
	_, err = Evaluate(tinyModel, [][]int32{{1}}, -1, Options{})
	if err == nil || !strings.Contains(err.Error(), "nGen") {
		t.Errorf("nGen -1: err = %v", err)
	}
	_, err = Evaluate(filepath.Join(t.TempDir(), "missing.gguf"), [][]int32{{1}}, 1, Options{})
	if err == nil || !strings.Contains(err.Error(), "missing.gguf") {
		t.Errorf("missing model: err = %v, want it to name the file", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.gguf")
	if err := os.WriteFile(bad, []byte("GGUF not really"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Evaluate(bad, [][]int32{{1}}, 1, Options{})
	if err == nil || !strings.Contains(err.Error(), "cannot load") {
		t.Errorf("corrupt model: err = %v, want cannot load", err)
	}
}

func TestSourceFile(t *testing.T) {
	files, err := SourceFiles("models/templates")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range files {
		if f == "models/templates/Qwen-Qwen2.5-7B-Instruct.jinja" {
			found = true
		}
	}
	if !found {
		t.Fatalf("Qwen2.5 template not listed among %d files", len(files))
	}
	b, err := SourceFile("models/templates/Qwen-Qwen2.5-7B-Instruct.jinja")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("<tool_call>")) {
		t.Fatalf("Qwen2.5 template has no <tool_call>: %.200q", b)
	}
	if _, err := SourceFile("models/no-such-file"); err == nil {
		t.Fatal("missing file: no error")
	}
}
