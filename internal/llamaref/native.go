package llamaref

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrNativeNotBuilt means the native llama.cpp binaries are missing. Errors
// wrapping it say what to run: run scripts/build-llama-native.sh.
var ErrNativeNotBuilt = errors.New("native llama.cpp is not built: run scripts/build-llama-native.sh")

// BenchOptions controls NativeBench. The zero value means the defaults.
type BenchOptions struct {
	// KVType is the K and V cache type: "f16" (default), "bf16" or "q8_0".
	// llama-bench at this llama.cpp version has no f32 K/V (its -ctk parser
	// does not accept f32), so "f32" is an error rather than a silent f16.
	KVType string
	// Repetitions per test (llama-bench -r). Default 3.
	Repetitions int
	// BatchSize and UBatchSize are llama-bench -b and -ub; 0 keeps its
	// defaults (2048 and 512).
	BatchSize, UBatchSize int
}

// BenchResult is one llama-bench test: a prompt-processing test (NPrompt > 0,
// NGen == 0) or a generation test (NPrompt == 0, NGen > 0).
type BenchResult struct {
	Test               string    `json:"-"` // "pp512", "tg64", as llama-bench names them
	NPrompt            int       `json:"n_prompt"`
	NGen               int       `json:"n_gen"`
	NDepth             int       `json:"n_depth"`
	Threads            int       `json:"n_threads"`
	NBatch             int       `json:"n_batch"`
	NUBatch            int       `json:"n_ubatch"`
	TypeK              string    `json:"type_k"`
	TypeV              string    `json:"type_v"`
	FlashAttn          int       `json:"flash_attn"` // -1 auto, 0 off, 1 on
	AvgNs              float64   `json:"avg_ns"`
	StddevNs           float64   `json:"stddev_ns"`
	TokensPerSec       float64   `json:"avg_ts"`
	StddevTokensPerSec float64   `json:"stddev_ts"`
	SamplesNs          []float64 `json:"samples_ns"`
	SamplesTokensPerS  []float64 `json:"samples_ts"`
	BuildCommit        string    `json:"build_commit"`
	CPUInfo            string    `json:"cpu_info"`
	ModelType          string    `json:"model_type"`
	ModelParams        int64     `json:"model_n_params"`
}

// NativeBench runs the native llama-bench on model: one prompt-processing test
// per entry of promptTokens and one generation test of genTokens tokens (0
// skips it), with threads threads, flash attention off (on for a quantized K/V
// type such as q8_0, which llama.cpp requires) and mmap on; every test
// starts from an empty cache. It returns the tests in llama-bench's order.
//
// The binaries are found in .cache/llama.cpp-build/bin of the checkout, or in
// $STOCKPOT_LLAMA_NATIVE_BIN.
func NativeBench(model string, promptTokens []int, genTokens, threads int, opts BenchOptions) ([]BenchResult, error) {
	if threads <= 0 {
		return nil, fmt.Errorf("llamaref: NativeBench threads %d, want > 0", threads)
	}
	if len(promptTokens) == 0 && genTokens <= 0 {
		return nil, errors.New("llamaref: NativeBench needs prompt tokens or generation tokens")
	}
	kv := strings.ToLower(opts.KVType)
	if kv == "" {
		kv = "f16"
	}
	if kv == "f32" {
		return nil, errors.New("llamaref: llama-bench cannot use f32 K/V at this llama.cpp version (-ctk accepts f16, bf16, q8_0, q4_0, ...)")
	}
	// llama.cpp refuses a quantized V cache without flash attention.
	fa := "0"
	if kv != "f16" && kv != "bf16" {
		fa = "1"
	}
	reps := opts.Repetitions
	if reps <= 0 {
		reps = 3
	}
	pp := make([]string, 0, len(promptTokens))
	for _, p := range promptTokens {
		if p <= 0 {
			return nil, fmt.Errorf("llamaref: NativeBench prompt size %d, want > 0", p)
		}
		pp = append(pp, strconv.Itoa(p))
	}
	if len(pp) == 0 {
		pp = []string{"0"}
	}
	args := []string{
		"-m", model, "-o", "json",
		"-t", strconv.Itoa(threads),
		"-p", strings.Join(pp, ","),
		"-n", strconv.Itoa(max(genTokens, 0)),
		"-fa", fa,
		"-ctk", kv, "-ctv", kv,
		"-r", strconv.Itoa(reps),
	}
	if opts.BatchSize > 0 {
		args = append(args, "-b", strconv.Itoa(opts.BatchSize))
	}
	if opts.UBatchSize > 0 {
		args = append(args, "-ub", strconv.Itoa(opts.UBatchSize))
	}
	bench, err := NativeBinary("llama-bench")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(model); err != nil {
		return nil, fmt.Errorf("llamaref: model: %w", err)
	}
	cmd := exec.Command(bench, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("llamaref: %s %s: %w; stderr:\n%s", bench, strings.Join(args, " "), err, tail(stderr.String(), 4000))
	}
	rs, err := parseBench(stdout.Bytes())
	if err != nil {
		return nil, fmt.Errorf("llamaref: llama-bench output: %w; stderr:\n%s", err, tail(stderr.String(), 2000))
	}
	return rs, nil
}

// parseBench decodes llama-bench -o json output.
func parseBench(b []byte) ([]BenchResult, error) {
	var rs []BenchResult
	if err := json.Unmarshal(b, &rs); err != nil {
		return nil, err
	}
	for i := range rs {
		r := &rs[i]
		switch {
		case r.NPrompt > 0 && r.NGen == 0:
			r.Test = "pp" + strconv.Itoa(r.NPrompt)
		case r.NPrompt == 0 && r.NGen > 0:
			r.Test = "tg" + strconv.Itoa(r.NGen)
		default:
			r.Test = fmt.Sprintf("pp%d+tg%d", r.NPrompt, r.NGen)
		}
		if r.NDepth > 0 {
			r.Test += "@d" + strconv.Itoa(r.NDepth)
		}
	}
	return rs, nil
}

// NativeBinary returns the path of a native llama.cpp tool ("llama-bench",
// "llama-server", "llama-cli"), or an error wrapping ErrNativeNotBuilt.
func NativeBinary(name string) (string, error) {
	dir := os.Getenv("STOCKPOT_LLAMA_NATIVE_BIN")
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", fmt.Errorf("llamaref: %v; set STOCKPOT_LLAMA_NATIVE_BIN or %w", err, ErrNativeNotBuilt)
		}
		dir = filepath.Join(root, ".cache", "llama.cpp-build", "bin")
	}
	p := filepath.Join(dir, name)
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("llamaref: no %s in %s: %w", name, dir, ErrNativeNotBuilt)
	}
	return p, nil
}
