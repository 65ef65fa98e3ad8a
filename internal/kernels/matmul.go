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
	// pf[t][i-1][j-1] (i <= len(pf[t])) is the i×j kernel that also
	// prefetches the next j weight rows: the same arithmetic, for calls
	// whose M fits one tile (decode of a few streams sweeps the weights
	// once, so their bytes are worth fetching ahead). Optional.
	pf [3][][]tileFunc
	// roundF16 is roundF16Ref, vectorized.
	roundF16 func(dst, src []float32)
}

// simd is the kernel family chosen at start-up; nil means the pure-Go
// reference path.
var simd *tileKernels

// SIMD names the float kernels' instruction set in use: avx512, avx2 or go (portable).
func SIMD() string {
	if simd == nil {
		return "go"
	}
	return simd.name
}

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
	checkMatMul(dst, x, M, w)
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

// checkMatMul panics on mis-sized MatMul arguments (programmer bugs).
func checkMatMul(dst, x []float32, M int, w *Weight) {
	K, N := w.Cols, w.Rows
	if M < 0 || len(x) < M*K || len(dst) < M*N {
		panic(fmt.Sprintf("kernels: MatMul M=%d K=%d N=%d with len(x)=%d len(dst)=%d", M, K, N, len(x), len(dst)))
	}
	if len(w.Data) < N*w.Type.RowBytes(K) {
		panic(fmt.Sprintf("kernels: MatMul %v weight %dx%d has %d bytes, need %d", w.Type, N, K, len(w.Data), N*w.Type.RowBytes(K)))
	}
}

// matMulFloat is MatMul for float weights with the tile family ks (nil:
// the pure-Go reference).
func matMulFloat(p *Pool, ks *tileKernels, dst, x []float32, M int, w *Weight) {
	if ks == nil {
		matMulRef(p, dst, x, M, w)
		return
	}
	j := p.lockMatJob()
	defer p.unlockMatJob()
	K, N := w.Cols, w.Rows
	*j = matJob{run: j.run, round: j.round, xbuf: j.xbuf,
		ks: ks, dst: dst, x: x[:M*K], M: M, w: w,
		rowBytes: w.Type.RowBytes(K), kmain: K / ks.kstep * ks.kstep}
	j.tiles = ks.tiles[typeIndex(w.Type)]
	if pf := ks.pf[typeIndex(w.Type)]; M <= len(pf) && M <= ks.mr {
		j.tiles = pf
	}
	j.blockUnits = max(1, l2PanelBytes/(j.rowBytes*ks.nr))
	if w.Type != gguf.TypeF32 {
		if len(j.xbuf) < M*K {
			j.xbuf = alignedFloats(M * K)
		}
		j.src, j.x = j.x, j.xbuf[:M*K]
		j.roundFn = roundBF16
		if w.Type == gguf.TypeF16 {
			j.roundFn = ks.roundF16
		}
		if M*K <= prepInline {
			j.round(0, M)
		} else {
			p.For(M, j.round)
		}
	}
	p.For((N+ks.nr-1)/ks.nr, j.run)
	*j = matJob{run: j.run, round: j.round, xbuf: j.xbuf} // drop references to the caller's data
}

// matJob is one MatMul call's state. A Pool keeps one (protected by
// Pool.matMu) whose method values are made once, so a call allocates
// nothing.
type matJob struct {
	run, round func(lo, hi int) // j.tilesRange and j.roundRange, bound once
	xbuf       []float32        // rounded activations, grown on demand

	ks         *tileKernels
	tiles      [][]tileFunc
	dst, x     []float32 // x: what the tiles read (xbuf when rounded)
	src        []float32 // the caller's x when rounding
	roundFn    func(dst, src []float32)
	M          int
	w          *Weight
	rowBytes   int
	kmain      int // K rounded down to ks.kstep
	blockUnits int // N-block size in units of ks.nr rows
}

func newMatJob() *matJob {
	j := &matJob{}
	j.run, j.round = j.tilesRange, j.roundRange
	return j
}

func (p *Pool) lockMatJob() *matJob {
	if p == nil {
		return newMatJob()
	}
	p.matMu.Lock()
	return p.mat
}

func (p *Pool) unlockMatJob() {
	if p != nil {
		p.matMu.Unlock()
	}
}

// roundRange rounds activation rows [lo, hi).
func (j *matJob) roundRange(lo, hi int) {
	K := j.w.Cols
	j.roundFn(j.x[lo*K:hi*K], j.src[lo*K:hi*K])
}

// tilesRange computes the weight rows of units [lo, hi) (ks.nr rows each)
// for all M rows.
//
// The range is walked in N-blocks that fit in L2; for each block all M
// tiles sweep over it, so a block of W is read from memory once per call
// and an x tile stays in L1 while it meets every row group of the block.
func (j *matJob) tilesRange(lo, hi int) {
	K, N := j.w.Cols, j.w.Rows
	mr, nr := j.ks.mr, j.ks.nr
	x, dst, data := j.x, j.dst, j.w.Data
	for b0 := lo; b0 < hi; b0 += j.blockUnits {
		n0, n1 := b0*nr, min(min(b0+j.blockUnits, hi)*nr, N)
		for m0 := 0; m0 < j.M; m0 += mr {
			row := j.tiles[min(mr, j.M-m0)-1]
			for n := n0; n < n1; n += nr {
				row[min(nr, n1-n)-1](&x[m0*K], K, &data[n*j.rowBytes], j.rowBytes, j.kmain, &dst[m0*N+n], N)
			}
		}
		if j.kmain < K {
			addTail(dst, x, j.M, j.w, j.kmain, n0, n1)
		}
	}
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
	xs := make([]float32, M*K)
	switch w.Type {
	case gguf.TypeF16:
		roundF16Ref(xs, x[:M*K])
	case gguf.TypeBF16:
		roundBF16(xs, x[:M*K])
	default:
		copy(xs, x[:M*K])
	}
	p.For(N, func(lo, hi int) {
		wr := make([]float32, K)
		for n := lo; n < hi; n++ {
			row := w.Data[n*rowBytes : n*rowBytes+rowBytes]
			for k := range wr {
				wr[k] = weightAt(w.Type, row, k)
			}
			for m := range M {
				xr := xs[m*K : m*K+K]
				var s float32
				for k, v := range wr {
					s += float32(xr[k] * v)
				}
				dst[m*N+n] = s
			}
		}
	})
}

func alignedFloats(n int) []float32 {
	b := alignedBytes(4 * n)
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func alignedBytes(n int) []byte {
	b := make([]byte, n+64)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & 63)
	return b[off : off+n : off+n]
}
