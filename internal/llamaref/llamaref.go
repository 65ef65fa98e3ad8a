package llamaref

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Version is the node-llama-cpp version the reference is pinned to
// (tools/llamaref/package-lock.json).
const Version = "3.21.1"

// ErrNotInstalled means the node-llama-cpp reference is not installed.
// Errors wrapping it say what to run: run "make deps".
var ErrNotInstalled = errors.New(`llama.cpp reference (node-llama-cpp) is not installed: run "make deps"`)

// Options controls Evaluate. The zero value of a field means its default
// (DefaultOptions).
type Options struct {
	// Threads is the llama.cpp thread count (n_threads = n_threads_batch).
	Threads int
	// KVType is the K and V cache element type: "F32", "F16" or "Q8_0".
	// llama.cpp needs flash attention for a quantized V cache, so "Q8_0"
	// runs with flash attention on (its CPU kernel quantizes q to q8_0 for
	// the q·k dot and dequantizes V to f32); the others run with it off.
	KVType string
	// BatchSize is n_batch = n_ubatch: prompts longer than it are evaluated
	// in chunks of this many tokens. Default 512, capped at ContextSize.
	BatchSize int
	// ContextSize is n_ctx. 0 picks the smallest multiple of 256 that holds
	// the longest prompt plus nGen.
	ContextSize int
	// TopK, when > 0, also fills Result.Top with the TopK most likely tokens.
	TopK int
	// NoLogprobs skips Result.LastLogprobs (the vector is vocab-sized).
	NoLogprobs bool
	// AllPositions also fills Result.AllLogprobs, one vector per prompt position.
	AllPositions bool
}

// DefaultOptions returns the reference settings: 2 threads, f32 K/V,
// batch 512, full log-probability vector.
func DefaultOptions() Options {
	return Options{Threads: 2, KVType: "F32", BatchSize: 512}
}

// validate returns o with defaults filled in; o itself is not changed.
func (o Options) validate() (Options, error) {
	d := DefaultOptions()
	if o.Threads == 0 {
		o.Threads = d.Threads
	}
	if o.KVType == "" {
		o.KVType = d.KVType
	}
	o.KVType = strings.ToUpper(o.KVType)
	if o.BatchSize == 0 {
		o.BatchSize = d.BatchSize
		if o.ContextSize > 0 && o.ContextSize < o.BatchSize {
			o.BatchSize = o.ContextSize
		}
	}
	switch {
	case o.Threads < 0:
		return o, fmt.Errorf("llamaref: Threads %d < 0", o.Threads)
	case o.KVType != "F32" && o.KVType != "F16" && o.KVType != "Q8_0":
		return o, fmt.Errorf("llamaref: KVType %q, want F32, F16 or Q8_0", o.KVType)
	case o.BatchSize < 0, o.ContextSize < 0, o.TopK < 0:
		return o, fmt.Errorf("llamaref: negative BatchSize %d, ContextSize %d or TopK %d", o.BatchSize, o.ContextSize, o.TopK)
	}
	return o, nil
}

// TokenLogprob is one entry of a top-K list.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Result is what Evaluate returns for one prompt.
type Result struct {
	// Continuation holds the nGen greedy tokens after the prompt.
	Continuation []int32
	// LastLogprobs[id] is log P(id | prompt), vocab-sized; -Inf where the
	// float32 probability underflowed. Nil with Options.NoLogprobs.
	LastLogprobs []float32
	// Top holds the Options.TopK most likely next tokens, most likely first
	// (ties: lower id first).
	Top []TokenLogprob
	// AllLogprobs[i] is the log-probability vector after prompt[:i+1]
	// (Options.AllPositions only).
	AllLogprobs [][]float32
}

// ModelInfo is llama.cpp's view of a model, for sanity checks.
type ModelInfo struct {
	Architecture   string `json:"architecture"`
	VocabSize      int    `json:"vocab_size"`
	NCtxTrain      int    `json:"n_ctx_train"`
	NEmbd          int    `json:"n_embd"`
	NLayer         int    `json:"n_layer"`
	BOS            *int32 `json:"bos"`
	EOS            *int32 `json:"eos"`
	EOT            *int32 `json:"eot"`
	AddBOS         bool   `json:"add_bos"`
	VocabularyType string `json:"vocabulary_type"`
	SizeBytes      int64  `json:"size_bytes"`
	// NodeLlamaCpp and LlamaCppRelease identify the reference build.
	NodeLlamaCpp    string `json:"-"`
	LlamaCppRelease string `json:"-"`
}

// SpeedResult is a throughput measurement of the prebuilt reference. It is for
// information only: the prebuilt library is slower than a native build, so
// ratios must come from NativeBench.
type SpeedResult struct {
	PromptTokens       int     `json:"prompt_tokens"`
	GenTokens          int     `json:"gen_tokens"`
	Threads            int     `json:"threads"`
	BatchSize          int     `json:"batch_size"`
	KVType             string  `json:"kv_type"`
	PromptSeconds      float64 `json:"prompt_s"`
	GenSeconds         float64 `json:"gen_s"`
	PromptTokensPerSec float64 `json:"prompt_tokens_per_s"`
	GenTokensPerSec    float64 `json:"gen_tokens_per_s"`
}

// Batch collects requests for one llama.cpp process: the model is loaded once
// and the requests run in order. Each method returns a pointer that Run fills.
// A Batch is not safe for concurrent use and runs once.
type Batch struct {
	model   string
	threads int
	reqs    []any
	decode  []func(json.RawMessage) error
	ran     bool
}

// NewBatch starts an empty batch for model.
func NewBatch(model string) *Batch { return &Batch{model: model} }

func (b *Batch) add(req map[string]any, decode func(json.RawMessage) error) {
	b.reqs = append(b.reqs, req)
	b.decode = append(b.decode, decode)
}

// Tokenize tokenizes texts with llama.cpp: addSpecial adds BOS/EOS as the
// model's metadata asks, parseSpecial turns special-token text into the token.
func (b *Batch) Tokenize(texts []string, addSpecial, parseSpecial bool) *[][]int32 {
	out := new([][]int32)
	b.add(map[string]any{"op": "tokenize", "texts": texts, "add_special": addSpecial, "parse_special": parseSpecial},
		func(r json.RawMessage) error {
			var v struct {
				Tokens [][]int32 `json:"tokens"`
			}
			err := json.Unmarshal(r, &v)
			*out = v.Tokens
			return err
		})
	return out
}

// Detokenize turns each token sequence into text with llama_detokenize
// (remove_special=false, unparse_special=special). Bytes that are not valid
// UTF-8 come back as U+FFFD.
func (b *Batch) Detokenize(tokens [][]int32, special bool) *[]string {
	out := new([]string)
	b.add(map[string]any{"op": "detokenize", "tokens": tokens, "special": special},
		func(r json.RawMessage) error {
			var v struct {
				Texts []string `json:"texts"`
			}
			err := json.Unmarshal(r, &v)
			*out = v.Texts
			return err
		})
	return out
}

// Metadata asks for llama.cpp's view of the model.
func (b *Batch) Metadata() *ModelInfo {
	out := new(ModelInfo)
	b.add(map[string]any{"op": "version"}, func(r json.RawMessage) error {
		var v struct {
			NodeLlamaCpp    string `json:"node_llama_cpp"`
			LlamaCppRelease string `json:"llama_cpp_release"`
		}
		err := json.Unmarshal(r, &v)
		out.NodeLlamaCpp, out.LlamaCppRelease = v.NodeLlamaCpp, v.LlamaCppRelease
		return err
	})
	b.add(map[string]any{"op": "metadata"}, func(r json.RawMessage) error {
		n, l := out.NodeLlamaCpp, out.LlamaCppRelease
		err := json.Unmarshal(r, out)
		out.NodeLlamaCpp, out.LlamaCppRelease = n, l
		return err
	})
	return out
}

// Evaluate runs each prompt alone (empty K/V cache, positions from 0) and
// returns, per prompt, nGen greedy tokens and the log-probabilities at the last
// prompt position. Option errors are reported by Run.
func (b *Batch) Evaluate(prompts [][]int32, nGen int, opts Options) *[]Result {
	out := new([]Result)
	o, err := opts.validate()
	if err == nil && nGen < 0 {
		err = fmt.Errorf("llamaref: nGen %d < 0", nGen)
	}
	req := map[string]any{
		"op": "evaluate", "prompts": prompts, "n_gen": nGen, "top_k": o.TopK,
		"kv_type": o.KVType, "batch_size": o.BatchSize, "context_size": o.ContextSize, "threads": o.Threads,
		"logprobs": "full", "positions": "last",
	}
	if o.NoLogprobs {
		req["logprobs"] = "none"
	}
	if o.AllPositions {
		req["positions"] = "all"
	}
	if err != nil {
		req = map[string]any{"op": "invalid", "error": err.Error()}
	}
	b.add(req, func(r json.RawMessage) error {
		res, err := decodeEvaluate(r, len(prompts))
		*out = res
		return err
	})
	return out
}

// Speed measures the prebuilt reference: prompt evaluation of promptTokens
// pseudo-random tokens (batch min(512, promptTokens), F16 K/V as llama-bench's
// default), then genTokens greedy decode steps. For information only; see
// SpeedResult.
func (b *Batch) Speed(promptTokens, genTokens, threads int) *SpeedResult {
	if threads <= 0 {
		threads = DefaultOptions().Threads
	}
	out := new(SpeedResult)
	b.add(map[string]any{
		"op": "speed", "prompt_tokens": promptTokens, "gen_tokens": genTokens, "threads": threads, "kv_type": "F16",
	}, func(r json.RawMessage) error { return json.Unmarshal(r, out) })
	return out
}

// Run starts llama.cpp once, runs every request and fills the results. It
// returns every request's error, joined.
func (b *Batch) Run() error {
	if b.ran {
		return errors.New("llamaref: Batch.Run called twice")
	}
	b.ran = true
	for _, r := range b.reqs {
		if m, ok := r.(map[string]any); ok && m["op"] == "invalid" {
			return errors.New(m["error"].(string))
		}
	}
	raw, err := call(b.model, b.threads, b.reqs)
	if err != nil {
		return err
	}
	for i, r := range raw {
		if err := b.decode[i](r); err != nil {
			return fmt.Errorf("llamaref: decode reply to request %d: %w", i, err)
		}
	}
	return nil
}

// Tokenize is NewBatch(model).Tokenize(...) run alone.
func Tokenize(model string, texts []string, addSpecial, parseSpecial bool) ([][]int32, error) {
	b := NewBatch(model)
	out := b.Tokenize(texts, addSpecial, parseSpecial)
	return *out, b.Run()
}

// Detokenize is NewBatch(model).Detokenize(...) run alone.
func Detokenize(model string, tokens [][]int32, special bool) ([]string, error) {
	b := NewBatch(model)
	out := b.Detokenize(tokens, special)
	return *out, b.Run()
}

// Metadata is NewBatch(model).Metadata() run alone.
func Metadata(model string) (ModelInfo, error) {
	b := NewBatch(model)
	out := b.Metadata()
	return *out, b.Run()
}

// Evaluate is NewBatch(model).Evaluate(...) run alone; see Batch.Evaluate.
// All prompts share one model load.
func Evaluate(model string, prompts [][]int32, nGen int, opts Options) ([]Result, error) {
	b := NewBatch(model)
	out := b.Evaluate(prompts, nGen, opts)
	return *out, b.Run()
}

// Speed is NewBatch(model).Speed(...) run alone; see Batch.Speed.
func Speed(model string, promptTokens, genTokens, threads int) (SpeedResult, error) {
	b := NewBatch(model)
	out := b.Speed(promptTokens, genTokens, threads)
	return *out, b.Run()
}

func decodeEvaluate(raw json.RawMessage, nPrompts int) ([]Result, error) {
	var out struct {
		Results []struct {
			Continuation []int32  `json:"continuation"`
			Logprobs     string   `json:"logprobs"`
			Top          [][2]any `json:"top"`
			AllLogprobs  []string `json:"all_logprobs"`
		} `json:"results"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, err
	}
	rs := out.Results
	if len(rs) != nPrompts {
		return nil, fmt.Errorf("evaluate returned %d results for %d prompts", len(rs), nPrompts)
	}
	res := make([]Result, len(rs))
	for i, r := range rs {
		res[i].Continuation = r.Continuation
		if res[i].Continuation == nil {
			res[i].Continuation = []int32{}
		}
		var err error
		if r.Logprobs != "" {
			if res[i].LastLogprobs, err = decodeF32(r.Logprobs); err != nil {
				return nil, fmt.Errorf("prompt %d: %w", i, err)
			}
		}
		for _, p := range r.AllLogprobs {
			v, err := decodeF32(p)
			if err != nil {
				return nil, fmt.Errorf("prompt %d: %w", i, err)
			}
			res[i].AllLogprobs = append(res[i].AllLogprobs, v)
		}
		for _, t := range r.Top {
			id, ok1 := t[0].(float64)
			lp, ok2 := jsonFloat(t[1])
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("prompt %d: bad top-k entry %v", i, t)
			}
			res[i].Top = append(res[i].Top, TokenLogprob{Token: int32(id), Logprob: float32(lp)})
		}
	}
	return res, nil
}

// jsonFloat reads a JSON number; JSON.stringify writes -Infinity as null.
func jsonFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case nil:
		return math.Inf(-1), true
	}
	return 0, false
}

// decodeF32 decodes base64 little-endian float32s.
func decodeF32(s string) ([]float32, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("bad float32 blob: %w", err)
	}
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("float32 blob of %d bytes is not a multiple of 4", len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// callTimeout only stops a hung reference process: a speed run on a real model
// at 2 threads can take minutes.
const callTimeout = 20 * time.Minute

// call runs ref.mjs on one document and returns its results, one per request.
// threads <= 0 leaves the script's default.
func call(model string, threads int, requests []any) ([]json.RawMessage, error) {
	dir, script, err := locate()
	if err != nil {
		return nil, err
	}
	if model != "" {
		abs, err := filepath.Abs(model)
		if err != nil {
			return nil, fmt.Errorf("llamaref: model path %q: %w", model, err)
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("llamaref: model: %w", err)
		}
		model = abs
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("llamaref: node (Node.js >= 20) not found in PATH: %w; install it, then run \"make deps\"", err)
	}
	doc := map[string]any{"model": model, "requests": requests}
	if threads > 0 {
		doc["threads"] = threads
	}
	in, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("llamaref: encode request: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "STOCKPOT_LLAMAREF_DIR="+dir)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()

	var reply struct {
		Error   string            `json:"error"`
		Results []json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &reply); err != nil {
		return nil, fmt.Errorf("llamaref: %s: %v; no JSON reply (%v); stderr:\n%s", script, runErr, err, tail(stderr.String(), 4000))
	}
	if reply.Error != "" {
		if strings.Contains(reply.Error, `run "make deps"`) {
			return nil, fmt.Errorf("llamaref: %s: %w", reply.Error, ErrNotInstalled)
		}
		return nil, fmt.Errorf("llamaref: %s", reply.Error)
	}
	if len(reply.Results) != len(requests) {
		return nil, fmt.Errorf("llamaref: %d results for %d requests (%v); stderr:\n%s", len(reply.Results), len(requests), runErr, tail(stderr.String(), 4000))
	}
	var errs []error
	for _, r := range reply.Results {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(r, &e) == nil && e.Error != "" {
			errs = append(errs, errors.New("llamaref: "+e.Error))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if runErr != nil {
		return nil, fmt.Errorf("llamaref: %s: %w; stderr:\n%s", script, runErr, tail(stderr.String(), 4000))
	}
	return reply.Results, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// locate returns the reference install dir and the ref.mjs path, or an error
// wrapping ErrNotInstalled.
func locate() (dir, script string, err error) {
	root, rootErr := repoRoot()
	dir = os.Getenv("STOCKPOT_LLAMAREF_DIR")
	if dir == "" {
		if rootErr != nil {
			return "", "", fmt.Errorf("llamaref: %v; set STOCKPOT_LLAMAREF_DIR or %w", rootErr, ErrNotInstalled)
		}
		dir = filepath.Join(root, ".cache", "llamaref")
	}
	if rootErr != nil {
		return "", "", fmt.Errorf("llamaref: %w (tools/llamaref/ref.mjs is needed from the checkout)", rootErr)
	}
	script = filepath.Join(root, "tools", "llamaref", "ref.mjs")
	if _, err := os.Stat(script); err != nil {
		return "", "", fmt.Errorf("llamaref: %w", err)
	}
	pkg := filepath.Join(dir, "node_modules", "node-llama-cpp", "package.json")
	b, err := os.ReadFile(pkg)
	if err != nil {
		return "", "", fmt.Errorf("llamaref: no node-llama-cpp in %s: %w", dir, ErrNotInstalled)
	}
	var p struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(b, &p) != nil || p.Version != Version {
		return "", "", fmt.Errorf("llamaref: node-llama-cpp %q in %s, want %s: %w", p.Version, dir, Version, ErrNotInstalled)
	}
	return dir, script, nil
}

// repoRoot finds the checkout root: first from this source file's location,
// then upward from the working directory, looking for the stockpot go.mod.
func repoRoot() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for {
			if isRoot(d) {
				return d, nil
			}
			up := filepath.Dir(d)
			if up == d {
				break
			}
			d = up
		}
	}
	return "", errors.New("cannot find the stockpot checkout (a go.mod with module stockpot)")
}

func isRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == "stockpot"
		}
	}
	return false
}
