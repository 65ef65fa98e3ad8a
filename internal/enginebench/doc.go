// Package enginebench measures Stockpot's forward pass against native llama.cpp on the same
// GGUF file, in the same run, and prints the ratios. It holds only benchmarks:
//
//	make bench-vs-llama   # builds native llama.cpp when missing, then runs BenchmarkVsLlamaCpp
//
// For the 135M preset (dim 576, 30 layers, 9 heads, 3 KV heads, ffn 1536) in f32, f16, Q8_0,
// Q4_K_M (synth's Q4_K: llama-quantize's mix) and Q6_K, and for kquant-80m (dim 768, 12
// layers, ffn 2048: every row a multiple of 256, so its Q4_K_M mix is Q4_K and Q6_K, not the
// Q5_0 and Q8_0 fallbacks of smollm-135m's 576-wide rows) in Q4_K_M, it prints one table: prefill tokens/s
// at 512 and 2048 tokens and decode over 64 tokens (llama-bench's pp and tg tests), decode of
// 4 streams in lockstep after a 128-token prompt each (llama-batched-bench's S_TG), and the
// decode bandwidth (weight bytes per forward pass × passes per second) as a share of a
// copy() bandwidth measured at start and again each round (the best counts). Both engines
// run on 2 threads with f16 K/V and flash attention off (llama-bench at this version cannot
// use f32 K/V), and they alternate test by test over three rounds, so that load from other
// processes on a shared machine hits both; the table keeps each engine's best round
// (llama.cpp's OpenMP barriers spin, so a round in which another process takes one of its
// threads can run 10× slower).
//
// Stockpot's 4-stream decode is one model.Forward per step over the four sequences: that is
// what the engine's scheduler plans (every running sequence's decode token in one step), so
// the number is the engine's batched decode without sampling, as llama-batched-bench's is.
//
// While working on one kernel, STOCKPOT_BENCH_TESTS (a comma list of pp512, pp2048, tg,
// batched) and STOCKPOT_BENCH_ROUNDS narrow a run, and -bench picks the weight types:
//
//	STOCKPOT_BENCH_TESTS=tg,batched STOCKPOT_BENCH_ROUNDS=2 go test -run '^$' \
//	    -bench 'BenchmarkVsLlamaCpp/smollm-135m/(Q8_0|Q4_K_M)$' -benchtime 1x ./internal/enginebench
//
// BenchmarkOursDecode and BenchmarkOursPrefill run only Stockpot's side, for a profile;
// STOCKPOT_BENCH_PRESET picks their model (kquant-80m for the K-quant row).
//
// Ratios are taken against the native build only (`make llama-native`), never against the
// slower prebuilt library node-llama-cpp ships.
package enginebench
