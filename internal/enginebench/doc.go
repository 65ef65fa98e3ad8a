// Package enginebench measures Stockpot's engine against native llama.cpp on the same GGUF file,
// in the same run, and prints the ratios. It holds only benchmarks:
//
//	make llama-native   # once: builds llama-bench from the llama.cpp source node-llama-cpp ships
//	go test -run '^$' -bench . -benchtime 1x ./internal/enginebench
//
// For the 135M preset (dim 576, 30 layers, 9 heads, 3 KV heads, ffn 1536) in f32 and Q8_0 it
// reports prefill tokens/s at 512 and 2048 tokens and decode tokens/s over 64 tokens, both
// engines on 2 threads with f16 K/V and flash attention off (llama-bench at this version
// cannot use f32 K/V). Ratios are taken against the native build only, never against the
// slower prebuilt library.
package enginebench
