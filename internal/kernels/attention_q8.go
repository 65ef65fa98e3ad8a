package kernels

import (
	"encoding/binary"
	"fmt"
	"math"

	"stockpot/internal/gguf"
	"stockpot/internal/quant"
)

// Q8_0 K/V (PagedKV.Q8), as llama.cpp runs `-ctk q8_0 -ctv q8_0`. llama.cpp
// needs flash attention for a quantized V cache, and its CPU flash attention
// for a q8_0 K (ggml_compute_forward_flash_attn_ext_f16_one_chunk) does:
//
//   - K and V rows are written by set_rows with the CPU from_float of q8_0,
//     the AVX2 quantize_row_q8_0 (quant.QuantizeActivations);
//   - q is quantized to q8_0, K's vec_dot_type, one head row at a time, and
//     q·k is ggml_vec_dot_q8_0_q8_0: exact integer sums per block of 32,
//     times d_q*d_k, accumulated in f32;
//   - V rows are dequantized to f32 (d*q) and accumulated in f32.
//
// And before any of that, when the head dim is a multiple of 64, llama.cpp
// rotates (llama-kv-cache.cpp attn_rot_k / attn_rot_v, on by default for a
// quantized cache; LLAMA_ATTN_ROT_DISABLE turns it off): q and k by an
// orthonormal Walsh-Hadamard matrix over chunks of rotK(HeadDim) elements
// (the largest power of two dividing the head dim), v over chunks of 64, and
// the attention output over chunks of 64 again, which undoes v's rotation
// (H·H = I). In exact arithmetic attention is unchanged; the rotation spreads
// outliers across a block so that q8_0 loses less. Its CPU kernel
// (ggml_compute_forward_fwht_f32) scales by 1/sqrtf(n) first and then runs
// the butterflies u+v, u−v in natural order; fwht does exactly that, so the
// stored bytes are llama.cpp's.
//
// We quantize K, V and q the same way, but compute q·k as an f32 dot of the
// dequantized values (d*q is exact in f32) with the f32 tile kernels of the
// f16 path, so Q8 attention costs what f16 attention costs: the scores
// differ from ggml's integer sums only by f32 rounding of the products. The
// softmax is ours (two passes, f64 sum) where llama.cpp's is online in f32,
// again a difference of f32 rounding. attendOneQ8, the reference, uses
// ggml's integer form (dotQ8Ref).

const (
	q8Block = 32
	q8Bytes = 2 + q8Block
)

// headBytesQ8 returns the bytes of one head row of a Q8_0 arena.
func (kv *PagedKV) headBytesQ8() int { return kv.HeadDim / q8Block * q8Bytes }

// blockBytesQ8 returns the bytes of one block of a Q8_0 arena.
func (kv *PagedKV) blockBytesQ8() int {
	return kv.Layers * 2 * kv.BlockSize * kv.KVHeads * kv.headBytesQ8()
}

// byteOffsetQ8 returns the arena byte offset of (layer, K or V, pos, kv head
// 0) in a Q8_0 arena:
//
//	table[pos/BlockSize]*blockBytesQ8() +
//	  ((layer*2 + isV)*BlockSize + pos%BlockSize) * KVHeads*headBytesQ8()
func (kv *PagedKV) byteOffsetQ8(layer, isV, pos int) int {
	bi := pos / kv.BlockSize
	if bi >= len(kv.Table) {
		panic(fmt.Sprintf("kernels: position %d needs block %d, table has %d", pos, bi, len(kv.Table)))
	}
	return int(kv.Table[bi])*kv.blockBytesQ8() + ((layer*2+isV)*kv.BlockSize+pos%kv.BlockSize)*kv.KVHeads*kv.headBytesQ8()
}

func (kv *PagedKV) checkQ8() {
	if kv.HeadDim%q8Block != 0 {
		panic(fmt.Sprintf("kernels: q8_0 K/V with head dim %d, not a multiple of %d", kv.HeadDim, q8Block))
	}
}

// storeKVQ8 quantizes one token's K and V rows into a Q8_0 arena, rotated
// first when the head dim is a multiple of 64 (k by rotK, v by rotV).
func storeKVQ8(kv *PagedKV, layer, pos int, k, v []float32) {
	kv.checkQ8()
	row := kv.KVHeads * kv.HeadDim
	ko, vo := kv.byteOffsetQ8(layer, 0, pos), kv.byteOffsetQ8(layer, 1, pos)
	quantizeRotated(kv.Q8[ko:], k[:row], rotK(kv.HeadDim))
	quantizeRotated(kv.Q8[vo:], v[:row], rotV(kv.HeadDim))
}

// rotK returns the chunk size of the Hadamard rotation of q and k for head
// dim hd, 0 for none: the largest power of two >= 64 dividing hd.
func rotK(hd int) int {
	if hd%64 != 0 {
		return 0
	}
	n := 64
	for hd%(2*n) == 0 {
		n *= 2
	}
	return n
}

// rotV returns the chunk size of the rotation of v and of the attention
// output: 64 when hd is a multiple of 64, else 0 (none).
func rotV(hd int) int {
	if hd%64 != 0 {
		return 0
	}
	return 64
}

// fwht sets every chunk of n elements of x (n a power of two, len(x) a
// multiple of n) to H_n times it, H_n the orthonormal Sylvester-ordered
// Walsh-Hadamard matrix: scale by 1/sqrtf(n), then butterflies of span 1,
// 2, 4, ... in natural order, as ggml's CPU fwht. n = 0 leaves x as is.
func fwht(x []float32, n int) {
	if n == 0 {
		return
	}
	scale := 1 / float32(math.Sqrt(float64(n)))
	for c := 0; c+n <= len(x); c += n {
		r := x[c : c+n]
		for j := range r {
			r[j] *= scale
		}
		for l := 1; l < n; l <<= 1 {
			for i := 0; i < n; i += 2 * l {
				a, b := r[i:i+l], r[i+l:i+2*l]
				for j := range a {
					u, w := a[j], b[j]
					a[j], b[j] = u+w, u-w
				}
			}
		}
	}
}

// quantizeRotated writes src, rotated in chunks of n (0: not rotated), as
// Q8_0 blocks to the start of dst. src is not changed.
func quantizeRotated(dst []byte, src []float32, n int) {
	if n == 0 {
		quant.QuantizeActivations(gguf.TypeQ8_0, src, dst[:len(src)/q8Block*q8Bytes])
		return
	}
	var stack [256]float32
	tmp := stack[:]
	if n > len(stack) {
		tmp = make([]float32, n)
	}
	tmp = tmp[:n]
	cb := n / q8Block * q8Bytes
	for c := 0; c+n <= len(src); c += n {
		copy(tmp, src[c:c+n])
		fwht(tmp, n)
		o := c / n * cb
		quant.QuantizeActivations(gguf.TypeQ8_0, tmp, dst[o:o+cb])
	}
}

// dequantQ8 sets dst[i] = d*q[i] for the len(dst)/32 blocks of src, as
// ggml's dequantize_row_q8_0; amd64 replaces it with an AVX2 version.
var dequantQ8 = dequantQ8Ref

func dequantQ8Ref(dst []float32, src []byte) {
	for b := range len(dst) / q8Block {
		blk := src[b*q8Bytes : (b+1)*q8Bytes]
		d := f16ToF32(binary.LittleEndian.Uint16(blk))
		out := dst[b*q8Block : (b+1)*q8Block]
		for i := range out {
			out[i] = float32(int8(blk[2+i])) * d
		}
	}
}

// roundQ8 sets dst to src rotated in chunks of n (0: not rotated),
// quantized to Q8_0 (as ggml's x86 from_float) and dequantized: the values
// llama.cpp's q8_0 dot sees for a query row. len(src) is a multiple of 32
// and of n; dst may be src. blk is scratch of at least q8Bytes bytes (a
// local array would escape: QuantizeActivations leaks its dst).
func roundQ8(dst, src []float32, n int, blk []byte) {
	copy(dst, src)
	fwht(dst, n)
	blk = blk[:q8Bytes]
	for b := 0; b+q8Block <= len(dst); b += q8Block {
		quant.QuantizeActivations(gguf.TypeQ8_0, dst[b:b+q8Block], blk)
		dequantQ8(dst[b:b+q8Block], blk)
	}
}

// dotQ8Ref is the reference q·k of two Q8_0 rows of nb blocks: exact
// integer sums per block, scaled by d_q*d_k and added in block order.
func dotQ8Ref(a, b []byte, nb int) float32 {
	var s float32
	for i := range nb {
		x, y := a[i*q8Bytes:(i+1)*q8Bytes], b[i*q8Bytes:(i+1)*q8Bytes]
		var is int32
		for j := range q8Block {
			is += int32(int8(x[2+j])) * int32(int8(y[2+j]))
		}
		d := f16ToF32(binary.LittleEndian.Uint16(x)) * f16ToF32(binary.LittleEndian.Uint16(y))
		s += d * float32(is)
	}
	return s
}

// attendOneQ8 is attendOne for a Q8_0 arena: q rotated and quantized to
// q8_0, scores by dotQ8Ref, V dequantized and accumulated by axpy, the
// output rotated back. buf holds at least n + 2*HeadDim floats.
func attendOneQ8(out, q []float32, n int, kv *PagedKV, layer, kvh int, scale float32, buf []float32) {
	hd := len(q)
	hb := kv.headBytesQ8()
	scores, vr := buf[:n], buf[n:n+hd]
	qq := make([]byte, hb)
	quantizeRotated(qq, q, rotK(hd))
	mx := float32(math.Inf(-1))
	for j := range n {
		ko := kv.byteOffsetQ8(layer, 0, j) + kvh*hb
		s := dotQ8Ref(qq, kv.Q8[ko:ko+hb], hd/q8Block) * scale
		scores[j] = s
		mx = max(mx, s)
	}
	var sum float64
	for j, s := range scores {
		e := expf(s - mx)
		scores[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	clear(out)
	for j, pj := range scores {
		vo := kv.byteOffsetQ8(layer, 1, j) + kvh*hb
		dequantQ8(vr, kv.Q8[vo:vo+hb])
		axpyF32Ref(out, pj*inv, vr)
	}
	fwht(out, rotV(hd))
}
