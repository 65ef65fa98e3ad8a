package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"stockpot/internal/blend"
	"stockpot/internal/blendeval"
	"stockpot/internal/gguf"
	"stockpot/internal/kernels"
	"stockpot/internal/model"
	"stockpot/internal/synth"
)

// cmdBenchBlendQuality is `stockpot bench blendquality`: the quality gate of chunk blending
// (package blendeval) on synthetic models, written as blendquality.md (the table),
// blendquality.json, blendquality.html (plots as inline SVG) and blendquality.png (that page
// rendered by headless Chromium).
func cmdBenchBlendQuality(args []string) error {
	fs := newFlagSet("bench blendquality")
	models := fs.String("models", "default,tiny-qwen3,qwen3-default-shape", "comma-separated synth presets; qwen3-default-shape is the default preset's shape (8 layers, 384 wide) as qwen3")
	out := fs.String("out", "bin/blendquality", "output directory")
	sys := fs.Int("sys-tokens", 64, "system prompt tokens before the chunks")
	k := fs.Int("chunks", 4, "retrieved chunks")
	chunk := fs.Int("chunk-tokens", 256, "tokens of each chunk")
	question := fs.Int("question-tokens", 32, "question tokens after the chunks")
	seed := fs.Uint64("seed", 38, "prompt and weight seed")
	threads := fs.Int("threads", runtime.NumCPU(), "compute threads")
	chromium := fs.String("chromium", "/usr/bin/chromium", "headless Chromium for the PNG (empty: no PNG)")
	if err := parseWithEnv(fs, args); err != nil {
		return err
	}
	var named []blendeval.Named
	for _, name := range strings.Split(*models, ",") {
		p, label, err := blendQualityPreset(name)
		if err != nil {
			return err
		}
		m, err := loadSynthModel(p, *seed, *threads)
		if err != nil {
			return err
		}
		prompt, chunks := blendQualityPrompt(*seed, m.Config().Vocab, *sys, *k, *chunk, *question)
		start := time.Now()
		rep, err := blendeval.Measure(m, prompt, chunks, blendeval.DefaultConfig())
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(os.Stderr, "stockpot: %s measured in %.1f s\n", label, time.Since(start).Seconds())
		named = append(named, blendeval.Named{Model: label, Report: rep})
	}
	note := fmt.Sprintf("A RAG-shaped prompt of random token ids: %d system tokens, %d chunks of %d tokens, %d question tokens (%d in all), EPIC (each chunk's first ⌈f·len⌉ tokens recomputed) and CacheBlend (the ⌈f·n⌉ copied tokens whose layer-1 K/V deviate most), block size 16; next 32 tokens of the full prefill's greedy continuation. Synthetic models with random weights (seed %d): these numbers say how far blending moves the arithmetic, not how good answers are. CPU: %s, %d threads.",
		*sys, *k, *chunk, *question, *sys+*k**chunk+*question, *seed, cpuName(), *threads)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	md := blendeval.Markdown(named)
	js, _ := json.MarshalIndent(named, "", "  ")
	page, err := blendeval.HTML(named, note)
	if err != nil {
		return err
	}
	for name, b := range map[string][]byte{"blendquality.md": []byte(md), "blendquality.json": js, "blendquality.html": page} {
		if err := os.WriteFile(filepath.Join(*out, name), b, 0o644); err != nil {
			return err
		}
	}
	fmt.Println(note)
	fmt.Print(md)
	if *chromium != "" {
		if err := screenshotPage(*chromium, filepath.Join(*out, "blendquality.html"), filepath.Join(*out, "blendquality.png")); err != nil {
			return err
		}
	}
	return nil
}

// blendQualityPreset is a synth preset by name, or qwen3-default-shape.
func blendQualityPreset(name string) (synth.Preset, string, error) {
	if name == "qwen3-default-shape" {
		d, err := synth.Lookup("default")
		if err != nil {
			return d, "", err
		}
		q, err := synth.Lookup("tiny-qwen3")
		if err != nil {
			return q, "", err
		}
		d.Name, d.Arch, d.Tokenizer, d.VocabSize, d.Template, d.RopeBase, d.NormEps = name, q.Arch, q.Tokenizer, q.VocabSize, q.Template, q.RopeBase, q.NormEps
		return d, fmt.Sprintf("qwen3, default's shape (%d layers)", d.Layers), nil
	}
	p, err := synth.Lookup(name)
	return p, fmt.Sprintf("%s (%s, %d layers)", name, p.Arch, p.Layers), err
}

func loadSynthModel(p synth.Preset, seed uint64, threads int) (*model.Model, error) {
	w, err := synth.BuildPreset(p, synth.Options{Seed: seed})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		return nil, err
	}
	return model.Load(f, kernels.NewPool(threads))
}

// blendQualityPrompt is sys tokens, k chunks of n tokens and q question tokens, random ids.
func blendQualityPrompt(seed uint64, vocab, sys, k, n, q int) ([]int32, []blend.Chunk) {
	rng := rand.New(rand.NewPCG(seed, 1))
	tok := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(3 + rng.IntN(vocab-3))
		}
		return out
	}
	p := tok(sys)
	var cs []blend.Chunk
	for range k {
		cs = append(cs, blend.Chunk{Start: len(p), End: len(p) + n})
		p = append(p, tok(n)...)
	}
	return append(p, tok(q)...), cs
}

// screenshotPage renders page to png with headless Chromium.
func screenshotPage(chromium, page, png string) error {
	abs, err := filepath.Abs(page)
	if err != nil {
		return err
	}
	absPNG, _ := filepath.Abs(png)
	tmp, err := os.MkdirTemp("", "stockpot-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+tmp, "--window-size=1220,1600", "--screenshot="+absPNG, "file://"+abs)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("chromium: %v\n%s", err, b)
	}
	return nil
}

// cpuName is /proc/cpuinfo's first model name, or GOARCH.
func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}
