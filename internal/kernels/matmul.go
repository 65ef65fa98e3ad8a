package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"stockpot/internal/gguf"
)

// Weight is a 2-D weight tensor in GGUF layout: Rows rows (the output
// dimension) of Cols elements (the reduction dimension K), row n contiguous.
// Data is Rows*Type.RowBytes(Cols) bytes, usually a view into the mapped file.
type Weight struct {
	Type       gguf.Type
	Rows, Cols int
	Data       []byte
}

// tileFunc computes an mr×nr tile of dot products over the first k elements
// (k a multiple of the kernel's vector width) and stores the mr×nr sums:
//
//	dst[i*ldd+j] = Σ_{kk<k} x[i*ldx+kk] * W(j, kk)   for i < mr, j < nr
//
// where row j of W starts at w + j*ldw bytes. x is f32 (already rounded to
// the weight's activation type). Every element is accumulated lane-wise in
// k order and reduced by the same horizontal sum, whatever mr and nr are.
type tileFunc func(x *float32, ldx int, w *byte, ldw int, k int, dst *float32, ldd int)

// tileKernels is one instruction set's family of tile kernels.
type tileKernels struct {
	name   string
	mr, nr int // largest tile
	kstep  int // vector width in elements; k passed to a tile is a multiple
	// tiles[t][i-1][j-1] is the i×j kernel for weight type index t
	// (typeIndex).
	tiles [3][][]tileFunc
	// roundF16 is roundF16Ref, vectorized.
	roundF16 func(dst, src []float32)
}

// simd is the kernel family chosen at start-up; nil means the pure-Go
// reference path.
var simd *tileKernels

// typeIndex maps the float weight types to tileKernels.tiles' first index.
func typeIndex(t gguf.Type) int {
	switch t {
	case gguf.TypeF32:
		return 0
	case gguf.TypeF16:
		return 1
	case gguf.TypeBF16:
		return 2
	}
	return -1
}

// l2PanelBytes is how many bytes of weight rows one N-block may hold so
// that it stays in L2 (1 MiB per core on the machines we target, half of it
// left for activations and the other worker's traffic) while all M tiles
// sweep over it.
const l2PanelBytes = 384 << 10

// MatMul computes dst[M][w.Rows] = x[M][w.Cols] · Wᵀ.
//
// Row m of dst is bitwise the same whatever M is and whatever the thread
// count is: each element is one dot product whose instruction sequence
// depends only on K and the weight type (see doc.go).
//
// Float weights (F32, F16, BF16) use the SIMD tile kernels. The activations
// are first rounded as ggml's vec_dot_type does (to f16 for F16 weights, to
// bf16 for BF16). Quantized weights quantize each x row once and call
// quant.MatMul over ranges of weight rows.
func MatMul(p *Pool, dst, x []float32, M int, w *Weight) {
	K, N := w.Cols, w.Rows
	if M < 0 || len(x) < M*K || len(dst) < M*N {
		panic(fmt.Sprintf("kernels: MatMul M=%d K=%d N=%d with len(x)=%d len(dst)=%d", M, K, N, len(x), len(dst)))
	}
	if len(w.Data) < N*w.Type.RowBytes(K) {
		panic(fmt.Sprintf("kernels: MatMul %v weight %dx%d has %d bytes, need %d", w.Type, N, K, len(w.Data), N*w.Type.RowBytes(K)))
	}
	if M == 0 || N == 0 {
		return
	}
	if K == 0 {
		clear(dst[:M*N])
		return
	}
	ti := typeIndex(w.Type)
	if ti < 0 {
		matMulQuant(p, dst, x, M, w)
		return
	}
	matMulFloat(p, simd, dst, x, M, w)
}

// matMulFloat is MatMul for float weights with the tile family ks (nil:
// the pure-Go reference).
func matMulFloat(p *Pool, ks *tileKernels, dst, x []float32, M int, w *Weight) {
	if ks == nil {
		matMulRef(p, dst, x, M, w)
		return
	}
	K := w.Cols
	xs := x[:M*K]
	if w.Type != gguf.TypeF32 {
		var release func()
		xs, release = p.f32Scratch(M * K)
		defer release()
		round := roundBF16
		if w.Type == gguf.TypeF16 {
			round = ks.roundF16
		}
		p.For(M, func(lo, hi int) { round(xs[lo*K:hi*K], x[lo*K:hi*K]) })
	}
	matMulTiles(p, ks, dst, xs, M, w)
}

// matMulTiles runs the tile kernels of ks over the whole product. x is
// already rounded for the weight type.
//
// Work is split over units of ks.nr weight rows; each worker walks its
// range in N-blocks that fit in L2 and, for each block, sweeps all M tiles,
// so a block of W is read from memory once per call and an x tile stays in
// L1 while it meets every row group of the block.
func matMulTiles(p *Pool, ks *tileKernels, dst, x []float32, M int, w *Weight) {
	K, N := w.Cols, w.Rows
	ti := typeIndex(w.Type)
	rowBytes := w.Type.RowBytes(K)
	kmain := K / ks.kstep * ks.kstep
	mr, nr := ks.mr, ks.nr
	units := (N + nr - 1) / nr
	blockUnits := max(1, l2PanelBytes/(rowBytes*nr))
	tiles := ks.tiles[ti]
	p.For(units, func(lo, hi int) {
		for b0 := lo; b0 < hi; b0 += blockUnits {
			n0, n1 := b0*nr, min(min(b0+blockUnits, hi)*nr, N)
			for m0 := 0; m0 < M; m0 += mr {
				mt := min(mr, M-m0)
				row := tiles[mt-1]
				for n := n0; n < n1; n += nr {
					nt := min(nr, n1-n)
					row[nt-1](&x[m0*K], K, &w.Data[n*rowBytes], rowBytes, kmain, &dst[m0*N+n], N)
				}
			}
			if kmain < K {
				addTail(dst, x, M, w, kmain, n0, n1)
			}
		}
	})
}

// addTail adds the products of the last K%kstep elements to the tile
// results, one at a time in k order: the same sequence for every element.
func addTail(dst, x []float32, M int, w *Weight, k0, n0, n1 int) {
	K, N := w.Cols, w.Rows
	rowBytes := w.Type.RowBytes(K)
	for m := range M {
		xr := x[m*K : m*K+K]
		for n := n0; n < n1; n++ {
			wr := w.Data[n*rowBytes : n*rowBytes+rowBytes]
			s := dst[m*N+n]
			for k := k0; k < K; k++ {
				s += float32(xr[k] * weightAt(w.Type, wr, k))
			}
			dst[m*N+n] = s
		}
	}
}

// weightAt returns element k of a float weight row, widened to f32.
func weightAt(t gguf.Type, row []byte, k int) float32 {
	switch t {
	case gguf.TypeF32:
		return math.Float32frombits(binary.LittleEndian.Uint32(row[4*k:]))
	case gguf.TypeF16:
		return f16ToF32(binary.LittleEndian.Uint16(row[2*k:]))
	default:
		return bf16ToF32(binary.LittleEndian.Uint16(row[2*k:]))
	}
}

// matMulRef is the pure-Go MatMul for float weights: one sequential dot
// product per element (so trivially the same whatever M is), with the
// activations rounded as on the SIMD path.
func matMulRef(p *Pool, dst, x []float32, M int, w *Weight) {
	K, N := w.Cols, w.Rows
	rowBytes := w.Type.RowBytes(K)
	p.For(N, func(lo, hi int) {
		xr := make([]float32, K)
		for m := range M {
			switch w.Type {
			case gguf.TypeF16:
				roundF16Ref(xr, x[m*K:m*K+K])
			case gguf.TypeBF16:
				roundBF16(xr, x[m*K:m*K+K])
			default:
				copy(xr, x[m*K:m*K+K])
			}
			for n := lo; n < hi; n++ {
				wr := w.Data[n*rowBytes : n*rowBytes+rowBytes]
				var s float32
				for k := range K {
					s += float32(xr[k] * weightAt(w.Type, wr, k))
				}
				dst[m*N+n] = s
			}
		}
	})
}

// f32Scratch lends MatMul a float32 buffer of n elements from the pool
// (or a fresh one for a nil pool); release gives it back.
func (p *Pool) f32Scratch(n int) ([]float32, func()) {
	b, release := p.byteScratch(4 * n)
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n), release
}

// byteScratch lends n bytes, 64-byte aligned, held until release.
func (p *Pool) byteScratch(n int) ([]byte, func()) {
	if p == nil {
		return alignedBytes(n), func() {}
	}
	p.scratchMu.Lock()
	if len(p.scratch) < n {
		p.scratch = alignedBytes(n)
	}
	return p.scratch[:n], p.scratchMu.Unlock
}

func alignedBytes(n int) []byte {
	b := make([]byte, n+64)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & 63)
	return b[off : off+n : off+n]
}
