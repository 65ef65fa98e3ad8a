package enginebench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/cpu"

	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/kvcache"
	"stockpot/internal/llamaref"
	"stockpot/internal/model"
	"stockpot/internal/quant"
	"stockpot/internal/synth"
)

const (
	threads = 2
	preset  = "smollm-135m"
	// The multi-stream decode test, as llama-batched-bench runs it: every stream first
	// prefills streamPrompt tokens of its own, then all streams decode streamGen tokens in
	// lockstep, one token each per step (the engine's continuous batching does the same:
	// one Forward per step over every running sequence).
	streams      = 4
	streamPrompt = 128
	streamGen    = 64
	decodeTokens = 64
	// rounds of every test per engine; the table keeps each engine's best round. On a shared
	// machine a round can lose its CPU to other processes, llama.cpp's spinning OpenMP
	// barriers more than Stockpot's blocking pool (one slow thread stalls every graph node),
	// so the best round is the fair figure for both.
	rounds = 3
)

// benchTests reads STOCKPOT_BENCH_TESTS, a comma list of pp512, pp2048, tg and batched that
// narrows a run to those tests (all when unset), and STOCKPOT_BENCH_ROUNDS (default rounds),
// for quick same-run comparisons while working on one kernel. The table then leaves the
// other cells out.
func benchTests() (map[string]bool, int) {
	on := map[string]bool{}
	if v := os.Getenv("STOCKPOT_BENCH_TESTS"); v != "" {
		for _, t := range strings.Split(v, ",") {
			on[strings.TrimSpace(t)] = true
		}
	} else {
		for _, t := range []string{"pp512", "pp2048", "tg", "served", "batched"} {
			on[t] = true
		}
	}
	n := rounds
	if v, err := strconv.Atoi(os.Getenv("STOCKPOT_BENCH_ROUNDS")); err == nil && v > 0 {
		n = v
	}
	return on, n
}

// weightKinds are the table's rows: the synth type and the name llama.cpp gives the mix.
// synth's Q4_K is llama-quantize's Q4_K_M mix (Q6_K, Q8_0 and Q5_0 where it puts them).
type weightKind struct {
	name string
	t    gguf.Type
}

var weightKinds = []weightKind{
	{"f32", gguf.TypeF32},
	{"f16", gguf.TypeF16},
	{"Q8_0", gguf.TypeQ8_0},
	{"Q4_K_M", gguf.TypeQ4_K},
	{"Q6_K", gguf.TypeQ6_K},
}

// kquantPreset is the K-quant row's model: every matrix row length a multiple of 256, so its
// Q4_K_M mix is Q4_K and Q6_K throughout (smollm-135m's 576-wide rows fall back to Q5_0 and
// Q8_0 in most tensors).
const kquantPreset = "kquant-80m"

// tableModel is one model of BenchmarkVsLlamaCpp's table: a preset in one weight kind.
type tableModel struct {
	preset string
	kind   weightKind
}

// tableModels are the table's rows: preset in every weight kind, then kquantPreset in the
// Q4_K_M mix.
func tableModels() []tableModel {
	var out []tableModel
	for _, k := range weightKinds {
		out = append(out, tableModel{preset, k})
	}
	return append(out, tableModel{kquantPreset, weightKind{"Q4_K_M", gguf.TypeQ4_K}})
}

// modelFile writes the preset in type t to a temporary file. It is rebuilt every run (a few
// seconds) so that it always has the type mix synth makes now.
func modelFile(b *testing.B, preset string, t gguf.Type) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), fmt.Sprintf("%s-%s.gguf", preset, strings.ToLower(t.String())))
	if err := synth.WriteFile(preset, synth.Options{Seed: 1, Type: t}, path); err != nil {
		b.Fatal(err)
	}
	return path
}

type ours struct {
	m     *model.Model
	arena *kvcache.Arena
	kv    []*kernels.PagedKV // one per stream, disjoint blocks of arena
}

// load maps the model and makes nKV sequences of maxTokens positions each.
func load(b *testing.B, path string, pool *kernels.Pool, maxTokens, nKV int) (*ours, func()) {
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	m, err := model.Load(f, pool)
	if err != nil {
		b.Fatal(err)
	}
	// As serve does at start (--calibrate): the prefetch distances measured on this machine.
	cal := kernels.CalibratePrefetch(pool, m.Products())
	calibrations.Store(filepath.Base(path), cal.String())
	c := m.Config()
	const bs = 16
	per := (maxTokens + bs - 1) / bs
	a, err := kvcache.NewArena(kvcache.Layout{BlockSize: bs, Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, DType: kvcache.F16}, per*nKV)
	if err != nil {
		b.Fatal(err)
	}
	o := &ours{m: m, arena: a}
	for s := range nKV {
		table := make([]int32, per)
		for i := range table {
			table[i] = int32(s*per + i)
		}
		o.kv = append(o.kv, &kernels.PagedKV{F16: a.F16(), BlockSize: bs, Layers: c.Layers, KVHeads: c.KVHeads, HeadDim: c.HeadDim, Table: table})
	}
	return o, func() { f.Close() }
}

func (o *ours) tokens(n, salt int) []int32 {
	v := o.m.Config().Vocab
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(3 + (i*31+salt*7919)%(v-3))
	}
	return toks
}

// prefill runs n tokens of stream s in 512-token chunks (llama.cpp's default micro-batch)
// and returns tokens/s.
func (o *ours) prefill(b *testing.B, n, s int) float64 {
	toks := o.tokens(n, s)
	logits := make([]float32, o.m.Config().Vocab)
	start := time.Now()
	for pos := 0; pos < n; pos += 512 {
		end := min(pos+512, n)
		seq := model.Sequence{Tokens: toks[pos:end], Pos: pos, KV: o.kv[s]}
		if end == n {
			seq.Logits = logits
		}
		if err := o.m.Forward([]model.Sequence{seq}); err != nil {
			b.Fatal(err)
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// decode runs n steps over the first k streams, one token each per step, from position pos0
// (each stream's first pos0 positions already hold K/V), and returns aggregate tokens/s.
// Every step asks for every stream's logits, as sampling does.
func (o *ours) decode(b *testing.B, k, pos0, n int) float64 {
	vocab := o.m.Config().Vocab
	seqs := make([]model.Sequence, k)
	toks := make([]int32, k)
	// The streams' logits rows back to back, as the engine lays them out (the output head
	// writes them in place).
	logits := make([]float32, k*vocab)
	for s := range k {
		toks[s] = int32(1 + s)
		seqs[s] = model.Sequence{KV: o.kv[s], Logits: logits[s*vocab : (s+1)*vocab]}
	}
	start := time.Now()
	for i := range n {
		for s := range seqs {
			seqs[s].Tokens = toks[s : s+1]
			seqs[s].Pos = pos0 + i
		}
		if err := o.m.Forward(seqs); err != nil {
			b.Fatal(err)
		}
		for s := range seqs {
			l := seqs[s].Logits
			best := 0
			for j, v := range l {
				if v > l[best] {
					best = j
				}
			}
			toks[s] = int32(best)
		}
	}
	return float64(k*n) / time.Since(start).Seconds()
}

// batchedResult is one line of llama-batched-bench --output-format jsonl.
type batchedResult struct {
	PP      int     `json:"pp"`
	TG      int     `json:"tg"`
	PL      int     `json:"pl"`
	SpeedPP float64 `json:"speed_pp"`
	SpeedTG float64 `json:"speed_tg"`
}

// nativeBatched runs llama-batched-bench: pl streams each prefill pp tokens, then decode tg
// tokens in lockstep; it returns the aggregate decode tokens/s per pl.
func nativeBatched(path string, pp, tg int, pls []int) (map[int]float64, error) {
	bin, err := llamaref.NativeBinary("llama-batched-bench")
	if err != nil {
		return nil, err
	}
	maxPL := 0
	ps := make([]string, len(pls))
	for i, p := range pls {
		maxPL = max(maxPL, p)
		ps[i] = strconv.Itoa(p)
	}
	args := []string{"-m", path, "-c", strconv.Itoa(maxPL * (pp + tg)), "-b", "512", "-ub", "512",
		"-npp", strconv.Itoa(pp), "-ntg", strconv.Itoa(tg), "-npl", strings.Join(ps, ","),
		"-t", strconv.Itoa(threads), "-fa", "off", "-ctk", "f16", "-ctv", "f16", "--output-format", "jsonl"}
	cmd := exec.Command(bin, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		s := out.String()
		return nil, fmt.Errorf("%s %s: %w; output:\n%s", bin, strings.Join(args, " "), err, s[max(0, len(s)-3000):])
	}
	got := map[int]float64{}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r batchedResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			continue
		}
		got[r.PL] = r.SpeedTG
	}
	for _, p := range pls {
		if got[p] == 0 {
			return nil, fmt.Errorf("llama-batched-bench printed no result for %d streams:\n%s", p, out.String())
		}
	}
	return got, nil
}

// memcpyGBs measures copy() bandwidth with threads goroutines, each copying its own 64 MiB
// (far past the caches), best of five. It counts bytes read plus bytes written, as STREAM's
// Copy does: the memory traffic, which is what a decode step's weight reads compete for.
func memcpyGBs() float64 {
	const size = 64 << 20
	src := make([][]byte, threads)
	dst := make([][]byte, threads)
	for i := range src {
		src[i], dst[i] = make([]byte, size), make([]byte, size)
		for j := range src[i] {
			src[i][j] = byte(j)
		}
		copy(dst[i], src[i])
	}
	best := 0.0
	for range 5 {
		var wg sync.WaitGroup
		start := time.Now()
		for i := range threads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(dst[i], src[i])
			}()
		}
		wg.Wait()
		best = max(best, 2*float64(threads*size)/time.Since(start).Seconds()/1e9)
	}
	return best
}

// weightBytes is what one decode step reads of the file: every matrix, except the token
// embedding when the model has a separate output head (a step reads one row of it).
func weightBytes(b *testing.B, path string) float64 {
	f, err := gguf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	_, hasOutput := f.Tensor("output.weight")
	var n uint64
	for _, ti := range f.Tensors() {
		if len(ti.Dims) < 2 || (hasOutput && ti.Name == "token_embd.weight") {
			continue
		}
		n += ti.Size
	}
	return float64(n)
}

type cell struct {
	test      string
	ours, ref float64
	steps     float64 // forward passes per token (1/streams for batched decode); 0 for prefill
}

type tableRow struct {
	preset    string
	kind      string
	bytesStep float64
	cells     []cell
}

// calibrations is each model file's prefetch calibration (load), for the table's notes.
var calibrations sync.Map

// cpuDescription names the CPU the table ran on: /proc/cpuinfo's model name and the
// instruction sets the kernels choose between.
func cpuDescription() string {
	name := runtime.GOARCH
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				name = strings.TrimSpace(v)
				break
			}
		}
	}
	x := &cpu.X86
	var flags []string
	for _, f := range []struct {
		on   bool
		name string
	}{{x.HasAVX2, "avx2"}, {x.HasFMA, "fma"}, {x.HasF16C, "f16c"}, {x.HasAVX512F, "avx512f"}, {x.HasAVX512BW, "avx512bw"},
		// AVX-512's extensions and AMX only with AVX-512F (GODEBUG=cpu.avx512f=off, as
		// `make bench-vs-llama-avx2` runs, leaves them set in x/sys/cpu).
		{x.HasAVX512VL, "avx512vl"}, {x.HasAVX512F && x.HasAVX512VNNI, "avx512vnni"}, {x.HasAVX512F && x.HasAVX512BF16, "avx512bf16"},
		{x.HasAVX512F && x.HasAMXTile, "amx-tile"}} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	return fmt.Sprintf("%s, %d CPUs (%s; kernels %s, quantized %s)", name, runtime.NumCPU(), strings.Join(flags, " "),
		kernels.SIMD(), quant.Kernel())
}

// llamaBuild names the native llama.cpp build the table ran: its binaries' directory and
// the instruction-set options it was configured with (scripts/build-llama-native.sh keeps
// them beside the build).
func llamaBuild() string {
	bin, err := llamaref.NativeBinary("llama-bench")
	if err != nil {
		return err.Error()
	}
	dir := filepath.Dir(bin)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(dir), "stockpot-configure-args"))
	if err != nil {
		return dir + " (configure options not recorded)"
	}
	var isa []string
	noAMX := false
	for _, f := range strings.Fields(string(b)) {
		switch {
		case strings.HasPrefix(f, "-DGGML_NATIVE") || strings.HasPrefix(f, "-DGGML_AVX") || strings.HasPrefix(f, "-DGGML_FMA") ||
			strings.HasPrefix(f, "-DGGML_F16C"):
			isa = append(isa, strings.TrimPrefix(f, "-D"))
		case strings.Contains(f, "-mno-amx"):
			noAMX = true
		}
	}
	if noAMX {
		isa = append(isa, "AMX off (-mno-amx-*)")
	}
	return fmt.Sprintf("%s (%s)", dir, strings.Join(isa, " "))
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// BenchmarkVsLlamaCpp prints, for each weight type, prefill at 512 and 2048 tokens, decode at
// 1 and 4 streams and the decode bandwidth as a share of memcpy, for Stockpot and native
// llama.cpp measured alternately in the same run (`make bench-vs-llama`).
func BenchmarkVsLlamaCpp(b *testing.B) {
	start := loadAvg()
	on, nRounds := benchTests()
	memcpy := memcpyGBs()
	var rows []tableRow
	for _, m := range tableModels() {
		k := m.kind
		b.Run(m.preset+"/"+k.name, func(b *testing.B) {
			path := modelFile(b, m.preset, k.t)
			pool := kernels.NewPool(threads)
			defer pool.Close()
			o, done := load(b, path, pool, 2048+decodeTokens, streams)
			defer done()
			o.prefill(b, 64, 0) // warm up: page the mapping in, size the scratch buffers
			row := tableRow{preset: m.preset, kind: k.name, bytesStep: weightBytes(b, path)}
			tgKey := fmt.Sprintf("tg%d", decodeTokens)
			var served *servedReplica
			if on["served"] {
				served = startServed(b, path)
			}
			best := map[string]float64{}
			keep := func(k string, v float64) { best[k] = max(best[k], v) }
			for b.Loop() {
				// Alternate the engines test by test, round by round, so load from other
				// processes hits both; keep each side's best round.
				var pps []int
				for _, n := range []int{512, 2048} {
					if on[fmt.Sprintf("pp%d", n)] {
						pps = append(pps, n)
					}
				}
				tg := 0
				if on["tg"] || on["served"] { // the served row is against llama-bench's tg too
					tg = decodeTokens
				}
				for range nRounds {
					// copy() bandwidth again each round: on a shared machine the one at
					// start may have met a busy moment, and the table keeps each side's
					// best round, so its yardstick is the best copy as well.
					memcpy = max(memcpy, memcpyGBs())
					// A failed llama.cpp round is logged and the others count; all
					// rounds failing is fatal below.
					if len(pps) > 0 || tg > 0 {
						ref, err := llamaref.NativeBench(path, pps, tg, threads, llamaref.BenchOptions{KVType: "f16", Repetitions: 1})
						if err != nil {
							b.Logf("llama-bench round failed: %v", err)
						}
						for _, r := range ref {
							keep("ref "+r.Test, r.TokensPerSec)
						}
					}
					for _, n := range pps {
						keep(fmt.Sprintf("pp%d", n), o.prefill(b, n, 0))
					}
					if on["tg"] {
						keep(tgKey, o.decode(b, 1, 0, decodeTokens))
					}
					if served != nil {
						keep("served", served.decode(b, decodeTokens, len(best)))
					}
					if !on["batched"] {
						continue
					}
					batched, err := nativeBatched(path, streamPrompt, streamGen, []int{streams})
					if err != nil {
						// llama-batched-bench's log thread sometimes exits without
						// printing on a loaded machine.
						b.Logf("llama-batched-bench round failed: %v", err)
					}
					keep("ref batched", batched[streams])
					for s := range streams {
						o.prefill(b, streamPrompt, s)
					}
					keep("batched", o.decode(b, streams, streamPrompt, streamGen))
				}
			}
			all := []struct {
				on  string
				key string
				c   cell
			}{
				{"pp512", "pp512", cell{"prefill 512", best["pp512"], best["ref pp512"], 0}},
				{"pp2048", "pp2048", cell{"prefill 2048", best["pp2048"], best["ref pp2048"], 0}},
				{"tg", tgKey, cell{fmt.Sprintf("decode 1 stream (%s)", tgKey), best[tgKey], best["ref "+tgKey], 1}},
				// What a serve client reads (HTTP, SSE, scheduler, sampler, detokenizer),
				// against llama-bench's engine-level number.
				{"served", tgKey, cell{fmt.Sprintf("decode 1 stream, served (API, SSE, %s)", tgKey), best["served"], best["ref "+tgKey], 1}},
				{"batched", "batched", cell{fmt.Sprintf("decode %d streams (pp%d+tg%d)", streams, streamPrompt, streamGen), best["batched"], best["ref batched"], 1.0 / streams}},
			}
			for _, a := range all {
				if !on[a.on] {
					continue
				}
				if best["ref "+a.key] == 0 {
					b.Fatalf("no llama.cpp round gave %s", a.key)
				}
				row.cells = append(row.cells, a.c)
			}
			for _, c := range row.cells {
				key := strings.NewReplacer(" ", "-", "(", "", ")", "", "+", "-").Replace(c.test)
				b.ReportMetric(c.ours/c.ref, key+"-ratio")
			}
			rows = append(rows, row)
		})
	}
	fmt.Printf("\nStockpot vs native llama.cpp, presets %s and %s (Q4_K_M: every row a multiple of 256), %d threads, K/V f16, flash attention off.\n", preset, kquantPreset, threads)
	fmt.Printf("Measured alternately in one run, best of %d rounds each; load average %s at start, %s at end (other processes share the CPU).\n", nRounds, start, loadAvg())
	fmt.Printf("CPU: %s.\n", cpuDescription())
	fmt.Printf("llama.cpp: %s.\n", llamaBuild())
	fmt.Printf("memcpy: %.1f GB/s read+written (%d threads). BW = weight bytes per forward pass × passes/s, and its share of memcpy.\n", memcpy, threads)
	calibrations.Range(func(k, v any) bool {
		fmt.Printf("%s: %s\n", k, v)
		return true
	})
	fmt.Println()
	fmt.Printf("| weights | test | Stockpot tok/s | llama.cpp tok/s | ratio | Stockpot BW | llama.cpp BW |\n")
	fmt.Printf("|---|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		for _, c := range r.cells {
			bw := func(tps float64) string {
				if c.steps == 0 {
					return ""
				}
				gbs := r.bytesStep * tps * c.steps / 1e9
				return fmt.Sprintf("%.1f GB/s (%.0f%%)", gbs, 100*gbs/memcpy)
			}
			fmt.Printf("| %s %s (%.0f MB) | %s | %.1f | %.1f | %.2f× | %s | %s |\n", r.preset, r.kind, r.bytesStep/1e6, c.test, c.ours, c.ref, c.ours/c.ref, bw(c.ours), bw(c.ref))
		}
	}
}

// profilePreset is the model the profiling benchmarks (BenchmarkOursDecode,
// BenchmarkOursPrefill, BenchmarkFusedDecode) synthesize: STOCKPOT_BENCH_PRESET, or preset
// (STOCKPOT_BENCH_PRESET=kquant-80m for the table's K-quant row).
func profilePreset() string {
	if v := os.Getenv("STOCKPOT_BENCH_PRESET"); v != "" {
		return v
	}
	return preset
}

// BenchmarkOursDecode runs only Stockpot's decode (1 and 4 streams, as in the table) for
// profiling one engine: go test -run '^$' -bench BenchmarkOursDecode/Q8_0/streams=4
// -cpuprofile cpu.out ./internal/enginebench. Each op is one step (one Forward), at
// contexts of streamPrompt to streamPrompt+decodeTokens tokens, near the table's (its
// single-stream decode starts at 0, its batched one at streamPrompt).
func BenchmarkOursDecode(b *testing.B) {
	for _, k := range weightKinds {
		b.Run(k.name, func(b *testing.B) {
			path := modelFile(b, profilePreset(), k.t)
			pool := kernels.NewPool(threads)
			defer pool.Close()
			for _, n := range []int{1, streams} {
				b.Run(fmt.Sprintf("streams=%d", n), func(b *testing.B) {
					o, done := load(b, path, pool, streamPrompt+4096, n)
					defer done()
					for s := range n {
						o.prefill(b, streamPrompt, s)
					}
					steps := 0
					st0 := pool.Stats()
					for b.Loop() {
						o.decode(b, n, streamPrompt+steps%decodeTokens, 1)
						steps++
					}
					st := pool.Stats()
					b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
					// Hand-offs per step: parallel loops (each ends in a wait for the
					// threads) and how many waits parked instead of catching the
					// hand-off while spinning.
					b.ReportMetric(float64(st.Loops-st0.Loops)/float64(b.N), "loops/step")
					b.ReportMetric(float64(st.Parks-st0.Parks)/float64(b.N), "parks/step")
				})
			}
		})
	}
}

// BenchmarkOursPrefill runs only Stockpot's 512-token prefill, for profiling (see
// BenchmarkOursDecode). Each op is one 512-token prompt.
func BenchmarkOursPrefill(b *testing.B) {
	for _, k := range weightKinds {
		b.Run(k.name, func(b *testing.B) {
			path := modelFile(b, profilePreset(), k.t)
			pool := kernels.NewPool(threads)
			defer pool.Close()
			o, done := load(b, path, pool, 512, 1)
			defer done()
			for b.Loop() {
				o.prefill(b, 512, 0)
			}
			b.ReportMetric(512*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

// BenchmarkFusedDecode compares single-stream decode with the fused step (each layer one
// parallel region, model.SetFusedDecode) against the loop per product, on the same model
// in the same process, rounds alternating, best of each; the values are the same
// (TestFusedDecodeMatchesForward). It reports both in tok/s, the fused step's pool waits
// (parks) per step and the bandwidth of each as weight bytes a step × steps/s.
//
//	go test -run '^$' -bench FusedDecode -benchtime 1x ./internal/enginebench
func BenchmarkFusedDecode(b *testing.B) {
	for _, k := range weightKinds {
		b.Run(k.name, func(b *testing.B) {
			path := modelFile(b, profilePreset(), k.t)
			pool := kernels.NewPool(threads)
			defer pool.Close()
			o, done := load(b, path, pool, streamPrompt+4096, 1)
			defer done()
			o.prefill(b, streamPrompt, 0)
			var bytes int64
			for _, w := range o.m.Products() {
				bytes += int64(len(w.Data))
			}
			_, rounds := benchTests()
			best := map[bool]float64{}
			var parks float64
			for range b.N {
				for r := range max(rounds, 3) {
					for _, fused := range []bool{r%2 == 0, r%2 != 0} {
						o.m.SetFusedDecode(fused)
						st := pool.Stats()
						v := o.decode(b, 1, streamPrompt, decodeTokens)
						if fused {
							parks = float64(pool.Stats().Parks-st.Parks) / decodeTokens
						}
						best[fused] = max(best[fused], v)
					}
				}
			}
			o.m.SetFusedDecode(true)
			b.ReportMetric(best[true], "fused-tok/s")
			b.ReportMetric(best[false], "loops-tok/s")
			b.ReportMetric(best[true]/best[false], "ratio")
			b.ReportMetric(parks, "fused-parks/step")
			b.ReportMetric(float64(bytes)*best[true]/1e9, "fused-GB/s")
			b.ReportMetric(float64(bytes)*best[false]/1e9, "loops-GB/s")
		})
	}
}
