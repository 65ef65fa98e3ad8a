// ggml_golden.c writes ggml_golden.bin: inputs and ggml's outputs for the
// quant tests. It links llama.cpp's ggml-quants.c and ggml-cpu/arch/x86/quants.c:
//
//   L=/tmp/llama.cpp/ggml; F="-O2 -mavx2 -mfma -mf16c -I$L/include -I$L/src -I$L/src/ggml-cpu"
//   gcc -O2 -I$L/include -I$L/src -c $L/src/ggml-quants.c -o q.o  # ggml-base: no -march, no FMA contraction
//   gcc $F -c $L/src/ggml-cpu/arch/x86/quants.c -o x.o
//   gcc $F ggml_golden.c q.o x.o -lm -no-pie -Wl,--unresolved-symbols=ignore-all -o golden && ./golden > ggml_golden.bin
//
// Record per weight type: u32 type, u32 rows, u32 k, f32 w[rows*k],
// quantized w, f32 dequantized w, f32 a[rows*k], quantized a (x86 from_float),
// f32 dot[rows*rows] (vec_dot of weight row i with activation row j at i*rows+j).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void quantize_row_q4_0_ref(const float *x, void *y, int64_t k);
void quantize_row_q5_0_ref(const float *x, void *y, int64_t k);
void quantize_row_q8_0_ref(const float *x, void *y, int64_t k);
void quantize_row_q4_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q6_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q5_K_ref(const float *x, void *y, int64_t k);
void dequantize_row_q4_0(const void *x, float *y, int64_t k);
void dequantize_row_q5_0(const void *x, float *y, int64_t k);
void dequantize_row_q8_0(const void *x, float *y, int64_t k);
void dequantize_row_q4_K(const void *x, float *y, int64_t k);
void dequantize_row_q6_K(const void *x, float *y, int64_t k);
void dequantize_row_q5_K(const void *x, float *y, int64_t k);
void quantize_row_q8_0(const float *x, void *y, int64_t k);
void quantize_row_q8_K(const float *x, void *y, int64_t k);
typedef void (*vecdot)(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
void ggml_vec_dot_q4_0_q8_0(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q5_0_q8_0(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q8_0_q8_0(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q4_K_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q6_K_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_vec_dot_q5_K_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int);

#include <immintrin.h>
float ggml_table_f32_f16[1 << 16]; // the ggml-cpu lookup table, filled in main

static uint64_t state = 88172645463325252ull;
static double uniform(void) {
	state ^= state << 13; state ^= state >> 7; state ^= state << 17;
	return (double)(state >> 11) / 9007199254740992.0;
}
static float sample(int i) {
	// Gaussian-ish values whose scale changes every 32 elements, with a few
	// exact zeros and outliers, as in real weights.
	double u = uniform() + uniform() + uniform() - 1.5;
	double scale = pow(10.0, -3.0 + 3.0 * ((i / 32) % 7) / 6.0);
	if (uniform() < 0.02) return 0.0f;
	if (uniform() < 0.01) u *= 20;
	return (float)(u * scale);
}

static void put(const void *p, size_t n) { fwrite(p, 1, n, stdout); }

int main(void) {
	struct { uint32_t type; size_t wbytes, abytes; int bs; void (*q)(const float *, void *, int64_t);
		void (*dq)(const void *, float *, int64_t); void (*qa)(const float *, void *, int64_t); vecdot dot; } T[] = {
		{2, 18, 34, 32, quantize_row_q4_0_ref, dequantize_row_q4_0, quantize_row_q8_0, ggml_vec_dot_q4_0_q8_0},
		{8, 34, 34, 32, quantize_row_q8_0_ref, dequantize_row_q8_0, quantize_row_q8_0, ggml_vec_dot_q8_0_q8_0},
		{12, 144, 292, 256, quantize_row_q4_K_ref, dequantize_row_q4_K, quantize_row_q8_K, ggml_vec_dot_q4_K_q8_K},
		{14, 210, 292, 256, quantize_row_q6_K_ref, dequantize_row_q6_K, quantize_row_q8_K, ggml_vec_dot_q6_K_q8_K},
		// Appended last, so the records before it (and the RNG stream they use) are unchanged.
		{6, 22, 34, 32, quantize_row_q5_0_ref, dequantize_row_q5_0, quantize_row_q8_0, ggml_vec_dot_q5_0_q8_0},
		{13, 176, 292, 256, quantize_row_q5_K_ref, dequantize_row_q5_K, quantize_row_q8_K, ggml_vec_dot_q5_K_q8_K},
	};
	for (int i = 0; i < 1 << 16; i++) ggml_table_f32_f16[i] = _cvtsh_ss((uint16_t)i);
	const uint32_t rows = 6, k = 1024;
	float *w = calloc(rows * k, 4), *dq = calloc(rows * k, 4), *a = calloc(rows * k, 4), *dot = calloc(rows * rows, 4);
	uint8_t *wq = calloc(rows * k, 2), *aq = calloc(rows * k, 2);
	for (int t = 0; t < (int)(sizeof T / sizeof T[0]); t++) {
		for (uint32_t i = 0; i < rows * k; i++) { w[i] = sample(i); a[i] = sample(i + 7); }
		memset(w + k, 0, 256 * 4); // an all-zero block in row 1
		memset(a + 2 * k, 0, 256 * 4);
		size_t wrow = k / T[t].bs * T[t].wbytes, arow = k / T[t].bs * T[t].abytes;
		memset(wq, 0, rows * k * 2); memset(aq, 0, rows * k * 2);
		for (uint32_t r = 0; r < rows; r++) {
			T[t].q(w + r * k, wq + r * wrow, k);
			T[t].dq(wq + r * wrow, dq + r * k, k);
			T[t].qa(a + r * k, aq + r * arow, k);
		}
		for (uint32_t i = 0; i < rows; i++)
			for (uint32_t j = 0; j < rows; j++)
				T[t].dot(k, dot + i * rows + j, 0, wq + i * wrow, 0, aq + j * arow, 0, 1);
		put(&T[t].type, 4); put(&rows, 4); put(&k, 4);
		put(w, rows * k * 4); put(wq, rows * wrow); put(dq, rows * k * 4);
		put(a, rows * k * 4); put(aq, rows * arow); put(dot, rows * rows * 4);
	}
	return 0;
}
